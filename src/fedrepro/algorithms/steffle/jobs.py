"""Pipeline jobs of the SteFFLe paper: one job = one (data set, method, fairness, N, h)
panel family, with every seed, epsilon and lambda of it trained as one program.

Spec keys (built by `fedrepro.experiments.steffle`):
  method, fairness ("dp" | "eo"), num_silos, h, epsilons (numbers or "inf"),
  lambdas, train (the method's hyper-parameters), checkpoint_every (epochs: one epoch is
  one round of `fedrepro.fl.loop`).
Inputs: data (arrays.npz), partition (Algorithm 3 silos; federated methods only).
Outputs: metrics (Parquet: seed, eps, lam, epoch, kind = eval | final, error,
dp_violation, eo_violation) and summary (JSON: spec, rounds, per-eps privacy
record: sigmas, Theorem 3.3 precondition flags, library epsilon, time).

The methods and their traits are the table in `fedrepro.algorithms.steffle`:
steffle / steffle_nonprivate (federated, Algorithm 1), dp_fermi / fermi (central N = 1:
Lowy et al. 2023 / 2022b, the same program on one silo with n~ = n), fedavg / erm (lambda = 0,
no noise; federated with one local step per round, i.e. FedSGD: the paper gives no local-step
count, and one step keeps the round and batch budget of SteFFLe / central SGD), tran2021 and
ling2024 (FedFDP as published) and ling2024_groupgap (the earlier group-gap adaptation), in
`baselines.py`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from fedrepro.data.arrays import load_prepared
from fedrepro.data.partition import load_partition
from fedrepro.eval import health
from fedrepro.fl.loop import Checkpoint
from fedrepro.pipeline import atomic_write, claim_scratch, fingerprint
from fedrepro.privacy import accountant
from fedrepro.privacy import steffle as accounting

from . import METHODS, with_trait
from .base import BatchSchedule, FairData
from .baselines import BaselineConfig, FedFDPTrainer, GroupGapTrainer, TranTrainer
from .sgda import SGDAConfig, SteffleTrainer

log = logging.getLogger(__name__)

FEDERATED = with_trait("federated")
CENTRAL = with_trait("central")
SGDA = with_trait("sgda")


def load_data(job) -> FairData:
    prepared = load_prepared(Path(job.input["data"]).parent)
    for key in ("s_train", "s_test"):
        if key not in prepared.extras:
            raise KeyError(f"{job.input['data']}: SteFFLe needs the sensitive attribute {key!r}")
    if job.spec["method"] in FEDERATED:
        silos = load_partition(job.input["partition"]).clients
    else:
        silos = [np.arange(len(prepared.y_train))]
    return FairData.from_arrays(prepared.x_train, prepared.y_train, prepared.extras["s_train"],
                                prepared.x_test, prepared.y_test, prepared.extras["s_test"], silos)


def grid(spec: dict) -> tuple[list, list[float]]:
    """(eps, lambda) of every setting, eps-major; non-private / non-fair methods collapse their axis."""
    method = spec["method"]
    traits = METHODS[method].traits
    epsilons = list(spec["epsilons"]) if "private" in traits else ["inf"]
    lambdas = [float(v) for v in spec["lambdas"]] if "fair" in traits else [0.0]
    return [(e, lam) for e in epsilons for lam in lambdas], epsilons


def _sgda_config(spec: dict) -> SGDAConfig:
    return SGDAConfig(fairness=spec["fairness"], **spec["train"])


def _baseline_config(spec: dict) -> BaselineConfig:
    return BaselineConfig(fairness=spec["fairness"], **spec["train"])


def _privacy_context(data: FairData, cfg) -> dict:
    """What the accountant needs, from the same BatchSchedule the trainer uses (rounds, m, q)."""
    n = len(data.y)
    sizes = data.silo_sizes
    schedule = BatchSchedule(sizes, cfg.batch, cfg.sampling)
    rho = accounting.rho_from_attribute(data.s.numpy(), data.k)
    return {"n": n, "silo_sizes": sizes, "rounds": cfg.epochs * schedule.rounds_per_epoch, "batch": schedule.batch,
            "rho": rho, "delta": accounting.delta_for_n(n), "sampling": cfg.sampling,
            "sampling_note": accounting.SAMPLING_NOTES[cfg.sampling]}


def _build_steffle(spec, data, seeds, settings, epsilons):
    cfg = _sgda_config(spec)
    ctx = _privacy_context(data, cfg)
    lambdas = sorted({lam for _, lam in grid(spec)[0]})
    noise = {str(e): accounting.steffle_noise(e, ctx["delta"], ctx["rounds"], ctx["silo_sizes"], ctx["rho"],
                                              cfg.clip, cfg.radius, ctx["batch"], cfg.compat_refcode,
                                              cfg.sampling, lambdas, cfg.noise) for e in epsilons}
    for e, record in noise.items():
        if record["precondition_messages"]:
            log.warning("eps=%s: Theorem 3.3 preconditions broken: %s", e, "; ".join(record["precondition_messages"]))
    lam = [lam for _, lam in settings]
    sig_t = [noise[str(e)]["sigma_theta"] for e, _ in settings]
    sig_w = [noise[str(e)]["sigma_w"] for e, _ in settings]
    trainer = SteffleTrainer(data, cfg, seeds, lam, sig_t, sig_w) if settings else None
    return trainer, {**ctx, "per_eps": noise}


def _calibrated(eps, ctx, compositions, steps: int, rate: float) -> dict:
    """z calibrated (RDP) to the target eps, and the realised PLD epsilon of the same compositions."""
    base = {"sampling": ctx["sampling"], "sampling_note": ctx["sampling_note"], "delta": ctx["delta"]}
    if not accounting.is_private(eps):
        return {**base, "eps": "inf", "noise_multiplier": 0.0, "library_epsilon": math.inf,
                "realised_epsilon": math.inf, "realised_epsilon_rdp": math.inf}
    z0 = accounting.rough_multiplier(float(eps), ctx["delta"], steps, rate)
    z, library = accounting.calibrate_multiplier(float(eps), ctx["delta"], compositions, z0=z0)
    realised = accounting.realised_epsilon(compositions(z), ctx["delta"])
    return {**base, "eps": float(eps), "noise_multiplier": z, "library_epsilon": library,
            "realised_epsilon": realised["pld"], "realised_epsilon_rdp": realised["rdp"]}


def _build_tran(spec, data, seeds, settings, epsilons):
    cfg = _baseline_config(spec)
    ctx = _privacy_context(data, cfg)
    q = min(1.0, ctx["batch"] / ctx["n"])

    def compositions(z):  # T primal releases (q = m/n) + one dual release per epoch (q = 1)
        return [accountant.GaussianComposition(z, ctx["rounds"], q, "PF-LD primal"),
                accountant.GaussianComposition(z, cfg.epochs, 1.0, "PF-LD dual")]

    noise = {str(e): _calibrated(e, ctx, compositions, ctx["rounds"], q) for e in epsilons}
    mult = [noise[str(e)]["noise_multiplier"] for e, _ in settings]
    trainer = TranTrainer(data, cfg, seeds, [lam for _, lam in settings], mult) if settings else None
    return trainer, {**ctx, "per_eps": noise}


def _build_ling(spec, data, seeds, settings, epsilons):
    """FedFDP (ling2024) or the group-gap variant (ling2024_groupgap): each silo releases two
    Gaussian statistics of one Poisson batch per round with the same multiplier z (FedFDP: the
    reweighted clipped gradient, sensitivity C, and the clipped loss sum, sensitivity B_t, both
    record-level add/remove; the variant: gradient and group sums, replace-one)."""
    cfg = _baseline_config(spec)
    ctx = _privacy_context(data, cfg)
    q = min(1.0, ctx["batch"] / min(ctx["silo_sizes"]))         # smallest silo: conservative for all

    def compositions(z):  # per silo and round: gradient and group statistics of ONE batch, both with
        # multiplier z, released together: one Gaussian with multiplier z / sqrt(2) (joint_multiplier)
        joint = accounting.joint_multiplier([z, z], [1.0, 1.0])
        return [accountant.GaussianComposition(joint, ctx["rounds"], q, "FedFDP gradient and group statistics")]

    noise = {str(e): _calibrated(e, ctx, compositions, 2 * ctx["rounds"], q) for e in epsilons}
    mult = [noise[str(e)]["noise_multiplier"] for e, _ in settings]
    cls = FedFDPTrainer if spec["method"] == "ling2024" else GroupGapTrainer
    trainer = cls(data, cfg, seeds, [lam for _, lam in settings], mult) if settings else None
    return trainer, {**ctx, "per_eps": noise}


def build(spec: dict, data: FairData, seeds: list[int], only: list | None = None):
    """The trainer of one job (of the settings `only`, default all; None if there are none) and
    the privacy record of every epsilon of the job."""
    method = spec["method"]
    if method not in METHODS:
        raise KeyError(f"unknown SteFFLe method {method!r}; allowed values: {', '.join(METHODS)}")
    if method in CENTRAL:
        data = data.centralised()
    settings, epsilons = grid(spec)
    settings = settings if only is None else list(only)
    if method == "tran2021":
        return (*_build_tran(spec, data, seeds, settings, epsilons), settings)
    if method in ("ling2024", "ling2024_groupgap"):
        return (*_build_ling(spec, data, seeds, settings, epsilons), settings)
    return (*_build_steffle(spec, data, seeds, settings, epsilons), settings)


def metrics_frame(result, seeds, settings) -> pd.DataFrame:
    """Long table: one line per (seed, eps, lambda, evaluation) plus the returned iterate (kind=final)."""
    rows = []
    evaluations = [(epoch, "eval", m) for epoch, m in result.history]
    evaluations.append((result.history[-1][0], "final", result.final))
    for epoch, kind, metrics in evaluations:
        for si, seed in enumerate(seeds):
            for gi, (eps, lam) in enumerate(settings):
                rows.append({"seed": seed, "eps": str(eps), "lam": lam, "epoch": epoch, "kind": kind,
                             **{k: float(v[si, gi]) for k, v in metrics.items()}})
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


GRID_KEYS = ("epsilons", "lambdas", "checkpoint_every")   # keys a cell's numbers do not depend on


def cell_cache(job) -> Path:
    """Per-cell results beside the job's outputs (not outputs: a re-run of the job keeps them)."""
    return Path(job.scratch).parent / ".cells"


