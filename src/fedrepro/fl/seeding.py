"""Seeds: the global generators of a seed, and the generators components own.

The global generator states a checkpoint saves and restores are `fedrepro.fl.loop`'s (`rng_state`,
`set_rng_state`), beside the checkpoint: a job that checkpoints but seeds nothing here (SteFFLe) does not
run this module."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator owned by one component (clients, noise, sampling)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen
