"""Pipeline plumbing shared by every FedAL-paper method: job spec -> data -> runs.

A job's spec (made by `fedrepro.experiments.fedal`) holds: `method`, `pool` (list
of {name, options}), `iterations`, `tau`, `lr`, `batch_size`, `kd_temperature`,
`evals`, the method's own keys, `discriminator` (adversarial methods only),
`diagnostics` (optional), `device`. A round of `fedrepro.fl.loop` (what the job's
`checkpoint_every` counts) is tau iterations. Inputs: `data`
(arrays.npz of the prepared set) and `partition` (the partition file).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from fedrepro.algorithms.fedal.base import FedData, Federation, TrainConfig
from fedrepro.algorithms.fedal.schedule import rounds_for

Builder = Callable[[FedData, list, TrainConfig, int, dict], Federation]


def load_setting(job, device: torch.device) -> FedData:
    """The prepared data set split by the job's partition (public set included)."""
    from fedrepro.data.arrays import load_prepared
    from fedrepro.data.partition import load_partition
    from fedrepro.data.tensors import to_tensors

    tensors = to_tensors(load_prepared(Path(job.input["data"]).parent), device)
    part = load_partition(job.input["partition"])
    if part.kind != "horizontal":
        raise ValueError(f"{job.input['partition']}: FedAL needs a horizontal partition, got {part.kind}")
    take = lambda idx: torch.as_tensor(idx, dtype=torch.long, device=device)  # noqa: E731
    public = tensors.x_train[take(part.public)] if part.public is not None else None
    return FedData(
        [tensors.x_train[take(c)] for c in part.clients],
        [tensors.y_train[take(c)] for c in part.clients],
        public,
        tensors.x_test,
        tensors.y_test,
        tensors.num_classes,
    )


def train_config(spec: dict) -> TrainConfig:
    return TrainConfig(
        tau=int(spec["tau"]),
        lr=float(spec["lr"]),
        batch_size=int(spec["batch_size"]),
        kd_temperature=float(spec.get("kd_temperature", 1.0)),
        lf_temperature=float(spec.get("lf_temperature", 1.0)),
        kd_target=spec.get("kd_target", "leave_one_out"),
        weights=dict(spec.get("weights", {})),
        adam_state=spec.get("adam_state", "persistent"),
        pretrain_iters=int(spec.get("pretrain_iters", 0)),
        assignment=spec.get("assignment", "random"),
    )


def run(job, build: Builder) -> None:
    """Build the method per seed and run it through `fedrepro.fl.runner.run_seeds`."""
    from fedrepro.fl.device import pick_device
    from fedrepro.fl.runner import run_seeds

    torch.set_num_threads(max(1, int(job.threads)))
    spec = job.spec
    device = pick_device(spec.get("device", "auto"))
    data = load_setting(job, device)
    cfg = train_config(spec)
    rounds = rounds_for(int(spec["iterations"]), cfg.tau, spec.get("iteration_unit", "step"))
    eval_every = max(1, rounds // max(1, int(spec["evals"])))
    run_seeds(
        job,
        lambda seed: build(data, list(spec["pool"]), cfg, seed, spec),
        rounds,
        eval_every=eval_every,
    )