def cell_key(job, setting) -> str:
    """What one (eps, lambda) cell's numbers depend on: the job's spec without its grid lists,
    the seeds, every input file (data, partition, code fingerprints) and the cell itself.
    Settings train independently (common random numbers per seed, GridTrainer), so a cell
    trained beside other cells gives the numbers it would give alone."""
    spec = {k: v for k, v in job.spec.items() if k not in GRID_KEYS}
    state = fingerprint(dataclasses.replace(job, spec={**spec, "cell": [str(setting[0]), float(setting[1])]}))
    return hashlib.sha256(state.encode()).hexdigest()[:24]


def _load_cells(job, settings) -> dict:
    """The cached metrics of every cell of `settings` found in the cache (unreadable files are dropped)."""
    found = {}
    for setting in settings:
        path = cell_cache(job) / f"{cell_key(job, setting)}.parquet"
        if path.exists():
            try:
                found[setting] = pd.read_parquet(path)
            except Exception as err:  # a torn file: name it and train the cell again
                log.warning("cell cache %s is unreadable (%s); training the cell again", path, err)
                path.unlink()
    return found


def _save_cells(job, frame: pd.DataFrame, settings) -> None:
    cell_cache(job).mkdir(parents=True, exist_ok=True)
    for eps, lam in settings:
        rows = frame[(frame["eps"] == str(eps)) & (frame["lam"] == lam)]
        path = cell_cache(job) / f"{cell_key(job, (eps, lam))}.parquet"
        atomic_write(path, lambda tmp, rows=rows: rows.to_parquet(tmp, index=False))


