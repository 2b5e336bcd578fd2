"""SteFFLe noise calibration, Theorem 3.3 (spec fairfl.md §2), pure math.

Each silo adds Gaussian noise to the batch-mean gradients that touch the
sensitive attribute:

    sigma_w^2     >= 16 T ln(1/delta) / (eps^2 n~^2 rho)
    sigma_theta^2 >= 16 L^2 D^2 ln(1/delta) T / (eps^2 n~^2 rho)

valid when eps <= 2 ln(1/delta) and T >= (n~ sqrt(eps) / (2 |B|))^2.
Concrete choices the paper leaves open follow the reference code (spec §2.2):
delta = 1/n^2 (n all training samples), rho = (min_r count(s = r) - 1)/n,
T = epochs * ceil(n~/m), L = the per-sample clip of the theta-gradient and
D = the radius of the ball that W is projected on. eps = inf means sigma = 0.

The preconditions are returned (``Preconditions``), never raised: the paper's
own settings violate the T-condition at eps = 9 with N = 3 (spec §2.4), so a
run logs the message and goes on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


def _positive(name: str, value: float) -> float:
    value = float(value)
    if not value > 0.0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def _check_eps(eps: float) -> float:
    return _positive("eps", eps)


def _log_inv_delta(delta: float) -> float:
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return -math.log(delta)


def delta_for_n(num_samples: int) -> float:
    """delta = 1/n^2 with n the total number of training samples (all silos)."""
    return 1.0 / _positive("num_samples n", num_samples) ** 2


def rho_from_counts(counts) -> float:
    """rho = (min_r count(s = r) - 1) / n over the full training set.

    ``counts`` holds one count per sensitive group (all k groups, zeros
    included); n is their sum. rho must be > 0 for Theorem 3.3.
    """
    counts = np.asarray(counts, dtype=np.int64)
    if counts.ndim != 1 or counts.size < 2:
        raise ValueError(f"counts must list one count per sensitive group (>= 2 groups), got {counts!r}")
    if (counts < 0).any():
        raise ValueError(f"counts must be >= 0, got {counts!r}")
    rho = (int(counts.min()) - 1) / int(counts.sum())
    if rho <= 0.0:
        raise ValueError(f"rho = (min count - 1)/n = {rho} <= 0: a sensitive group has at most one sample")
    return rho


def rho_from_attribute(sensitive, num_groups: int) -> float:
    """``rho_from_counts`` from the integer attribute vector s in {0..k-1}."""
    s = np.asarray(sensitive)
    if s.ndim != 1 or not np.issubdtype(s.dtype, np.integer):
        raise ValueError("sensitive must be a 1-D integer array of group ids")
    if s.size and (s.min() < 0 or s.max() >= num_groups):
        raise ValueError(f"sensitive group ids must lie in [0, {num_groups - 1}]")
    return rho_from_counts(np.bincount(s, minlength=num_groups))


def num_iterations(epochs: int, local_size: int, batch_size: int) -> int:
    """T = epochs * ceil(n~/m): one epoch is one pass over a silo's local data."""
    _positive("epochs", epochs)
    return int(epochs) * math.ceil(_positive("local_size n~", local_size) / _positive("batch_size m", batch_size))


def sigma_w(eps: float, delta: float, iterations: int, local_size: int, rho: float) -> float:
    """Std of the noise on the batch-mean W-gradient: sqrt(16 T ln(1/delta)/(eps^2 n~^2 rho))."""
    eps = _check_eps(eps)
    log_inv_delta = _log_inv_delta(delta)
    t = _positive("iterations T", iterations)
    n_local = _positive("local_size n~", local_size)
    rho = _positive("rho", rho)
    if math.isinf(eps):
        return 0.0
    return math.sqrt(16.0 * t * log_inv_delta / (eps**2 * n_local**2 * rho))


def sigma_theta(eps: float, delta: float, iterations: int, local_size: int, rho: float,
                lipschitz: float, radius: float) -> float:
    """Std of the noise on the batch-mean theta-gradient: L * D * sigma_w."""
    scale = _positive("lipschitz L", lipschitz) * _positive("radius D", radius)
    return scale * sigma_w(eps, delta, iterations, local_size, rho)


def min_iterations(eps: float, local_size: int, batch_size: int) -> float:
    """Smallest T allowed by Theorem 3.3: (n~ sqrt(eps) / (2 m))^2."""
    eps = _check_eps(eps)
    return (_positive("local_size n~", local_size) * math.sqrt(eps)
            / (2.0 * _positive("batch_size m", batch_size))) ** 2


@dataclass(frozen=True)
class Preconditions:
    """Which hypotheses of Theorem 3.3 hold; ``messages`` explains each failure."""

    applicable: bool  # False for eps = inf (non-private: nothing to check)
    eps_bound: bool  # eps <= 2 ln(1/delta)
    iterations_bound: bool  # T >= (n~ sqrt(eps)/(2m))^2
    messages: tuple[str, ...] = field(default_factory=tuple)

    @property
    def all_hold(self) -> bool:
        return self.eps_bound and self.iterations_bound


def check_preconditions(eps: float, delta: float, iterations: int, local_size: int,
                        batch_size: int) -> Preconditions:
    """Evaluate Theorem 3.3's hypotheses without raising."""
    eps = _check_eps(eps)
    log_inv_delta = _log_inv_delta(delta)
    if math.isinf(eps):
        return Preconditions(False, True, True, ("eps = inf: non-private, Theorem 3.3 not used",))
    messages = []
    eps_bound = eps <= 2.0 * log_inv_delta
    if not eps_bound:
        messages.append(f"eps = {eps:g} > 2 ln(1/delta) = {2.0 * log_inv_delta:.4g}")
    t_min = min_iterations(eps, local_size, batch_size)
    iterations_bound = iterations >= t_min
    if not iterations_bound:
        messages.append(f"T = {int(iterations)} < (n~ sqrt(eps)/(2m))^2 = {t_min:.1f} "
                        f"(n~ = {int(local_size)}, m = {int(batch_size)}, eps = {eps:g})")
    return Preconditions(True, eps_bound, iterations_bound, tuple(messages))
