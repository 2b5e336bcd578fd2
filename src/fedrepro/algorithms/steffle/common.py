"""What every SteFFLe-paper trainer shares: data on silos, batch schedule, init, evaluation.

All trainers train a *grid* of independent logistic-regression models as one
tensor program: theta has shape (S, G, D) for S seeds and G settings (lambda x
eps x ...), D = d + 1 (bias last). Randomness is drawn per seed from its own
generators and shared by the G settings of that seed (common random numbers), so
a seed's numbers do not depend on which other seeds or settings share the batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from fedrepro.eval import fairness

_STREAMS = {"init": 0, "batches": 1, "noise": 2, "iterate": 3}


def seed_generator(seed: int, stream: str) -> torch.Generator:
    """One independent CPU generator per (seed, purpose)."""
    return torch.Generator().manual_seed(1_000_003 * int(seed) + 7919 * _STREAMS[stream] + 17)


def with_bias(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
    return torch.cat([x, torch.ones(x.shape[0], 1)], dim=1)


@dataclass
class FairData:
    """Training silos (index arrays into the training set) and the global test set."""

    x: torch.Tensor            # (n, D) with the bias column
    y: torch.Tensor            # (n,) long in [l]
    s: torch.Tensor            # (n,) long in [k]
    silos: list[torch.Tensor]  # N index tensors
    x_test: torch.Tensor
    y_test: np.ndarray
    s_test: np.ndarray
    k: int = 2
    l: int = 2
    x_norm: torch.Tensor = field(init=False)

    def __post_init__(self):
        self.x_norm = self.x.norm(dim=1)
        covered = torch.cat(self.silos)
        if len(torch.unique(covered)) != len(covered):
            raise ValueError("silos overlap: every training index must belong to one silo")

    @classmethod
    def from_arrays(cls, x_train, y_train, s_train, x_test, y_test, s_test, silos) -> "FairData":
        return cls(
            x=with_bias(x_train), y=torch.as_tensor(np.asarray(y_train)).long(),
            s=torch.as_tensor(np.asarray(s_train)).long(),
            silos=[torch.as_tensor(np.asarray(idx)).long() for idx in silos],
            x_test=with_bias(x_test), y_test=np.asarray(y_test).astype(np.int64),
            s_test=np.asarray(s_test).astype(np.int64),
        )

    @property
    def num_silos(self) -> int:
        return len(self.silos)

    @property
    def silo_sizes(self) -> list[int]:
        return [len(idx) for idx in self.silos]

    def centralised(self) -> "FairData":
        """The same data as one silo (N = 1): the central baselines."""
        return FairData(self.x, self.y, self.s, [torch.cat(self.silos).sort().values], self.x_test,
                        self.y_test, self.s_test, self.k, self.l)


class BatchSchedule:
    """Shuffled epochs per silo (spec §6 A6), or uniform sampling with replacement.

    One epoch is ceil(max_j n_j / m) rounds; silo j's permutation is cut into
    batches of m, the last one short (padded slots have weight 0). With
    replacement every batch has m uniform draws (Algorithm 2, line 5).
    """

    def __init__(self, silo_sizes: list[int], batch: int, with_replacement: bool = False):
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self.sizes = list(silo_sizes)
        self.batch = min(batch, max(self.sizes))
        self.with_replacement = with_replacement
        self.rounds_per_epoch = math.ceil(max(self.sizes) / self.batch)

    def epoch(self, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Local indices (N, R, m) and weights (N, R, m) for one epoch of one seed."""
        R, m = self.rounds_per_epoch, self.batch
        idx = torch.zeros(len(self.sizes), R * m, dtype=torch.long)
        w = torch.zeros(len(self.sizes), R * m)
        for j, n_j in enumerate(self.sizes):
            if self.with_replacement:
                idx[j] = torch.randint(n_j, (R * m,), generator=gen)
                w[j] = 1.0
            else:
                idx[j, :n_j] = torch.randperm(n_j, generator=gen)
                w[j, :n_j] = 1.0
        return idx.view(-1, R, m), w.view(-1, R, m)


def init_theta(seeds: list[int], dim: int, groups: int) -> torch.Tensor:
    """theta_0 as PyTorch's default nn.Linear(d, 1) init (U(-1/sqrt(d), 1/sqrt(d))), per seed, shared by settings."""
    bound = 1.0 / math.sqrt(dim - 1)
    rows = [torch.empty(dim).uniform_(-bound, bound, generator=seed_generator(s, "init")) for s in seeds]
    return torch.stack(rows)[:, None, :].expand(-1, groups, -1).clone()


def step_lr(eta0: float, epoch: int, decay: float, every: int) -> float:
    """Step decay: eta0 * decay^(epoch // every) (paper App E.2.1: x0.8 every 10 epochs)."""
    return eta0 * decay ** (epoch // every) if every > 0 else eta0


def evaluate(theta: torch.Tensor, data: FairData) -> dict[str, np.ndarray]:
    """Test error, DP and EO violation of every model, arrays of shape theta.shape[:-1]."""
    with torch.no_grad():
        y_hat = (torch.einsum("nd,...d->...n", data.x_test, theta) > 0).numpy().astype(np.int64)
    return {
        "error": fairness.misclassification_error(y_hat, data.y_test),
        "dp_violation": fairness.dp_violation(y_hat, data.s_test),
        "eo_violation": fairness.eo_violation(y_hat, data.y_test, data.s_test),
    }


def gather_batch(data: FairData, silo_idx: torch.Tensor, local: torch.Tensor):
    """Global rows for local indices (S, N, m): x (S,N,m,D), y, s (S,N,m)."""
    glob = torch.gather(silo_idx.expand(local.shape[0], -1, -1), 2, local)
    return data.x[glob], data.y[glob], data.s[glob], data.x_norm[glob]


def padded_silo_index(data: FairData) -> torch.Tensor:
    """(1, N, max n_j) tensor of the silos' global indices (padding repeats the first index)."""
    width = max(data.silo_sizes)
    out = torch.stack([torch.cat([idx, idx[:1].expand(width - len(idx))]) for idx in data.silos])
    return out[None]
