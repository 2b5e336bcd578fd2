"""Empirical privacy audit: a canary-based lower bound on epsilon.

A mechanism is run many times on two neighbouring data sets, without ("out")
and with ("in") one canary, and an attacker who knows everything but the
noise scores each run (a likelihood ratio: high means "canary in"). Any
threshold on the score is a test between the two worlds; (eps, delta)-DP
forces every test to have

    FPR + e^eps FNR >= 1 - delta   and   FNR + e^eps FPR >= 1 - delta

(Kairouz, Oh and Viswanath 2015, Thm. 2.1), so

    eps >= log((1 - delta - FNR) / FPR)  and  eps >= log((1 - delta - FPR) / FNR).

With FPR and FNR replaced by their Clopper-Pearson upper limits, the bound
holds with the stated confidence (Jagielski, Ullman and Oprea 2020, Sec. 4;
Nasr et al. 2021, Sec. 3). The threshold is chosen on the first half of the
runs (largest bound there) and the bound is computed on the second half only, so the choice of
threshold costs no confidence; the two upper limits are each taken at
(1 - confidence)/2 (union bound).

Power (``detection_rate``, ``largest_detected_scaling``): the same test run on
simulated Gaussian canaries, to say how large a noise under-scaling an audit of
this size detects; a lower bound that stays below a claim says little without it.

``fedsc_release_scores`` is DP-CalR alone (Algorithm 2 on an identity encoder),
the one mechanism whose scores have a closed form, which the tests use to check
the statistics end to end. The papers' mechanisms run through their classes in
``fedrepro.audit``; nothing here imports an algorithm.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import beta as beta_dist

# ------------------------------------------------------------------------------ statistics


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided upper limit at level 1 - alpha of a binomial rate with k successes in n."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return 1.0 if k == n else float(beta_dist.ppf(1 - alpha, k + 1, n - k))


def _log_ratio(num: float, den: float) -> float:
    return math.log(num / den) if num > 0 and den > 0 else 0.0


def epsilon_at_threshold(
    out_scores: np.ndarray, in_scores: np.ndarray, threshold: float, delta: float, alpha: float | None = None
) -> tuple[float, float, float]:
    """(eps bound, FPR, FNR) of the test "score > threshold means in".

    With ``alpha``, FPR and FNR are Clopper-Pearson upper limits at 1 - alpha/2
    each; without, the empirical rates (used to choose the threshold).
    """
    n_out, n_in = len(out_scores), len(in_scores)
    fp, fn = int(np.sum(out_scores > threshold)), int(np.sum(in_scores <= threshold))
    if alpha is None:
        fpr, fnr = fp / n_out, fn / n_in
        fpr, fnr = max(fpr, 0.5 / n_out), max(fnr, 0.5 / n_in)  # keep log finite while choosing
    else:
        fpr, fnr = clopper_pearson_upper(fp, n_out, alpha / 2), clopper_pearson_upper(fn, n_in, alpha / 2)
    eps = max(_log_ratio(1 - delta - fnr, fpr), _log_ratio(1 - delta - fpr, fnr), 0.0)
    return eps, fpr, fnr


@lru_cache(maxsize=64)
def _upper_table(n: int, alpha: float) -> np.ndarray:
    """``clopper_pearson_upper(k, n, alpha)`` for every k = 0..n (one scipy call per run size)."""
    k = np.arange(n + 1)
    table = beta_dist.ppf(1 - alpha, np.minimum(k, n - 1) + 1, np.maximum(n - k, 1))
    table[n] = 1.0
    table.setflags(write=False)
    return table


def _upper(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """``clopper_pearson_upper`` for an array of counts."""
    return _upper_table(int(n), float(alpha))[np.asarray(k)]


def _best_threshold(out_scores: np.ndarray, in_scores: np.ndarray, delta: float, alpha: float) -> tuple[float, float]:
    """The threshold whose Clopper-Pearson bound on these scores is largest (all candidates at once).

    Choosing by the confidence bound rather than the empirical rates avoids extreme
    thresholds whose few errors look good on one half and bound nothing on the other.
    """
    candidates = np.unique(np.concatenate([out_scores, in_scores]))
    n_out, n_in = len(out_scores), len(in_scores)
    fp = n_out - np.searchsorted(np.sort(out_scores), candidates, side="right")  # out > t
    fn = np.searchsorted(np.sort(in_scores), candidates, side="right")  # in <= t
    fpr, fnr = _upper(fp, n_out, alpha / 2), _upper(fn, n_in, alpha / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.maximum(
            np.log(np.clip(1 - delta - fnr, 0, None) / fpr), np.log(np.clip(1 - delta - fpr, 0, None) / fnr)
        )
    eps = np.nan_to_num(np.maximum(eps, 0.0), neginf=0.0)
    i = int(np.argmax(eps))
    # every threshold from this candidate up to the next splits these scores alike: the midpoint is the one least
    # likely to misclassify the held-out half (at a candidate, a held-out score just above it would be a false
    # positive: perfectly separated worlds then lost their bound)
    upper = candidates[i + 1] if i + 1 < len(candidates) else candidates[i] + 1.0
    return float(eps[i]), float((candidates[i] + upper) / 2)


@dataclass(frozen=True)
class AuditBound:
    eps_lower: float  # holds with probability >= confidence
    confidence: float
    delta: float
    n_out: int  # runs used for the bound (the held-out half), per world
    n_in: int
    threshold: float  # "in" when the score is above it (below it if the canary lowers the score)
    fpr_upper: float
    fnr_upper: float
    eps_point: float  # the same threshold's bound at the empirical rates (no confidence)

    def as_dict(self) -> dict:
        return asdict(self)


def epsilon_lower_bound(out_scores, in_scores, delta: float, confidence: float = 0.95) -> AuditBound:
    """Clopper-Pearson lower bound on eps from scores of runs without / with the canary.

    The threshold maximises the same bound on the first half of each world's
    runs; the reported bound uses the second half only.
    """
    out_scores, in_scores = np.asarray(out_scores, float), np.asarray(in_scores, float)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    if min(len(out_scores), len(in_scores)) < 4:
        raise ValueError("the audit needs at least 4 runs per world")
    if not (np.isfinite(out_scores).all() and np.isfinite(in_scores).all()):
        raise ValueError("audit scores must be finite")
    half_out, half_in = len(out_scores) // 2, len(in_scores) // 2
    sel_out, sel_in = out_scores[:half_out], in_scores[:half_in]
    ev_out, ev_in = out_scores[half_out:], in_scores[half_in:]
    # both orientations: "score > t means in" and "score < t means in" (sign -1)
    best_eps, sign, best = -1.0, 1.0, 0.0
    for s in (1.0, -1.0):
        eps, t = _best_threshold(s * sel_out, s * sel_in, delta, 1 - confidence)
        if eps > best_eps:
            best_eps, sign, best = eps, s, t
    eps, fpr, fnr = epsilon_at_threshold(sign * ev_out, sign * ev_in, best, delta, alpha=1 - confidence)
    point = epsilon_at_threshold(sign * ev_out, sign * ev_in, best, delta)[0]
    return AuditBound(eps, confidence, delta, len(ev_out), len(ev_in), float(sign * best), fpr, fnr, point)


# ------------------------------------------------------------------------------ power

SCALINGS = tuple(round(0.95 - 0.05 * i, 2) for i in range(19))  # noise sigma * k tried, k = 0.95 ... 0.05


def detection_rate(
    mu: float, eps_target: float, delta: float, runs: int, confidence: float, trials: int = 200, seed: int = 0
) -> float:
    """Fraction of ``trials`` simulated audits whose lower bound exceeds ``eps_target``.

    Each simulated audit is this module's test on ``runs`` scores per world of a
    mu-GDP canary: N(0, 1) without it, N(mu, 1) with it (the likelihood-ratio
    score of a Gaussian mechanism, up to a monotone map).
    """
    return _detections(mu, eps_target, delta, runs, confidence, trials, seed) / trials


def _detections(mu, eps_target, delta, runs, confidence, trials, seed, needed: int | None = None) -> int:
    """Detections among `trials` simulated audits; with `needed`, stops once the count has reached it or can no
    longer reach it (the answer to "at least `needed`?" is then known; the draws are the same either way)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for done in range(trials):
        if needed is not None and (hits >= needed or hits + trials - done < needed):
            break
        out, inn = rng.standard_normal(runs), rng.standard_normal(runs) + mu
        hits += epsilon_lower_bound(out, inn, delta, confidence).eps_lower > eps_target
    return hits


