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

Two audited mechanisms:

* ``fedsc_release_scores``: FedSC's DP-CalR (Algorithm 2), through the real
  release function ``dp_calr`` on a small local data set whose canary sample is
  replaced by an orthogonal one (the worst case of the sqrt(2) mu/|D_j|
  replace-one sensitivity), ``shares`` releases per run with fresh noise.
* ``dpzv_label_scores``: a tiny DPZV run (``fedrepro.algorithms.dpzv``) with
  and without one flipped training label, observing the scalars the clients
  receive over the wire. The attacker replays the run under both labels
  (same seeds, the observed scalars fed to the clients) to get the noiseless
  answer of every round in each world; the score is the Gaussian log
  likelihood ratio of the observed scalars. With the server head trained on
  the raw labels, rounds that never saw the canary also move, which the
  paper's 2C/B sensitivity does not cover.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass

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


def _upper(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """``clopper_pearson_upper`` for an array of counts."""
    return np.where(k >= n, 1.0, beta_dist.ppf(1 - alpha, np.minimum(k, n - 1) + 1, np.maximum(n - k, 1)))


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
    return float(eps[i]), float(candidates[i])


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


# ------------------------------------------------------------------------------ DPZV label channel


def tiny_vfl_data(num_train: int = 64, num_test: int = 16, num_classes: int = 3, clients: int = 2, seed: int = 0):
    """Class-dependent 1 x 8 x 8 images split into row strips over ``clients`` (a learnable stand-in)."""
    from fedrepro.algorithms.dpzv.base import build_vfl_data
    from fedrepro.data.partition import vertical_partition

    rng = np.random.default_rng(seed)
    proto = rng.integers(0, 256, size=(num_classes, 1, 8, 8))
    y = rng.integers(0, num_classes, size=num_train + num_test)
    x = np.clip(proto[y] + rng.normal(0, 40, size=(len(y), 1, 8, 8)), 0, 255).astype(np.uint8)
    part = vertical_partition((1, 8, 8), "rows", clients)
    return build_vfl_data(
        x[:num_train],
        y[:num_train],
        x[num_train:],
        y[num_train:],
        part.features,
        part.feature_shapes,
        num_classes,
        "image",
        val="test",
    )


class _ScalarTap:
    """Stands in for the run's wire: passes messages on and keeps the scalars the clients receive."""

    def __init__(self, wire):
        self.wire = wire
        self.received: list[float] = []

    def send(self, sender, receiver, kind, payload):
        out = self.wire.send(sender, receiver, kind, payload)
        if receiver != "server":
            self.received.append(float(out))
        return out

    def __getattr__(self, name):
        return getattr(self.wire, name)


def dpzv_label_scores(
    runs: int, settings, data=None, canary: int = 0, canary_scale: float = 1.0, seed: int = 0, noise_seed: int = 1000
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Scores of ``runs`` tiny DPZV runs per world: canary label as is ("out") or flipped ("in").

    Everything but the server's noise is seeded by ``seed`` (model initialisation,
    schedule, batches, ZO directions), as the attacker is assumed to know it;
    run r of world w draws its noise from ``noise_seed + 2r + [w = in]``. Per round the attacker
    replays both worlds (DPZV's own client_query / server_answer / client_apply
    with the noise switched off, clients fed the observed scalars) and adds
    [(D - a_out)^2 - (D - a_in)^2] / (2 sigma^2). Also returns the run's
    sigma, rounds, the rounds that held the canary, the largest noiseless
    difference between the worlds in rounds without it (the server-head leak)
    and the measured std of observed minus noiseless scalar (the noise that
    crossed the wire). ``canary_scale`` multiplies the canary's features at
    every client (an outlier sample: DP must hold for every pair of neighbouring
    data sets, and a large input lets one label move the head far).
    """
    from fedrepro.algorithms.dpzv.base import VFLData
    from fedrepro.algorithms.dpzv.dpzv import DPZV

    data = data if data is not None else tiny_vfl_data()
    train = [x.clone() for x in data.train]
    for x in train:
        x[canary] *= canary_scale
    data = VFLData(train, data.y_train, data.val, data.y_val, data.test, data.y_test, data.num_classes)
    flipped = data.y_train.clone()
    flipped[canary] = (flipped[canary] + 1) % data.num_classes
    worlds = {
        "out": data,
        "in": VFLData(data.train, flipped, data.val, data.y_val, data.test, data.y_test, data.num_classes),
    }
    base = {w: DPZV(d, settings, seed) for w, d in worlds.items()}
    sigma = float(base["out"].noise["sigma"])
    if not sigma > 0:
        raise ValueError("the DPZV audit needs a private run (finite eps, sigma > 0)")
    replicas = {}
    for w, algo in base.items():
        replicas[w] = copy.deepcopy(algo)
        replicas[w].noise = dict(replicas[w].noise, sigma=0.0)
    scores = {w: np.empty(runs) for w in worlds}
    info = {
        "sigma": sigma,
        "rounds": base["out"].total_rounds,
        "canary_rounds": 0,
        "leak_max": 0.0,
        "privacy": base["out"].privacy(),
    }
    residuals = []
    for w in worlds:
        for r in range(runs):
            real = copy.deepcopy(base[w])
            real.server.noise.manual_seed(noise_seed + 2 * r + (w == "in"))
            tap = _ScalarTap(real.wire)
            real.wire = tap
            shadow = {v: copy.deepcopy(replicas[v]) for v in worlds}
            llr, canary_rounds = 0.0, 0
            for _ in range(real.total_rounds):
                m = real.next_client()
                ids = real.clients[m].next_batch()
                real.exchange(m, ids)
                observed = tap.received[-1]
                clean = {}
                for v, algo in shadow.items():
                    assert algo.next_client() == m
                    assert np.array_equal(algo.clients[m].next_batch(), ids)
                    payload, u = algo.client_query(algo.clients[m], ids)
                    answer, _ = algo.server_answer(m, payload)
                    algo.client_apply(algo.clients[m], u, observed)
                    clean[v] = float(answer)
                llr += ((observed - clean["out"]) ** 2 - (observed - clean["in"]) ** 2) / (2 * sigma**2)
                residuals.append(observed - clean[w])
                if canary in ids:
                    canary_rounds += 1
                else:
                    info["leak_max"] = max(info["leak_max"], abs(clean["in"] - clean["out"]))
            scores[w][r] = llr
            info["canary_rounds"] = max(info["canary_rounds"], canary_rounds)
    info["noise_std"] = float(np.std(residuals))
    info["noise_distinct"] = len(set(residuals)) / len(residuals)  # 1: a fresh draw every round
    return scores["out"], scores["in"], info
