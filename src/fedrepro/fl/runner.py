"""One pipeline job = one method and setting over a batch of seeds.

Each seed runs with its own checkpoint under `job.scratch`, so a killed job resumes at the
seed and round where it stopped; a job whose settings or inputs changed since the scratch was
written starts afresh (`fedrepro.pipeline.claim_scratch`). The job's outputs are written only
once every seed is done.

A finished seed's metrics, summary and last checkpoint are kept in the store of finished work
(`fedrepro.store`), shared by every job of the same run whatever its seed list
(`<setting folder>/.seeds/seed<s>/<key>/`, the key a hash of the spec, the seed and the input
files, code included): adding a seed to a paper's `seeds` makes a new job (`s0_1` -> `s0_1_2`)
that runs only the new seed. A seed does not depend on which other seeds share its job (each is
seeded on its own), so reuse is exact. Every file is written atomically; an unreadable entry is
named in the log and recomputed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from fedrepro.atomic import atomic_write, atomic_write_text
from fedrepro.eval.health import Health, check_finite, worst
from fedrepro.fl import seeding
from fedrepro.fl.loop import Checkpoint, FederatedAlgorithm, run_rounds
from fedrepro.pipeline import Job, claim_scratch
from fedrepro.store import Store, share, state_of

log = logging.getLogger(__name__)


def run_seeds(
    job: Job,
    build: Callable[[int], FederatedAlgorithm],
    num_rounds: int,
    eval_every: int = 1,
    checkpoint_every: int | None = None,
) -> pd.DataFrame:
    """Run `build(seed)` for `num_rounds` per seed; write metrics (Parquet) and summary (JSON).
    `checkpoint_every`: None (the pipeline) takes the job's `checkpoint_every` (fedrepro.fl.loop.Checkpoint)."""
    claim_scratch(job)
    frames, summaries = [], {}
    for seed in job.seeds:
        metrics, summary = _run_one_seed(job, build, seed, num_rounds, eval_every, checkpoint_every)
        frames.append(metrics)
        summaries[str(seed)] = summary
    metrics = pd.concat(frames, ignore_index=True)
    write_outputs(job, metrics, summaries)
    return metrics


def seed_store(job: Job) -> Store:
    """Finished seeds shared by the jobs of one run whatever their seed lists (`fedrepro.store`):
    `<setting folder>/.seeds/seed<s>/<key>/` for pipeline jobs (a `{seeds}` wildcard), else
    under the job's own scratch."""
    if "seeds" not in job.wildcards:
        return Store(job.scratch / ".seeds", job)
    return Store(Path(job.output["metrics"]).parent.parent / ".seeds", job)


def seed_slot(job: Job, seed: int) -> tuple[Store, str, str]:
    """Where a finished seed is kept: (store, slot, state); its entry is `store.entry(slot, state)`."""
    return seed_store(job), f"seed{seed}", state_of(job, job.spec, [seed])


def _read_seed(folder: Path):
    return pd.read_parquet(folder / "metrics.parquet"), json.loads((folder / "summary.json").read_text())


def _run_one_seed(job, build, seed, num_rounds, eval_every, checkpoint_every):
    store, slot, state = seed_slot(job, seed)
    checkpoint_file = job.scratch / f"seed{seed}.pt"
    finished = store.load(slot, state, _read_seed)
    if finished is not None:
        log.info("seed %d already finished, reusing %s", seed, store.entry(slot, state))
        share(store.entry(slot, state) / "checkpoint.pt", checkpoint_file)  # read by later stages (FedSC backbones)
        return finished
    seeding.seed_everything(seed)
    algorithm = build(seed)
    checkpoint = (
        Checkpoint(checkpoint_file) if checkpoint_every is None else Checkpoint(checkpoint_file, checkpoint_every)
    )
    metrics = run_rounds(algorithm, num_rounds, checkpoint, eval_every, desc=f"seed {seed}")
    metrics.insert(0, "seed", seed)
    summary = {"final": _last_values(metrics)}
    if hasattr(algorithm, "summary"):
        summary.update(algorithm.summary())
    summary.update(run_health(metrics, summary).as_dict())
    store.save(
        slot,
        state,
        {
            "checkpoint.pt": checkpoint_file,
            "metrics.parquet": lambda tmp: metrics.to_parquet(tmp, index=False),
            "summary.json": lambda tmp: tmp.write_text(json.dumps(summary, indent=2, default=float)),
        },
    )
    return metrics, summary


def run_health(metrics: pd.DataFrame, summary: dict) -> Health:
    """A seed's health: diverged if any metric went NaN/inf, else whatever the algorithm's own
    summary says (a collapse or chance check it made), else ok."""
    return worst(check_finite(metrics.drop(columns=["seed"], errors="ignore")), Health.from_dict(summary))


def _last_values(metrics: pd.DataFrame) -> dict:
    """Last non-missing value of every metric column."""
    values = {}
    for column in metrics.columns:
        if column in ("seed",):
            continue
        series = metrics[column].dropna()
        if len(series):
            values[column] = series.iloc[-1].item() if hasattr(series.iloc[-1], "item") else series.iloc[-1]
    return values


def write_outputs(job: Job, metrics: pd.DataFrame, summaries: dict) -> None:
    """metrics.parquet with a seed column, summary.json with the spec and per-seed summaries."""
    atomic_write(job.out("metrics"), lambda tmp: metrics.to_parquet(tmp, index=False))
    summary = {"spec": job.spec, "seeds": summaries}
    atomic_write_text(job.out("summary"), json.dumps(summary, indent=2, default=float))


def read_summary(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())
