"""Independent numerical accountant: Google's ``dp_accounting`` (RDP or PLD).

Every paper's mechanism is a composition of ``steps`` Gaussian releases with
noise multiplier z = sigma / L2-sensitivity, each optionally preceded by
Poisson subsampling at rate q. ``epsilon`` / ``delta_for_epsilon`` ask the
library for the guarantee of that composition under add/remove-one adjacency,
the relation the library supports for Poisson-subsampled Gaussians.

Reading used for all three papers (documented per adapter): the sensitivity in
z is the paper's own replace-one bound where the paper's adjacency is
replace-one. For q = 1 only the L2 distance between the two means matters, so
the result is exact for that adjacency; for q < 1 it is the usual conservative
reading (as in DPZV's CLT diagnostic), not a proof for replace-one sampling.

What the library computes:

* ``method="rdp"``: Mironov et al.'s RDP of the (subsampled) Gaussian on the
  library's grid of orders (1.1 ... 1024), summed over steps, converted with
  the improved RDP-to-DP bound of Canonne-Kamath-Steinke (Prop. 12 of
  arXiv:2004.00010). That conversion is tighter than the plain
  eps_RDP + log(1/delta)/(alpha - 1) of FedSC's Lemma 6.5, so the library's
  eps is slightly below a paper closed form built on the plain conversion.
* ``method="pld"``: privacy-loss distributions composed numerically
  (connect-the-dots PLD of Doroshenko et al. 2022, pessimistic: never below
  the true epsilon). The discretisation error grows with the number of
  compositions: at paper-scale DPZV MNIST (T = 590100, q = 64/54000, eps = 1)
  a fixed interval of 1e-3 gives 1.41 where the converged value is 1.057. So
  the interval is refined (``PLD_STEPS``: 1e-2 ... 1e-5 times the RDP
  epsilon) until two successive values agree to ``PLD_RTOL``, and the finer
  one is returned. ``tight_epsilon`` is the one call for "the realised tight
  epsilon of what a run did".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

METHODS = ("rdp", "pld")
PLD_RTOL = 1e-3  # successive PLD refinements agree to 0.1 %
PLD_STEPS = (1e-2, 1e-3, 1e-4, 3e-5, 1e-5)  # intervals, times the RDP epsilon


def _check_inputs(noise_multiplier: float, steps: int, sampling_rate: float, method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"accountant method {method!r} unknown; allowed: {', '.join(METHODS)}")
    if not float(noise_multiplier) >= 0.0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps}")
    if not 0.0 < float(sampling_rate) <= 1.0:
        raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate}")


def _event(noise_multiplier: float, steps: int, sampling_rate: float):
    import dp_accounting

    event = dp_accounting.GaussianDpEvent(float(noise_multiplier))
    if sampling_rate < 1.0:
        event = dp_accounting.PoissonSampledDpEvent(float(sampling_rate), event)
    return dp_accounting.SelfComposedDpEvent(event, int(steps))


def _rdp_epsilon(event, delta: float) -> float:
    from dp_accounting.rdp import RdpAccountant

    acc = RdpAccountant()
    acc.compose(event)
    return float(acc.get_epsilon(float(delta)))


def _pld_intervals(event) -> list[float]:
    """Discretisation intervals for the PLD, relative to the event's RDP epsilon at delta = 1e-5.

    Scaling by the epsilon keeps the number of grid points bounded for large
    epsilons (SteFFLe's ~160) and fine enough for small ones (DPZV's 0.1).
    """
    scale = min(max(_rdp_epsilon(event, 1e-5), 1e-2), 1e3)
    return [scale * step for step in PLD_STEPS]


def _pld_query(event, query):
    """``query(accountant)`` on ever finer PLDs until two agree to PLD_RTOL; the finer value.

    Every value is pessimistic (an upper bound on the true epsilon or delta),
    so stopping early never under-states privacy loss.
    """
    from dp_accounting.pld import PLDAccountant

    previous = None
    for interval in _pld_intervals(event):
        acc = PLDAccountant(value_discretization_interval=interval)
        acc.compose(event)
        value = float(query(acc))
        if previous is not None and abs(previous - value) <= PLD_RTOL * max(abs(value), 1e-300):
            return value
        previous = value
    return value


def _query_epsilon(event, delta: float, method: str) -> float:
    if method == "rdp":
        return _rdp_epsilon(event, delta)
    return _pld_query(event, lambda acc: acc.get_epsilon(float(delta)))


def _trivial(noise_multiplier: float, steps: int) -> bool:
    return steps == 0 or math.isinf(noise_multiplier)


def epsilon(
    noise_multiplier: float, steps: int, delta: float, sampling_rate: float = 1.0, method: str = "rdp"
) -> float:
    """eps at ``delta`` after ``steps`` (subsampled) Gaussian releases.

    noise_multiplier = 0 (no noise) gives inf; steps = 0 or an infinite
    multiplier (data-independent release) gives 0.
    """
    _check_inputs(noise_multiplier, steps, sampling_rate, method)
    if not 0.0 < float(delta) < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if _trivial(noise_multiplier, steps):
        return 0.0
    if noise_multiplier == 0.0:
        return math.inf
    return _query_epsilon(_event(noise_multiplier, steps, sampling_rate), delta, method)


def delta_for_epsilon(
    noise_multiplier: float, steps: int, eps: float, sampling_rate: float = 1.0, method: str = "rdp"
) -> float:
    """delta at ``eps`` for the same composition (1 without noise, 0 without releases)."""
    _check_inputs(noise_multiplier, steps, sampling_rate, method)
    if not float(eps) >= 0.0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if _trivial(noise_multiplier, steps) or math.isinf(eps):
        return 0.0
    if noise_multiplier == 0.0:
        return 1.0
    event = _event(noise_multiplier, steps, sampling_rate)
    if method == "rdp":
        from dp_accounting.rdp import RdpAccountant

        acc = RdpAccountant()
        acc.compose(event)
        return float(acc.get_delta(float(eps)))
    return _pld_query(event, lambda acc: acc.get_delta(float(eps)))


def rdp_curve(noise_multiplier: float, steps: int, sampling_rate: float = 1.0):
    """(orders, composed RDP epsilons) from the library's RDP accountant.

    Lets callers apply another RDP-to-DP conversion (e.g. FedSC's Lemma 6.5).
    """
    _check_inputs(noise_multiplier, steps, sampling_rate, "rdp")
    if noise_multiplier == 0.0 and steps > 0:
        raise ValueError("rdp_curve needs noise_multiplier > 0 (no noise: RDP is infinite)")
    from dp_accounting.rdp import RdpAccountant

    acc = RdpAccountant()
    if steps > 0 and not math.isinf(noise_multiplier):
        acc.compose(_event(noise_multiplier, steps, sampling_rate))
    return np.asarray(acc.orders, dtype=float), np.asarray(acc.rdp, dtype=float)


@dataclass(frozen=True)
class GaussianComposition:
    """A paper's mechanism as seen by the accountant."""

    noise_multiplier: float
    steps: int
    sampling_rate: float
    note: str

    def epsilon(self, delta: float, method: str = "rdp") -> float:
        return epsilon(self.noise_multiplier, self.steps, delta, self.sampling_rate, method)


def combined_epsilon(mechanisms: list[GaussianComposition], delta: float, method: str = "rdp") -> float:
    """eps at ``delta`` of several compositions released together (e.g. SteFFLe's theta and W)."""
    if not 0.0 < float(delta) < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    active = []
    for m in mechanisms:
        _check_inputs(m.noise_multiplier, m.steps, m.sampling_rate, method)
        if _trivial(m.noise_multiplier, m.steps):
            continue
        if m.noise_multiplier == 0.0:
            return math.inf
        active.append(m)
    if not active:
        return 0.0
    import dp_accounting

    event = dp_accounting.ComposedDpEvent([_event(m.noise_multiplier, m.steps, m.sampling_rate) for m in active])
    return _query_epsilon(event, delta, method)


def tight_epsilon(mechanisms: GaussianComposition | list[GaussianComposition], delta: float) -> float:
    """The realised tight epsilon of what a run did: PLD of all its releases composed.

    Pass every composition the run released (e.g. SteFFLe's theta and W
    together). Pessimistic up to the converged discretisation (``PLD_RTOL``);
    inf without noise, 0 without releases.
    """
    if isinstance(mechanisms, GaussianComposition):
        mechanisms = [mechanisms]
    return combined_epsilon(list(mechanisms), delta, method="pld")


def multiplier(sigma: float, sens: float) -> float:
    if not float(sigma) >= 0.0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    if not sens > 0.0:
        raise ValueError(f"sensitivity must be > 0, got {sens}")
    return float(sigma) / sens
