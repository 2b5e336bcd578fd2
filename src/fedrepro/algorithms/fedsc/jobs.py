"""Pipeline plumbing of the FedSC paper's pretraining jobs.

Each method module's `run_<method>(job)` (the entries of the method table in `__init__`) calls
`pretrain(job, cls)`, which runs one method and setting over `job.seeds` with
`fedrepro.fl.runner.run_seeds` (per-round kNN monitor, per-seed checkpoints,
exact resume) and then writes `job.output["model"]`: the final backbone weights
of every seed, read from each seed's last checkpoint, for the probe stage. A job with a `prefix`
input starts every seed from that prefix job's state (`fedrepro.algorithms.fedsc.prefix`).

The linear-probe stage is `fedrepro.algorithms.fedsc.probing` (its own module, so an edit to the
probe re-runs no pretraining).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedrepro.algorithms.fedsc.base import SSLData, channel_stats
from fedrepro.algorithms.fedsc.prefix import KNN_KEY, knn_every, mismatch
from fedrepro.atomic import atomic_write
from fedrepro.data.arrays import load_prepared
from fedrepro.data.partition import load_partition
from fedrepro.fl.device import pick_device
from fedrepro.fl.loop import start_from


def load_data(job, device, centralized: bool = False) -> SSLData:
    """Prepared images (uint8, N x C x H x W) and the client split; one client holding
    every training image for Centralized SC."""
    prepared = load_prepared(Path(job.input["data"]).parent)
    if prepared.x_train.dtype != np.uint8 or prepared.x_train.ndim != 4:
        raise ValueError(
            f"FedSC needs uint8 images N x C x H x W, got {prepared.x_train.dtype} "
            f"{prepared.x_train.shape} in {job.input['data']}"
        )
    clients = load_partition(job.input["partition"]).clients
    if centralized:
        clients = [np.sort(np.concatenate(clients))]
    mean, std = job.spec.get("normalize_mean"), job.spec.get("normalize_std")
    if mean is None or std is None:
        mean, std = channel_stats(prepared.x_train)

    def tensor(a):
        return torch.as_tensor(np.ascontiguousarray(a), device=device)

    return SSLData(
        tensor(prepared.x_train),
        tensor(prepared.y_train).long(),
        tensor(prepared.x_test),
        tensor(prepared.y_test).long(),
        [tensor(c).long() for c in clients],
        int(prepared.meta.get("num_classes", int(prepared.y_train.max()) + 1)),
        tuple(mean),
        tuple(std),
    )


def pretrain(job, cls, centralized: bool = False) -> None:
    train(job, cls, int(job.spec["rounds"]), centralized)
    save_backbones(job)


def train(job, cls, num_rounds: int, centralized: bool = False) -> None:
    """Rounds 1..num_rounds of every seed, each started from the job's `prefix` input when it has one."""
    from fedrepro.fl.runner import run_seeds  # pandas: not needed by the probe stage
    from fedrepro.pipeline import claim_scratch

    device = pick_device(job.spec.get("device", "auto"))
    data = load_data(job, device, centralized)
    claim_scratch(job)  # before the prefix's checkpoints go in (run_seeds claims it again: kept)
    prefix = job.input.get("prefix") or []
    for path in [prefix] if isinstance(prefix, str) else prefix:  # Snakemake: a list of one or none
        start_from_prefix(job, path)
    run_seeds(job, lambda seed: cls(job.spec, data, seed, device), num_rounds, eval_every=knn_every(job.spec))


def start_from_prefix(job, path: str) -> None:
    """Each seed's checkpoint taken from the prefix job's state after its rounds (`fedsc.prefix`), unless the
    seed has a checkpoint of its own (a killed job resumes from it). The prefix's kNN values at rounds this
    run does not monitor are dropped."""
    prefix = torch.load(path, map_location="cpu", weights_only=False)
    why = mismatch(prefix["spec"], job.spec)
    if why:
        raise ValueError(f"{path} cannot start this run: {why}")
    every = knn_every(job.spec)
    for seed in job.seeds:
        if seed not in prefix["seeds"]:
            raise ValueError(f"{path} holds seeds {sorted(prefix['seeds'])}, not seed {seed}")
        state = prefix["seeds"][seed]
        rows = [row if row["round"] % every == 0 else _without(row, KNN_KEY) for row in state["rows"]]
        start_from(job.scratch / f"seed{seed}.pt", {**state, "rows": rows})


def _without(row: dict, key: str) -> dict:
    return {k: v for k, v in row.items() if k != key}


def save_prefix(job) -> None:
    """The prefix job's output: its spec and every seed's checkpoint after its rounds."""
    seeds = {
        seed: torch.load(job.scratch / f"seed{seed}.pt", map_location="cpu", weights_only=False) for seed in job.seeds
    }
    atomic_write(job.out("prefix"), lambda tmp: torch.save({"spec": job.spec, "seeds": seeds}, tmp))


def save_backbones(job) -> None:
    """Final backbone (and projector) weights of every seed, taken from the seeds' last checkpoints:
    {"seeds": {seed: {"backbone": state, "projector": state}}}."""
    models = {}
    for seed in job.seeds:
        state = torch.load(job.scratch / f"seed{seed}.pt", map_location="cpu", weights_only=False)
        net = state["algorithm"]["net"]
        models[seed] = {
            part: {k.removeprefix(f"{part}."): v for k, v in net.items() if k.startswith(f"{part}.")}
            for part in ("backbone", "projector")
        }
    torch.save({"seeds": models}, job.out("model"))
