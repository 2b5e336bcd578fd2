"""Clipping and Gaussian noise: every noise draw of the papers goes through this module, the only one
of ``fedrepro.privacy`` that imports torch at the top (DP-CalR in ``privacy/fedsc.py`` imports it when it runs).

Every random draw takes an explicit ``torch.Generator`` so that the same seed
gives the same noise on CPU, independently of the global RNG state.
"""

from __future__ import annotations

import math

import torch


def _check_bound(name: str, value: float) -> float:
    value = float(value)
    if not value >= 0.0:  # also rejects NaN
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def clip_by_norm(x: torch.Tensor, c: float, dim: int | tuple[int, ...] = -1) -> torch.Tensor:
    """NormClip: scale each slice along ``dim`` to L2 norm at most ``c``.

    Returns ``z * min(1, c / ||z||)`` (FedSC Algorithm 2, line 5; per-sample
    clipping of DP-SGD). Slices with norm <= c are returned unchanged; zero
    slices stay zero. ``c = inf`` disables clipping.
    """
    c = _check_bound("clip norm c", c)
    if math.isinf(c):
        return x.clone()
    norm = torch.linalg.vector_norm(x, dim=dim, keepdim=True)
    factor = (c / norm.clamp_min(torch.finfo(x.dtype).tiny)).clamp(max=1.0)
    return x * factor


def normclip(z: torch.Tensor, mu: float | None) -> torch.Tensor:
    """FedSC's NormClip(z, sqrt(mu)) on each row (Algorithm 2, line 5; also in its training loss).

    ``mu`` is the radius squared, so every row ends with ||z||^2 <= mu; ``mu=None`` or ``inf``
    returns ``z`` itself (no clipping).
    """
    if mu is None or math.isinf(mu):
        return z
    if mu <= 0:
        raise ValueError(f"mu must be > 0 (NormClip radius^2), got {mu}")
    norms = z.norm(dim=-1, keepdim=True)
    factor = torch.clamp(math.sqrt(mu) / norms.clamp_min(1e-12), max=1.0)
    return z * factor


def clip_scalar(x: torch.Tensor, c: float, two_sided: bool = True) -> torch.Tensor:
    """Clip scalars elementwise to ``[-c, c]`` (``two_sided=True``) or to ``(-inf, c]``.

    DPZV writes clip_C(d) = min{d, C} (one-sided), but its privacy proof needs
    |clip_C(d)| <= C, i.e. two-sided clipping, hence the default; the one-sided
    form stays an option. Only the two-sided form bounds the sensitivity.
    """
    c = _check_bound("clip threshold c", c)
    if two_sided:
        return x.clamp(min=-c, max=c)
    return x.clamp(max=c)


def gaussian_noise(
    shape: tuple[int, ...] | torch.Size,
    sigma: float,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """i.i.d. N(0, sigma^2) noise of the given shape, drawn from ``generator``.

    ``sigma = 0`` (epsilon = inf) returns zeros without consuming random numbers.
    """
    sigma = _check_bound("sigma", sigma)
    if not isinstance(generator, torch.Generator):
        raise TypeError("gaussian_noise needs an explicit torch.Generator (reproducible noise)")
    if device is None:
        device = generator.device
    if sigma == 0.0:
        return torch.zeros(shape, dtype=dtype, device=device)
    return sigma * torch.randn(shape, generator=generator, dtype=dtype, device=device)
