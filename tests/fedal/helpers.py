"""Tiny synthetic federated settings for the FedAL tests (no files, no downloads)."""

from __future__ import annotations

import torch

from fedrepro.algorithms.fedal.base import FedData, TrainConfig

POOL = [
    {"name": "mlp", "options": {"in_features": 12, "hidden": [16]}},
    {"name": "mlp", "options": {"in_features": 12, "hidden": [24, 16]}},
]


def blobs(n: int, k: int, d: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """k Gaussian clusters in d dimensions."""
    centres = torch.randn(k, d, generator=torch.Generator().manual_seed(123)) * 2.0
    y = torch.randint(0, k, (n,), generator=gen)
    return centres[y] + torch.randn(n, d, generator=gen), y


def make_data(
    num_clients: int = 3, k: int = 4, d: int = 12, per_client: int = 40, public: int = 64, seed: int = 0
) -> FedData:
    gen = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for n in range(num_clients):
        x, y = blobs(per_client, k, d, gen)
        # skew labels per client: drop one class per client
        keep = y != (n % k)
        xs.append(x[keep])
        ys.append(y[keep])
    px, _ = blobs(public, k, d, gen)
    tx, ty = blobs(200, k, d, gen)
    return FedData(xs, ys, px, tx, ty, k)


def config(**kw) -> TrainConfig:
    base = dict(tau=2, lr=1e-2, batch_size=8)
    base.update(kw)
    return TrainConfig(**base)
