"""One `run_job`-style entry per method (the targets of `METHODS`)."""

from __future__ import annotations

from fedrepro.algorithms.fedsc.byol import FedBYOL, FedEMA, FedU
from fedrepro.algorithms.fedsc.fedca import FedCA
from fedrepro.algorithms.fedsc.fedx import FedX
from fedrepro.algorithms.fedsc.jobs import pretrain
from fedrepro.algorithms.fedsc.sc import FedSC


def _checked_sc(job, sharing_allowed: bool):
    if not sharing_allowed and job.spec.get("sharing") is not None:
        raise ValueError(f"{job.spec.get('method')}: sharing must be null (no correlation matrices)")


def fedsc(job) -> None:
    if job.spec.get("sharing") is None:
        raise ValueError("fedsc: the spec needs a sharing schedule {after, every}")
    pretrain(job, FedSC)


def fedavg_sc(job) -> None:
    _checked_sc(job, False)
    pretrain(job, FedSC)


def centralized_sc(job) -> None:
    _checked_sc(job, False)
    pretrain(job, FedSC, centralized=True)


def fedavg_byol(job) -> None:
    pretrain(job, FedBYOL)


def fedu(job) -> None:
    pretrain(job, FedU)


def fedema(job) -> None:
    pretrain(job, FedEMA)


def fedx(job) -> None:
    pretrain(job, FedX)


def fedca(job) -> None:
    pretrain(job, FedCA)
