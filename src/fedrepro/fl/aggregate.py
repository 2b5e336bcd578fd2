"""Server-side averaging of tensors or whole state dicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def normalised(weights: Sequence[float] | None, count: int) -> torch.Tensor:
    """Weights that sum to one; uniform when None."""
    if weights is None:
        return torch.full((count,), 1.0 / count, dtype=torch.float64)
    w = torch.as_tensor(weights, dtype=torch.float64)
    if w.numel() != count or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"need {count} non-negative weights with a positive sum, got {weights}")
    return w / w.sum()


def weighted_average(items: Sequence, weights: Sequence[float] | None = None):
    """Average tensors, or state dicts key by key (integer buffers are averaged then cast back)."""
    w = normalised(weights, len(items))
    if isinstance(items[0], Mapping):
        return {key: _average([item[key] for item in items], w) for key in items[0]}
    return _average(items, w)


def _average(tensors: Sequence[torch.Tensor], w: torch.Tensor) -> torch.Tensor:
    stacked = torch.stack([t.to(torch.float64) for t in tensors])
    mean = torch.tensordot(w.to(stacked.device), stacked, dims=1)
    return mean.to(tensors[0].dtype)