def largest_detected_scaling(
    mu: float,
    eps_target: float,
    delta: float,
    runs: int,
    confidence: float,
    power: float = 0.8,
    trials: int = 200,
    seed: int = 0,
) -> float:
    """Largest k in ``SCALINGS`` such that an audit of this size refutes ``eps_target`` with probability
    >= ``power`` when the noise is sigma * k instead of sigma (a canary of GDP ``mu`` at sigma has mu / k
    at sigma * k); 0 when none is. The test is one-sided in k: less noise is easier to detect."""
    if not mu > 0 or math.isinf(eps_target):
        return 0.0
    needed = math.ceil(power * trials - 1e-9)

    def detected(k):
        return _detections(mu / k, eps_target, delta, runs, confidence, trials, seed, needed) >= needed

    # detection grows as k falls (a larger mu / k): bisect for the first k of SCALINGS that is detected
    lo, hi = 0, len(SCALINGS)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if detected(SCALINGS[mid]) else (mid + 1, hi)
    return SCALINGS[lo] if lo < len(SCALINGS) else 0.0


# ------------------------------------------------------------------------------ FedSC DP-CalR


def fedsc_release_scores(
    runs: int, sigma: float, mu: float, local_size: int, shares: int, hidden: int = 8, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Scores of ``runs`` runs per world of ``shares`` DP-CalR releases of one client.

    The local data are representation vectors (the encoder is the identity, one
    view, one pass, so ``dp_calr`` releases exactly the clipped mean of z z^T
    plus N(0, sigma^2) per entry). The canary sample is sqrt(mu) e_1 with the
    canary out and 10 sqrt(mu) e_2 (clipped by the release to sqrt(mu) e_2) with
    it in: the two matrices differ by sqrt(2) mu/|D_j| in Frobenius norm, the
    bound the accountant uses. Score: <R~ - (R_out + R_in)/2, R_in - R_out>
    summed over shares, the likelihood ratio of two Gaussians with the same
    covariance.
    """
    import torch

    from fedrepro.privacy.fedsc import clipped_correlation, dp_calr

    if hidden < 2 or local_size < 1 or shares < 1 or runs < 1:
        raise ValueError("fedsc audit needs hidden >= 2 and local_size, shares, runs >= 1")
    rng = torch.Generator().manual_seed(seed)
    base = torch.randn(local_size, hidden, generator=rng, dtype=torch.float64)
    worlds = {"out": base.clone(), "in": base.clone()}
    worlds["out"][0] = 0.0
    worlds["out"][0, 0] = math.sqrt(mu)
    worlds["in"][0] = 0.0
    worlds["in"][0, 1] = 10 * math.sqrt(mu)

    def identity(t):
        return t

    clean = {w: clipped_correlation(identity, x, identity, mu, passes=1, views_per_pass=1) for w, x in worlds.items()}
    direction = clean["in"] - clean["out"]
    middle = (clean["in"] + clean["out"]) / 2
    scores = {}
    for w, x in worlds.items():
        out = np.empty(runs)
        for r in range(runs):
            total = 0.0
            for _ in range(shares):
                release = dp_calr(identity, x, identity, mu, sigma, rng, passes=1, views_per_pass=1)
                total += float(((release - middle) * direction).sum())
            out[r] = total
        scores[w] = out
    return scores["out"], scores["in"]