def _seed_health(rows: pd.DataFrame) -> health.Health:
    """diverged if a metric of this seed is NaN or infinite in any cell (the report names such
    cells; constant predictors are judged per cell by the report, not per seed)."""
    values = rows[["error", "dp_violation", "eo_violation"]].to_numpy(dtype=float)
    if np.isfinite(values).all():
        return health.OK
    bad = rows[~np.isfinite(values).all(axis=1)].iloc[0]
    return health.Health("diverged", f"non-finite metric at eps={bad['eps']}, lambda={bad['lam']}, "
                                     f"epoch {int(bad['epoch'])}")


def run_job(job) -> None:
    """Train the job's grid, except the (eps, lambda) cells already in the cell cache: adding a
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
    checkpoint = Checkpoint(Path(job.scratch) / "state.pt", every=int(job.spec.get("checkpoint_every", 1)))
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
    metrics.to_parquet(job.out("metrics"), index=False)
    log.info("trained %d of %d (eps, lambda) cells; %d from the cell cache", len(todo), len(settings), len(cached))
    if rounds is None:
        cfg = (_sgda_config if job.spec["method"] in SGDA else _baseline_config)(job.spec)
        sizes = [len(data.y)] if job.spec["method"] in CENTRAL else data.silo_sizes
        rounds = cfg.epochs * BatchSchedule(sizes, cfg.batch, cfg.sampling).rounds_per_epoch
    summary = {"spec": job.spec, "rounds": rounds, "privacy": privacy, "seconds": time.time() - start,
               "models": len(job.seeds) * len(settings), "cells_trained": len(todo), "cells_cached": len(cached),
               "seeds": {str(s): {"final": {}, **_seed_health(metrics[metrics["seed"] == s]).as_dict()}
                         for s in job.seeds}}
    job.out("summary").write_text(json.dumps(_jsonable(summary), indent=1))
    log.info("trained %d models in %.1f s", summary["models"], summary["seconds"])
