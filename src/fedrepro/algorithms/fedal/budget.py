"""A FedAL run read from a longer run of the same setting (issue 30; Table IX's |P| = 1000 cells).

Nothing a FedAL run computes reads its budget `iterations` except the number of rounds and the evaluation
cadence (`jobs.run`): a seeded run of k iterations is, round for round, the first rounds of a run of n > k
iterations of the same setting. So the longer run (`run_keeping`, spec key `read_at`: the budgets of the
shorter runs) keeps each seed's state after the round before each shorter run's last one
(`fedrepro.fl.loop.Checkpoint.keep`) in `read_at.pt` beside its outputs, and the shorter run
(`run_read_at`, input `longer`: the longer run's summary) starts every seed from that state and runs its
last round itself: it evaluates there and writes the summary (final accuracies, health, the
discriminator's last loss) as from round 1. Its metric rows before that round are the longer run's
training metrics (those logged every round); the longer run's evaluations, at another cadence, are left
out, so the shorter run's only evaluation is its last. Both wrap the method's entry (spec key `entry`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from fedrepro.algorithms.fedal.jobs import train_config
from fedrepro.algorithms.fedal.schedule import rounds_for
from fedrepro.fl.loop import KEEP_ENV, Checkpoint, start_from
from fedrepro.pipeline import claim_scratch
from fedrepro.registry import resolve

READ_AT = "read_at"  # spec of the longer run: the budgets (iterations) of the shorter runs read from it
STATES = "read_at.pt"  # beside the longer run's outputs: {budget: {seed: state after the round before its last}}


def kept_round(spec: dict, iterations: int) -> int:
    """The round after which the run of `iterations` leaves one round to run itself."""
    return rounds_for(iterations, train_config(spec).tau, spec.get("iteration_unit", "step")) - 1


def run_keeping(job) -> None:
    """The longer run, keeping each seed's state for the shorter runs of `spec["read_at"]`."""
    keep = {budget: kept_round(job.spec, budget) for budget in job.spec[READ_AT]}
    keep = {budget: r for budget, r in keep.items() if r >= 1}  # a one-round budget runs on its own
    claim_scratch(job)
    for seed in job.seeds:  # a seed finished before without its kept states trains again to keep them
        if not all(Checkpoint(job.scratch / f"seed{seed}.pt", keep=()).kept(r).exists() for r in keep.values()):
            _forget_finished(job, seed)
    previous = os.environ.get(KEEP_ENV)
    os.environ[KEEP_ENV] = ",".join(str(r) for r in keep.values())
    try:
        resolve(job.spec["entry"])(job)
    finally:
        os.environ.pop(KEEP_ENV)
        if previous is not None:
            os.environ[KEEP_ENV] = previous
    states = {
        budget: {seed: _load(Checkpoint(job.scratch / f"seed{seed}.pt", keep=()).kept(r)) for seed in job.seeds}
        for budget, r in keep.items()
    }
    torch.save(states, Path(job.out("summary")).with_name(STATES))


def run_read_at(job) -> None:
    """The shorter run: every seed from the longer run's state after the round before its last."""
    longer = job.input["longer"]
    longer = longer[0] if isinstance(longer, (list, tuple)) else longer  # Snakemake: a list of one
    path = Path(longer).with_name(STATES)
    budget = int(job.spec["iterations"])
    if kept_round(job.spec, budget) < 1:
        resolve(job.spec["entry"])(job)
        return
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run the longer run again (snakemake -R {longer})")
    states = torch.load(path, map_location="cpu", weights_only=False).get(budget)
    if states is None or any(seed not in states for seed in job.seeds):
        raise ValueError(f"{path} keeps no state for {budget} iterations and seeds {job.seeds}")
    claim_scratch(job)
    for seed in job.seeds:
        if states[seed]["rounds_done"] != kept_round(job.spec, budget):
            raise ValueError(f"{path}: seed {seed} was kept after round {states[seed]['rounds_done']}")
        start_from(job.scratch / f"seed{seed}.pt", {**states[seed], "rows": _every_round_only(states[seed]["rows"])})
    resolve(job.spec["entry"])(job)


def _every_round_only(rows: list[dict]) -> list[dict]:
    """The rows' metrics logged every round: the longer run's evaluations, at its own cadence, are left out
    (a run with another cadence than its evaluation interval reads as diverged, eval.health.check_finite)."""
    every = set.intersection(*(set(row) for row in rows)) if rows else set()
    return [{k: v for k, v in row.items() if k in every} for row in rows]


def _load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def _forget_finished(job, seed: int) -> None:
    from fedrepro.fl.runner import seed_slot

    store, slot, state = seed_slot(job, seed)
    shutil.rmtree(store.entry(slot, state), ignore_errors=True)
