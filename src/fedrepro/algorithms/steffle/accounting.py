"""Noise and privacy bookkeeping of the SteFFLe-paper methods.

* SteFFLe / DP-FERMI: sigma from Theorem 3.3 (`fedrepro.privacy.steffle`), per
  silo with its own n_j, plus the epsilon that the independent library accountant
  (`fedrepro.privacy.accountant`, RDP) gives for the same noise, and the
  theorem's precondition flags.
* Baselines without a closed form (Tran et al. PF-LD, Ling et al. FedFDP): the
  noise multiplier z is calibrated with the library accountant so that their
  composed mechanisms reach the target (eps, delta) (`calibrate_multiplier`).
"""

from __future__ import annotations

import math

from fedrepro.privacy import accountant
from fedrepro.privacy import steffle as thm


def is_private(eps) -> bool:
    return not math.isinf(float(eps))


def steffle_noise(eps, delta: float, rounds: int, silo_sizes: list[int], rho: float, clip: float,
                  radius: float, batch: int, compat_refcode: bool = False) -> dict:
    """Per-silo sigma_theta, sigma_w (Theorem 3.3), precondition flags and the library's epsilon.

    Under compat_refcode the theta-noise is added to a batch SUM (the authors' code);
    the accountant then sees the same noise relative to the sum's sensitivity 2C,
    i.e. z = sigma_theta / (2C), which we pass as a mean-noise of sigma_theta / m.
    """
    if not is_private(eps):
        n = len(silo_sizes)
        return {"eps": "inf", "sigma_theta": [0.0] * n, "sigma_w": [0.0] * n, "preconditions_hold": True,
                "precondition_messages": [], "library_epsilon": math.inf}
    eps = float(eps)
    sig_w = [thm.sigma_w(eps, delta, rounds, n_j, rho) for n_j in silo_sizes]
    sig_t = [thm.sigma_theta(eps, delta, rounds, n_j, rho, clip, radius) for n_j in silo_sizes]
    checks = [thm.check_preconditions(eps, delta, rounds, n_j, batch) for n_j in silo_sizes]
    library = {}
    for n_j, st, sw in zip(silo_sizes, sig_t, sig_w):
        if n_j in library:  # silos of equal size have equal noise
            continue
        st_mean = st / batch if compat_refcode else st
        mechs = [accountant.steffle_theta_mechanism(st_mean, clip, batch, n_j, rounds),
                 accountant.steffle_w_mechanism(sw, batch, n_j, rounds, rho)]
        library[n_j] = accountant.combined_epsilon(mechs, delta)
    return {"eps": eps, "sigma_theta": sig_t, "sigma_w": sig_w,
            "preconditions_hold": all(c.all_hold for c in checks),
            "precondition_messages": sorted({m for c in checks for m in c.messages}),
            "library_epsilon": max(library.values())}


def rough_multiplier(eps: float, delta: float, steps: int, sampling_rate: float) -> float:
    """Starting guess z ~ 2 q sqrt(2 T ln(1/delta)) / eps (small-q RDP of the subsampled Gaussian)."""
    return max(0.3, 2.0 * sampling_rate * math.sqrt(2.0 * steps * math.log(1.0 / delta)) / eps)


def calibrate_multiplier(eps: float, delta: float, compositions, z0: float = 1.0, tol: float = 0.01,
                         max_evals: int = 30) -> tuple[float, float]:
    """(z, library eps(z)): a noise multiplier with eps(z) <= eps, close to the smallest one.

    `compositions(z)` returns the `accountant.GaussianComposition` list the mechanism
    releases with multiplier z. log eps is close to linear in log z, so a secant
    search on (log z, log eps) needs a handful of library calls (each costs up to
    seconds); the result is then nudged up until the library confirms eps(z) <= eps.
    """
    def log_eps(z):
        return math.log(accountant.combined_epsilon(compositions(z), delta))

    target = math.log(eps)
    a, b = math.log(z0), math.log(1.5 * z0)
    fa, fb = log_eps(math.exp(a)) - target, log_eps(math.exp(b)) - target
    evals = 2
    while abs(fb) > tol / 2 and evals < max_evals:
        slope = (fb - fa) / (b - a) if fb != fa else -1.0
        a, fa = b, fb
        b = b - fb / min(slope, -1e-3)                    # eps decreases in z: keep the slope negative
        fb = log_eps(math.exp(b)) - target
        evals += 1
    while fb > 0:                                         # the library must confirm eps(z) <= eps
        b += tol / 2
        fb = log_eps(math.exp(b)) - target
    return math.exp(b), math.exp(fb + target)
