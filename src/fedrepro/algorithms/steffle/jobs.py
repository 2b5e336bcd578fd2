"""Pipeline jobs of the SteFFLe paper: one job = one (data set, method, fairness, N, h)
panel family, with every seed, epsilon and lambda of it trained as one program.

Spec keys (built by `fedrepro.experiments.steffle`):
  method, fairness ("dp" | "eo"), num_silos, h, epsilons (numbers or "inf"),
  lambdas, train (the method's hyper-parameters). One epoch is one round of `fedrepro.fl.loop`
  (what the job's `checkpoint_every` counts).
Inputs: data (arrays.npz), partition (Algorithm 3 silos; federated methods only).
A pipeline job trains several runs one after another (`run_group`): each as the job it would be
alone, with its own spec, inputs, outputs, scratch folder and cell store.
Outputs: metrics (Parquet: seed, eps, lam, epoch, kind = eval | final, error,
dp_violation, eo_violation) and summary (JSON: spec, rounds, per-eps privacy
record: sigmas, Theorem 3.3 precondition flags, library epsilon, time).

The methods and their traits are the table in `fedrepro.algorithms.steffle`:
steffle / steffle_nonprivate (federated, Algorithm 1), dp_fermi / fermi (central N = 1:
Lowy et al. 2023 / 2022b, the same program on one silo with n~ = n), fedavg / erm (lambda = 0,
no noise; federated with one local step per round, i.e. FedSGD: the paper gives no local-step
count, and one step keeps the round and batch budget of SteFFLe / central SGD), tran2021 and
ling2024 (FedFDP as published) and ling2024_groupgap (the earlier group-gap adaptation).
Each method's table entry names the module that runs it (`sgda.py`, `tran2021.py`,
`ling2024.py`): its `run_job` calls `run_job` here, which asks that module for the method's
`config(spec)` and `build(...)` (its trainer and noise); everything else is shared here.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from fedrepro.atomic import atomic_write, atomic_write_text
from fedrepro.data.arrays import load_prepared
from fedrepro.data.partition import load_partition
from fedrepro.eval import health
from fedrepro.fl.loop import Checkpoint
from fedrepro.pipeline import Job, claim_scratch, scratch_for
from fedrepro.privacy import steffle as accounting
from fedrepro.registry import resolve
from fedrepro.store import Store, state_of

from . import METHODS, has_trait
from .base import BatchSchedule, FairData

log = logging.getLogger(__name__)


def load_data(job) -> FairData:
    prepared = load_prepared(Path(job.input["data"]).parent)
    for key in ("s_train", "s_test"):
        if key not in prepared.extras:
            raise KeyError(f"{job.input['data']}: SteFFLe needs the sensitive attribute {key!r}")
    if has_trait(job.spec["method"], "federated"):
        silos = load_partition(job.input["partition"]).clients
    else:
        silos = [np.arange(len(prepared.y_train))]
    return fair_data(prepared, silos)


def fair_data(prepared, silos) -> FairData:
    """A prepared fairness data set (`fedrepro.data.arrays.load_prepared`) split into `silos`."""
    return FairData.from_arrays(
        prepared.x_train,
        prepared.y_train,
        prepared.extras["s_train"],
        prepared.x_test,
        prepared.y_test,
        prepared.extras["s_test"],
        silos,
        features=prepared.meta.get("feature_names"),
    )


def partition_record(job) -> dict | None:
    """Which Algorithm 3 split a federated job trained on: its tag, age sort and (quicksort) numpy's
    sort implementation, whose tie order decides the silos; None for the central methods."""
    if not has_trait(job.spec["method"], "federated"):
        return None
    meta = load_partition(job.input["partition"]).meta
    return {
        "tag": meta.get("tag"),
        "age_sort": meta.get("params", {}).get("sort", "stable"),
        "sort_impl": meta.get("sort_impl"),
    }


def grid(spec: dict) -> tuple[list, list[float]]:
    """(eps, lambda) of every setting, eps-major; non-private / non-fair methods collapse their axis."""
    method = spec["method"]
    epsilons = list(spec["epsilons"]) if has_trait(method, "private") else ["inf"]
    lambdas = [float(v) for v in spec["lambdas"]] if has_trait(method, "fair") else [0.0]
    return [(e, lam) for e in epsilons for lam in lambdas], epsilons


def privacy_context(data: FairData, cfg) -> dict:
    """What the accountant needs, from the same BatchSchedule the trainer uses (rounds, m, q, and with
    shuffle_keep_last every silo's real batch sizes as (size, rounds) pairs); rho (Theorem 3.3's,
    marginal) and rho_w (the smallest p that h_w divides by, per fairness notion)."""
    n = len(data.y)
    sizes = data.silo_sizes
    schedule = BatchSchedule(sizes, cfg.batch, cfg.sampling)
    rho = accounting.rho_from_attribute(data.s.numpy(), data.k)
    return {
        "n": n,
        "silo_sizes": sizes,
        "rounds": cfg.epochs * schedule.rounds_per_epoch,
        "batch": schedule.batch,
        "rho": rho,
        "rho_w": accounting.rho_for_fairness(data.s.numpy(), data.y.numpy(), data.k, cfg.fairness),
        "delta": accounting.delta_for_n(n),
        "sampling": cfg.sampling,
        "sampling_note": accounting.SAMPLING_NOTES[cfg.sampling],
        "batch_sizes": real_batch_sizes(schedule, cfg.epochs),
    }


def real_batch_sizes(schedule: BatchSchedule, epochs: int) -> list[list[tuple[int, int]]] | None:
    """Per silo, (batch size, rounds) over the run when batches are not all of size m, else None."""
    if schedule.sampling != "shuffle_keep_last":
        return None
    return [
        sorted((size, count * epochs) for size, count in Counter(sizes).items())
        for sizes in schedule.epoch_batch_sizes()
    ]


def method_module(method: str):
    """The module that runs `method` (its table entry's): its `config(spec)` and
    `build(spec, data, seeds, settings, epsilons)`."""
    return importlib.import_module(METHODS[method].entry.split(":")[0])


def build(spec: dict, data: FairData, seeds: list[int], only: list | None = None):
    """The trainer of one job (of the settings `only`, default all; None if there are none),
    the privacy record of every epsilon of the job, and the settings."""
    method = spec["method"]
    if method not in METHODS:
        raise KeyError(f"unknown SteFFLe method {method!r}; allowed values: {', '.join(METHODS)}")
    if has_trait(method, "central"):
        data = data.centralised()
    settings, epsilons = grid(spec)
    settings = settings if only is None else list(only)
    return (*method_module(method).build(spec, data, seeds, settings, epsilons), settings)


def metrics_frame(result, seeds, settings) -> pd.DataFrame:
    """Long table: one line per (seed, eps, lambda, evaluation) plus the returned iterate (kind=final)."""
    rows = []
    evaluations = [(epoch, "eval", m) for epoch, m in result.history]
    evaluations.append((result.history[-1][0], "final", result.final))
    for epoch, kind, metrics in evaluations:
        for si, seed in enumerate(seeds):
            for gi, (eps, lam) in enumerate(settings):
                rows.append(
                    {
                        "seed": seed,
                        "eps": str(eps),
                        "lam": lam,
                        "epoch": epoch,
                        "kind": kind,
                        **{k: float(v[si, gi]) for k, v in metrics.items()},
                    }
                )
    return pd.DataFrame(rows)


def _jsonable(value):
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value


GRID_KEYS = ("epsilons", "lambdas")  # keys a cell's numbers do not depend on


def cell_store(job) -> Store:
    """Finished (eps, lambda) cells (`fedrepro.store`) beside the job's outputs (not outputs: a re-run
    of the job keeps them)."""
    return Store(Path(job.scratch).parent / ".cells", job)


def cell_slot(setting) -> str:
    """One cell in words; repr keeps lambdas that agree to 6 digits apart."""
    return f"eps{setting[0]}_lam{float(setting[1])!r}"


def cell_state(job, setting) -> str:
    """What one (eps, lambda) cell's numbers depend on: the job's spec without its grid lists,
    the seeds, every input file (data, partition, code fingerprints) and the cell itself.
    Settings train independently (common random numbers per seed, GridTrainer), so a cell
    trained beside other cells gives the numbers it would give alone."""
    spec = {k: v for k, v in job.spec.items() if k not in GRID_KEYS}
    return state_of(job, {**spec, "cell": [str(setting[0]), float(setting[1])]}, job.seeds)


def _load_cells(job, settings) -> dict:
    """The stored metrics of every cell of `settings` found in the store."""
    store, found = cell_store(job), {}
    for setting in settings:
        frame = store.load(
            cell_slot(setting), cell_state(job, setting), lambda f: pd.read_parquet(f / "metrics.parquet")
        )
        if frame is not None:
            found[setting] = frame
    return found


def _save_cells(job, frame: pd.DataFrame, settings) -> None:
    store = cell_store(job)
    for eps, lam in settings:
        rows = frame[(frame["eps"] == str(eps)) & (frame["lam"] == lam)]
        store.save(
            cell_slot((eps, lam)),
            cell_state(job, (eps, lam)),
            {"metrics.parquet": lambda tmp, rows=rows: rows.to_parquet(tmp, index=False)},
        )


def _seed_health(rows: pd.DataFrame) -> health.Health:
    """diverged if a metric of this seed is NaN or infinite in any cell (the report names such
    cells; constant predictors are judged per cell by the report, not per seed)."""
    values = rows[["error", "dp_violation", "eo_violation"]].to_numpy(dtype=float)
    if np.isfinite(values).all():
        return health.OK
    bad = rows[~np.isfinite(values).all(axis=1)].iloc[0]
    return health.Health(
        "diverged", f"non-finite metric at eps={bad['eps']}, lambda={bad['lam']}, epoch {int(bad['epoch'])}"
    )


def run_job(job) -> None:
    """Train the job's grid, except the (eps, lambda) cells already in the store of finished work: adding a
    lambda or an epsilon to a grid trains only the new cells (still as one batched program)."""
    torch.set_num_threads(max(1, int(job.threads)))
    if not job.seeds:
        raise ValueError("a SteFFLe job needs seeds (the {seeds} wildcard)")
    start = time.time()
    data = load_data(job)
    settings, _ = grid(job.spec)
    cached = _load_cells(job, settings)
    todo = [st for st in settings if st not in cached]
    trainer, privacy, _ = build(job.spec, data, job.seeds, only=todo)
    checkpoint = Checkpoint(Path(job.scratch) / "state.pt")
    claim_scratch(job)
    frames, rounds = [], None
    if trainer is not None:
        result = trainer.run(checkpoint)
        fresh = metrics_frame(result, job.seeds, todo)
        _save_cells(job, fresh, todo)
        frames.append(fresh)
        rounds = result.rounds
    frames += list(cached.values())
    order = {(str(e), float(lam)): i for i, (e, lam) in enumerate(settings)}
    metrics = pd.concat(frames, ignore_index=True)
    metrics = metrics.assign(_cell=[order[(e, lam)] for e, lam in zip(metrics["eps"], metrics["lam"])])
    metrics = metrics.sort_values(["_cell", "epoch", "kind", "seed"], kind="stable").drop(columns="_cell")
    atomic_write(job.out("metrics"), lambda tmp: metrics.to_parquet(tmp, index=False))
    log.info("trained %d of %d (eps, lambda) cells; %d from the cell cache", len(todo), len(settings), len(cached))
    if rounds is None:
        cfg = method_module(job.spec["method"]).config(job.spec)
        sizes = [len(data.y)] if has_trait(job.spec["method"], "central") else data.silo_sizes
        rounds = cfg.epochs * BatchSchedule(sizes, cfg.batch, cfg.sampling).rounds_per_epoch
    summary = {
        "spec": job.spec,
        "rounds": rounds,
        "privacy": privacy,
        "partition": partition_record(job),
        "seconds": time.time() - start,
        "models": len(job.seeds) * len(settings),
        "cells_trained": len(todo),
        "cells_cached": len(cached),
        "seeds": {str(s): {"final": {}, **_seed_health(metrics[metrics["seed"] == s]).as_dict()} for s in job.seeds},
    }
    atomic_write_text(job.out("summary"), json.dumps(_jsonable(summary), indent=1))
    log.info("trained %d models in %.1f s", summary["models"], summary["seconds"])


def run_job_of(job, i: int) -> Job:
    """Run i of a training job (`fedrepro.experiments.steffle.group_spec`) as a job of its own: its spec,
    the job's data and partition with the code of its own module (so its cells' state is what a job of
    that run alone would have), its outputs metrics_i and summary_i and its own scratch folder."""
    run = job.spec["runs"][i]
    output = {"metrics": job.output[f"metrics_{i}"], "summary": job.output[f"summary_{i}"]}
    return Job(
        spec=run["spec"],
        output=output,
        input={"data": job.input["data"], "partition": job.input.get("partition", []), "code": job.input[run["code"]]},
        seeds=list(job.seeds),
        log=job.log,
        threads=job.threads,
        wildcards=job.wildcards,
        scratch=scratch_for(output["metrics"]),
        script=job.script,
        results=job.results,
        code=job.code,
    )


def run_group(job) -> None:
    """Pipeline entry of a SteFFLe training job: every run of it in turn, each by its method's entry."""
    for i, run in enumerate(job.spec["runs"]):
        log.info("run %d of %d: %s %s", i + 1, len(job.spec["runs"]), run["method"], run["setting"])
        resolve(METHODS[run["method"]].entry)(run_job_of(job, i))
