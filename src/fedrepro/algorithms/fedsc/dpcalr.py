"""Algorithm 2 (DP-CalR): a client's noisy local correlation matrix.

R~_j = 1/(|D_j| V) sum_{x in D_j} sum_v NormClip(z(x_v), sqrt(mu)) NormClip(...)^T + N(0, sigma^2 I).

Spec DECISIONs 4 and 5, as in the official code: the V views are `passes` passes
over the local data with `views_per_pass` views each (5 x 2 = 10 views per sample),
the encoder runs in eval mode without gradients, the views use the training
augmentations, and the H x H noise is i.i.d. per entry and not symmetrised
(`symmetrize_noise=True` is pure post-processing and does not change the DP
guarantee, but the paper does not do it).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from fedrepro.algorithms.fedsc.loss import normclip


@torch.no_grad()
def clipped_correlation(encode: Callable[[Tensor], Tensor], x: Tensor,
                        view: Callable[[Tensor], Tensor], mu: float | None,
                        passes: int = 5, views_per_pass: int = 2, batch_size: int = 1024) -> Tensor:
    """The noiseless part of DP-CalR: mean over samples and views of z z^T, z clipped.

    Each pass encodes the `views_per_pass` views of a chunk of `batch_size` samples in one forward.
    """
    if passes < 1 or views_per_pass < 1:
        raise ValueError(f"passes and views_per_pass must be >= 1, got {passes}, {views_per_pass}")
    n = x.shape[0]
    if n == 0:
        raise ValueError("DP-CalR needs a non-empty local dataset")
    total = None
    for _ in range(passes):
        for start in range(0, n, batch_size):
            chunk = x[start:start + batch_size]
            z = normclip(encode(torch.cat([view(chunk) for _ in range(views_per_pass)])), mu)
            part = z.T @ z
            total = part if total is None else total + part
    return total / (n * passes * views_per_pass)


def dp_calr(encode: Callable[[Tensor], Tensor], x: Tensor, view: Callable[[Tensor], Tensor],
            mu: float | None, sigma: float, gen: torch.Generator, passes: int = 5,
            views_per_pass: int = 2, batch_size: int = 1024, symmetrize_noise: bool = False) -> Tensor:
    """Algorithm 2: clipped correlation plus i.i.d. Gaussian noise of std `sigma` on every entry."""
    if sigma < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    r = clipped_correlation(encode, x, view, mu, passes, views_per_pass, batch_size)
    if sigma > 0:
        noise = sigma * torch.randn(r.shape, generator=gen, device=r.device, dtype=r.dtype)
        if symmetrize_noise:
            noise = (noise + noise.T) / 2
        r = r + noise
    return r
