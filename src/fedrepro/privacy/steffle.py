"""SteFFLe's privacy (Gupta et al. 2024), pure math: Theorem 3.3's noise, the accountant's
view of what the trainers release, and the calibration of the baselines' noise.

1. Theorem 3.3. Each silo adds Gaussian noise to the batch means of the gradients that touch
   the sensitive attribute (Algorithm 1 line 8):

       sigma_w^2     >= 16 T ln(1/delta) / (eps^2 n~^2 rho)
       sigma_theta^2 >= 16 L^2 D^2 ln(1/delta) T / (eps^2 n~^2 rho)

   valid when eps <= 2 ln(1/delta) and T >= (n~ sqrt(eps) / (2 |B|))^2. What the paper leaves
   open follows the authors' code: delta = 1/n^2 (n all training samples),
   rho = (min_r count(s = r) - 1)/n, T = epochs * ceil(n~/m), L = the per-sample clip of the
   theta-gradient and D = the radius of the ball that W is projected on; eps = inf means
   sigma = 0. The hypotheses are returned (`Preconditions`), never raised: the paper's own
   settings break the T-condition at eps = 9 with N = 3 (Credit: T = 1,200 < 1,931 for 40
   epochs of batch 256), so a run logs the message and goes on.
2. The accountant's view (`fedrepro.privacy.accountant`, per silo: ISRL-DP). h_theta and h_w
   of one Poisson batch are released together (`steffle_composition`, through
   `joint_multiplier`); `steffle_noise` records, for every epsilon of a job, Theorem 3.3's
   sigmas, the precondition flags and the epsilon the accountant gives for what ran
   (`realised_epsilon`: tight PLD, RDP beside it). noise="calibrated" instead scales both
   sigmas so that the accountant meets eps. `steffle_theta_mechanism` and
   `steffle_w_mechanism` are the two releases taken one at a time.
3. The baselines (Tran et al. 2021, Ling et al. 2024) have no closed-form noise: their
   multiplier is calibrated to the target eps with the accountant (`baseline_noise`, through
   `calibrate_multiplier` started at `rough_multiplier`).

4. The threat model (`THREAT_MODELS`, one entry per private method): the privacy unit and the
   adversary each epsilon holds against. Algorithm 1 line 9 sends the loss gradient g_{t,j} in
   clear, computed on the SAME batch B_t as the noised sensitive gradients (line 7). x and y are
   public in the paper's model, so whoever receives g learns B_t (a row with a rare one-hot
   feature makes a coordinate of g non-zero exactly when it is in the batch): the Poisson
   amplification the paper's accounting uses does not hold against the server. Every record
   therefore carries two numbers: the paper's accounting (`realised_epsilon`, batch membership
   secret) and `sound_epsilon`, the bound for what the code sends (`known_membership_epsilon`:
   the batches revealed, the exact mixture over the rounds a row is in). loss_batch="independent"
   draws g's batch independently of B_t, which keeps B_t secret, so there the two coincide (the
   method steffle_sound). Every method's unit states what the accounting takes as public: P_S and the
   cell frequencies are computed from the private attribute, as the paper assumes (`PUBLIC_P_S`).
   Tran et al. (central) add the unclipped loss gradient inside the noisy primal release; the
   same revealed-batch bound covers it (data processing: revealing B_t can only help the adversary).

`SAMPLING_NOTES` says, per batch sampling, whether the accountant's Poisson subsampling covers
what the trainers ran. The noise itself is drawn by the trainers (algorithms/steffle) with
`fedrepro.privacy.mechanisms.gaussian_noise`: N(0, 1) per seed, scaled by each setting's sigma.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, special, stats

from fedrepro.privacy import accountant, checks
from fedrepro.privacy.checks import positive


def is_private(eps) -> bool:
    return not math.isinf(float(eps))


# -- 1. Theorem 3.3 -------------------------------------------------------------------------------


def delta_for_n(num_samples: int) -> float:
    """delta = 1/n^2 with n the total number of training samples (all silos)."""
    return 1.0 / positive("num_samples n", num_samples) ** 2


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


def rho_for_fairness(sensitive, labels, num_groups: int, fairness: str) -> float:
    """The smallest group frequency h_w divides by: the marginal rho (demographic parity) or, for
    equalized odds (eq. 6: W^{(y)} is normalised by P(S | Y = y)), min over (s, y) of
    (count(s, y) - 1) / count(y), the same "- 1" margin as `rho_from_counts`."""
    if fairness == "dp":
        return rho_from_attribute(sensitive, num_groups)
    if fairness != "eo":
        raise ValueError(f"fairness must be one of ('dp', 'eo'), got {fairness!r}")
    s, y = np.asarray(sensitive), np.asarray(labels)
    return min(rho_from_attribute(s[y == label], num_groups) for label in np.unique(y))


def num_iterations(epochs: int, local_size: int, batch_size: int) -> int:
    """T = epochs * ceil(n~/m): one epoch is one pass over a silo's local data."""
    positive("epochs", epochs)
    return int(epochs) * math.ceil(positive("local_size n~", local_size) / positive("batch_size m", batch_size))


def sigma_w(eps: float, delta: float, iterations: int, local_size: int, rho: float) -> float:
    """Std of the noise on the batch-mean W-gradient: sqrt(16 T ln(1/delta)/(eps^2 n~^2 rho))."""
    eps = positive("eps", eps)
    log_inv_delta = checks.log_inv_delta(delta)
    t = positive("iterations T", iterations)
    n_local = positive("local_size n~", local_size)
    rho = positive("rho", rho)
    if math.isinf(eps):
        return 0.0
    return math.sqrt(16.0 * t * log_inv_delta / (eps**2 * n_local**2 * rho))


def sigma_theta(
    eps: float, delta: float, iterations: int, local_size: int, rho: float, lipschitz: float, radius: float
) -> float:
    """Std of the noise on the batch-mean theta-gradient: L * D * sigma_w."""
    scale = positive("lipschitz L", lipschitz) * positive("radius D", radius)
    return scale * sigma_w(eps, delta, iterations, local_size, rho)


def min_iterations(eps: float, local_size: int, batch_size: int) -> float:
    """Smallest T allowed by Theorem 3.3: (n~ sqrt(eps) / (2 m))^2."""
    eps = positive("eps", eps)
    return (positive("local_size n~", local_size) * math.sqrt(eps) / (2.0 * positive("batch_size m", batch_size))) ** 2


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


def check_preconditions(eps: float, delta: float, iterations: int, local_size: int, batch_size: int) -> Preconditions:
    """Evaluate Theorem 3.3's hypotheses without raising."""
    eps = positive("eps", eps)
    log_inv_delta = checks.log_inv_delta(delta)
    if math.isinf(eps):
        return Preconditions(False, True, True, ("eps = inf: non-private, Theorem 3.3 not used",))
    messages = []
    eps_bound = eps <= 2.0 * log_inv_delta
    if not eps_bound:
        messages.append(f"eps = {eps:g} > 2 ln(1/delta) = {2.0 * log_inv_delta:.4g}")
    t_min = min_iterations(eps, local_size, batch_size)
    iterations_bound = iterations >= t_min
    if not iterations_bound:
        messages.append(
            f"T = {int(iterations)} < (n~ sqrt(eps)/(2m))^2 = {t_min:.1f} "
            f"(n~ = {int(local_size)}, m = {int(batch_size)}, eps = {eps:g})"
        )
    return Preconditions(True, eps_bound, iterations_bound, tuple(messages))


# -- 2. what the accountant sees ------------------------------------------------------------------

STEFFLE_ADJACENCIES = ("replace_one", "add_remove")


def steffle_sensitivities(clip: float, rho: float, batch: int) -> tuple[float, float]:
    """Replace-one sensitivities of one silo's batch-mean releases (h_theta, h_w), Algorithm 1 line 9.

    h_theta: m clipped per-sample theta-gradients averaged, one of them replaced: 2C/m.
    h_w: d psi_i/dW[r,u] = -2 W[r,u] F_u + 2 [r = s_i] F_u / sqrt(p_S(s_i)); changing s_i only
    moves the second term between two rows, so the per-sample change has Frobenius norm
    2 sqrt(sum_u F_u^2 (1/p_s + 1/p_s')) <= 2 sqrt(2/rho) (sum_u F_u^2 <= 1, p_S >= rho, P_S
    treated as public as in the paper); averaged over m: 2 sqrt(2/rho)/m.
    Every accountant, mechanism and audit of SteFFLe's releases reads these two numbers here.
    """
    if not rho > 0:
        raise ValueError(f"rho must be > 0, got {rho}")
    return 2.0 * float(clip) / float(batch), 2.0 * math.sqrt(2.0 / rho) / float(batch)


def fair_baseline_sensitivities(clip: float) -> tuple[float, float]:
    """Replace-one sensitivities of one sample's part in the fair baselines' releases (gradient sum, group sums):
    Tran et al. 2021's PF-LD (clip = C_p) and the group-gap variant of Ling et al. 2024 (clip = C1 + C2).

    gradient sum: per-sample gradients clipped to `clip`, one replaced: 2 clip (the batch mean: 2 clip/m).
    group sums: sums of sigma_i in [0, 1] per cell; replacing s_i moves sigma_i from one cell to another: sqrt(2).
    The trainers' noise and the audit's replay read these two numbers here.
    """
    return 2.0 * float(clip), math.sqrt(2.0)


def steffle_theta_mechanism(
    sigma_theta: float, clip: float, batch_size: int, local_size: int, iterations: int, adjacency: str = "replace_one"
) -> accountant.GaussianComposition:
    """SteFFLe theta-gradient of one silo: z = m sigma_theta / (k C_theta), T steps, q = m/n~.

    Per-sample theta-gradients of psi are clipped to C_theta (= L) and averaged
    over m; changing one sensitive attribute (the paper's adjacency) moves one
    clipped gradient, so the mean moves by <= 2 C/m (k = 2, replace-one,
    default) or C/m (k = 1, add/remove reading). Lemma B.1's 8 D^2 L^2/(|B|^2 rho)
    is not used: its 1/|B|^2 is not the sensitivity of a mean (a mean of m clipped
    terms moves by O(C/m), not O(1/m^2)). The accountant is per silo (ISRL-DP).
    """
    if adjacency not in STEFFLE_ADJACENCIES:
        raise ValueError(f"adjacency {adjacency!r} unknown; allowed: {', '.join(STEFFLE_ADJACENCIES)}")
    k = 2.0 if adjacency == "replace_one" else 1.0
    sens = k * float(clip) / float(batch_size)
    rate = float(batch_size) / float(local_size)
    return accountant.GaussianComposition(
        accountant.multiplier(sigma_theta, sens),
        int(iterations),
        min(rate, 1.0),
        f"SteFFLe theta: clipped mean, sensitivity {k:g}C/m ({adjacency}), Poisson q = m/n~ per silo, steps = T",
    )


def steffle_w_mechanism(
    sigma_w: float, batch_size: int, local_size: int, iterations: int, rho: float
) -> accountant.GaussianComposition:
    """SteFFLe W-gradient of one silo: sensitivity 2 sqrt(2/rho)/m (`steffle_sensitivities`), T steps, q = m/n~."""
    sens = steffle_sensitivities(0.0, rho, batch_size)[1]
    rate = float(batch_size) / float(local_size)
    return accountant.GaussianComposition(
        accountant.multiplier(sigma_w, sens),
        int(iterations),
        min(rate, 1.0),
        "SteFFLe W: mean of psi W-gradients, sensitivity 2 sqrt(2/rho)/m "
        "(replace-one), Poisson q = m/n~ per silo, steps = T",
    )


def joint_multiplier(sigmas, sensitivities) -> float:
    """Noise multiplier of several Gaussian releases computed from the SAME batch.

    One sample moves release r by at most Delta_r, so the joint release is one Gaussian
    whose worst-case mean shift, measured in noise units, is sqrt(sum_r (Delta_r/sigma_r)^2):
    z = 1 / sqrt(sum_r (Delta_r / sigma_r)^2). A release with Delta_r = 0 adds nothing; one
    with sigma_r = 0 and Delta_r > 0 makes z = 0 (no privacy).
    """
    total = 0.0
    for sigma, sens in zip(sigmas, sensitivities):
        if sens == 0:
            continue
        if sigma == 0:
            return 0.0
        total += (sens / sigma) ** 2
    return math.inf if total == 0 else 1.0 / math.sqrt(total)


def steffle_composition(
    sigma_theta: float,
    sigma_w: float,
    clip: float,
    rho: float,
    batch: int,
    local_size: int,
    rounds: int,
    compat_refcode: bool = False,
    lam: float = 1.0,
) -> accountant.GaussianComposition:
    """One silo's releases of Algorithm 1 line 9 (h_theta and h_w, same batch) as the accountant sees them.

    Paper mode: h_theta = (sum of grad psi_i clipped to C)/m + N(0, sigma_theta^2), sensitivity
    2C/m (replace-one of the sensitive attribute); h_w = (sum of grad_W psi_i)/m + N(0, sigma_w^2),
    sensitivity 2 sqrt(2/rho)/m (`steffle_sensitivities`); lambda is applied by the server
    (post-processing). compat_refcode (the authors' code): the clipped lambda * grad psi_i are SUMMED
    (sensitivity 2C, 0 at lambda = 0) and h_w carries lambda * mean (sensitivity lambda * 2 sqrt(2/rho)/m),
    with the same sigmas: the noise is not scaled with the signal.
    """
    sens_theta, sens_w = steffle_sensitivities(clip, rho, batch)
    if compat_refcode:
        sens_theta = 2.0 * clip if lam != 0 else 0.0
        sens_w = abs(lam) * sens_w
    z = joint_multiplier([sigma_theta, sigma_w], [sens_theta, sens_w])
    return accountant.GaussianComposition(
        z, int(rounds), min(1.0, batch / local_size), "SteFFLe h_theta and h_w of one batch, jointly"
    )


def realised_epsilon(compositions, delta: float) -> dict:
    """The accountant's epsilon for what the code did: tight PLD and the RDP bound beside it."""
    return {
        "pld": accountant.combined_epsilon(compositions, delta, "pld"),
        "rdp": accountant.combined_epsilon(compositions, delta, "rdp"),
    }


# -- 4. threat model and the bound for what is sent ------------------------------------------------


@dataclass(frozen=True)
class ThreatModel:
    """Who an epsilon protects (unit) against whom (adversary), and what that adversary sees."""

    unit: str  # the privacy unit and the neighbouring relation
    adversary: str  # who receives the releases
    sees: str  # what the adversary receives, in words
    short: str  # a compact tag for figure titles


# The attribute frequencies the trainers divide by are computed from the private attribute and
# used as public, as the paper assumes (Section 2 and Algorithm 1 line 2: P_S "known or public"):
# no epsilon printed here accounts for them.
PUBLIC_P_S = (
    "; P_S (and rho) are computed from the private attribute and treated as public, as the paper "
    "assumes (Algorithm 1 line 2): their release is not accounted"
)
PUBLIC_CELLS = (
    "; the (label, group) cell frequencies are computed from the private attribute and treated as "
    "public: their release is not accounted"
)
STEFFLE_UNIT = "sensitive attribute s_i of one row per silo (replace-one; x, y public), ISRL-DP (Def. 2.3)"

THREAT_MODELS = {
    "steffle": ThreatModel(
        STEFFLE_UNIT + PUBLIC_P_S,
        "the server and every other silo (silo j's whole transcript)",
        "per round g (clear text, batch B_t), h_theta and h_w (noised, batch B_t): B_t is revealed",
        "attribute, ISRL-DP vs server",
    ),
    "steffle_sound": ThreatModel(
        STEFFLE_UNIT + PUBLIC_P_S,
        "the server and every other silo (silo j's whole transcript)",
        "per round g (clear text, its own Poisson batch, drawn independently of B_t), h_theta and h_w "
        "(noised, batch B_t): B_t stays secret",
        "attribute, ISRL-DP vs server",
    ),
    "dp_fermi": ThreatModel(
        "sensitive attribute s_i (replace-one; x, y public), central DP (one silo holds all rows)" + PUBLIC_P_S,
        "whoever receives the curator's per-round releases",
        "per round g (clear text), h_theta and h_w of one batch: the batch is revealed",
        "attribute, central DP vs who sees the releases",
    ),
    "tran2021": ThreatModel(
        "sensitive attribute s_i (replace-one; x, y public), central DP" + PUBLIC_CELLS,
        "whoever sees the model iterates and the dual releases",
        "per round the primal step g + clipped Lagrangian gradient + noise (g unclipped, same batch); "
        "per epoch the noisy group sums",
        "attribute, central DP vs who sees the releases",
    ),
    "ling2024": ThreatModel(
        "a whole record (x_i, y_i) of one client (add/remove), record-level DP per client" + PUBLIC_CELLS,
        "the server",
        "per round the noised, clipped, reweighted gradient sum and the noised clipped loss sum of a "
        "Poisson batch; the batch is not revealed",
        "record, per client vs server",
    ),
    "ling2024_groupgap": ThreatModel(
        "a whole record of one client (replace-one), record-level DP per client" + PUBLIC_CELLS,
        "the server",
        "per round the noised clipped gradient and noised group sums of a Poisson batch; the batch is not revealed",
        "record, per client vs server",
    ),
}

PAPER_ACCOUNTING = (
    "paper's accounting: Poisson subsampling at q = m/n_j with the batch membership secret "
    "(the tight PLD of the subsampled Gaussian)"
)
KNOWN_BATCH_WHY = (
    "the clear-text loss gradient g is computed on the same batch as the noised releases, so the "
    "adversary learns the batch and subsampling amplification does not hold: bound with the batches revealed"
)


def _gdp_delta(mu: np.ndarray, eps: float) -> np.ndarray:
    """delta(eps) of mu-GDP (Dong, Roth, Su 2022, Cor. 2.13), stable in log space for large eps."""
    mu = np.asarray(mu, dtype=np.float64)
    out = np.zeros_like(mu)
    pos = mu > 0
    m = mu[pos]
    out[pos] = special.ndtr(-eps / m + m / 2) - np.exp(eps + special.log_ndtr(-eps / m - m / 2))
    return np.clip(out, 0.0, 1.0)


def _mu2_distribution(compositions, tail: float = 1e-16):
    """Support and probabilities of mu^2 = sum_c K_c / z_c^2, K_c ~ Binomial(steps_c, q_c) independent
    (a row's number of rounds in the batch), and the probability mass left out (< tail per composition)."""
    values, probs, dropped = np.zeros(1), np.ones(1), 0.0
    for comp in compositions:
        if comp.noise_multiplier == 0:
            return np.array([math.inf]), np.ones(1), 0.0
        k = np.arange(comp.steps + 1)
        pk = stats.binom.pmf(k, comp.steps, min(comp.sampling_rate, 1.0))
        keep = pk > tail / (comp.steps + 1)
        dropped += float(pk[~keep].sum())
        values = (values[:, None] + k[keep][None, :] / comp.noise_multiplier**2).ravel()
        probs = (probs[:, None] * pk[keep][None, :]).ravel()
    return values, probs, dropped


def known_membership_epsilon(compositions, delta: float) -> float:
    """epsilon at delta when the adversary knows which rounds' batches hold each row.

    Given the batches, the releases of a row's rounds are Gaussians of multiplier z (adaptive
    composition: mu-GDP with mu^2 = K / z^2, K the rounds the row is in); the batches do not depend
    on the private value, so the tight delta(eps) is the expectation over K ~ Binomial(T, q) of
    mu-GDP's delta (the hockey-stick divergence of (batches, releases) averages over the batches).
    Exact, no subsampling amplification; the mass left out of the binomial tails is added to delta.
    """
    checks.log_inv_delta(delta)
    mu2, probs, dropped = _mu2_distribution(compositions)
    if np.isinf(mu2).any():
        return math.inf
    mu = np.sqrt(mu2)

    def excess(eps):
        return float(probs @ _gdp_delta(mu, eps)) + dropped - delta

    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        hi *= 2.0
        if hi > 1e6:
            return math.inf
    return optimize.brentq(excess, 0.0, hi, xtol=1e-10, rtol=1e-10)


SAMPLING_NOTES = {
    "poisson": "Poisson subsampling at q = m/n_j, sums divided by the expected batch size m: the "
    "subsampled Gaussian the accountant composes, if the batch membership stays secret",
    "shuffle": "shuffled fixed-size batches (remainder dropped); the accountant assumes Poisson "
    "subsampling at q = m/n_j, which does not cover shuffling",
    "shuffle_keep_last": "shuffled batches keeping the short last one of each epoch (the authors' code), "
    "means over the real batch size; the accountant composes each silo's real batch sizes b (sensitivity "
    "over b, Poisson q = b/n_j), which does not cover shuffling",
    "replacement": "batches drawn with replacement; the accountant assumes Poisson subsampling at "
    "q = m/n_j and one copy per sample, which does not cover this sampling",
}


NOISE_RULES = ("theorem", "calibrated")
LOSS_BATCHES = ("same", "independent")


def sound_note(loss_batch: str) -> str:
    """One sentence: why `sound_epsilon` is what it is for SteFFLe's loss_batch option."""
    if loss_batch == "same":
        return KNOWN_BATCH_WHY
    return (
        "g is computed on a batch drawn independently of the sensitive batch, so g reveals nothing "
        "about the sensitive batch and the paper's Poisson accounting holds"
    )


def _noiseless_record(silos: int) -> dict:
    """`steffle_noise`'s record at eps = inf: no noise, no finite bound."""
    return {
        "eps": "inf",
        "sigma_theta": [0.0] * silos,
        "sigma_w": [0.0] * silos,
        "preconditions_hold": True,
        "precondition_messages": [],
        **dict.fromkeys(
            (
                "library_epsilon",
                "realised_epsilon",
                "realised_epsilon_rdp",
                "known_membership_epsilon",
                "sound_epsilon",
            ),
            math.inf,
        ),
    }


def _worst_silo(silo_sizes, sig_t, sig_w, compositions, delta: float) -> dict:
    """The largest PLD, RDP and known-batch epsilon over the silos; `compositions(st, sw, n_j)` is one
    silo's mechanism. Silos of equal size have equal noise and rate, so each size is accounted once."""
    worst = {"pld": 0.0, "rdp": 0.0, "known": 0.0}
    for n_j in sorted(set(silo_sizes)):
        comp = compositions(sig_t[silo_sizes.index(n_j)], sig_w[silo_sizes.index(n_j)], n_j)
        got = {**realised_epsilon(comp, delta), "known": known_membership_epsilon(comp, delta)}
        worst = {k: max(worst[k], got[k]) for k in worst}
    return worst


def _epsilon_fields(by_lambda: dict, loss_batch: str, compat_refcode: bool) -> dict:
    """`steffle_noise`'s epsilons from the worst silo per lambda (`_worst_silo`).

    `realised_epsilon` is the accountant's (PLD, tight; RDP beside it) epsilon for the
    mechanism the trainer runs: theta and W released together from one Poisson batch
    per round (`steffle_composition`), per silo (ISRL-DP); the worst silo is reported.
    Under compat_refcode it depends on lambda (`realised_by_lambda`), and the headline
    `realised_epsilon` is the worst over the lambdas with a fairness term.
    `sound_epsilon` is the bound for what the code sends (section 4): with loss_batch="same"
    (Algorithm 1) the batches are revealed by g (`known_membership_epsilon`); with "independent"
    g's batch says nothing about the sensitive batch and the paper's accounting holds.
    """
    worst = {k: max(v[k] for v in by_lambda.values()) for k in ("pld", "rdp", "known")}
    fields = {
        "library_epsilon": worst["rdp"],
        "realised_epsilon": worst["pld"],
        "realised_epsilon_rdp": worst["rdp"],
        "known_membership_epsilon": worst["known"],
        "sound_epsilon": worst["known"] if loss_batch == "same" else worst["pld"],
    }
    if compat_refcode:
        pick = "known" if loss_batch == "same" else "pld"
        fields["realised_by_lambda"] = {str(k): v["pld"] for k, v in by_lambda.items()}
        fields["sound_by_lambda"] = {str(k): v[pick] for k, v in by_lambda.items()}
    return fields


def steffle_noise(
    eps,
    delta: float,
    rounds: int,
    silo_sizes: list[int],
    rho: float,
    clip: float,
    radius: float,
    batch: int,
    compat_refcode: bool = False,
    sampling: str = "poisson",
    lambdas=(1.0,),
    noise: str = "theorem",
    loss_batch: str = "same",
    rho_w: float | None = None,
    batch_sizes: list[list[tuple[int, int]]] | None = None,
) -> dict:
    """Per-silo sigma_theta, sigma_w (Theorem 3.3), precondition flags and the realised epsilon.

    batch_sizes (default: every silo `rounds` batches of `batch`): per silo, (real batch size, rounds)
    pairs of what the trainer ran (sampling shuffle_keep_last: the short last batch of every epoch).

    rho_w (default rho) is the smallest p the W-gradient divides by: the marginal p_S for demographic
    parity, min over (s, y) of P(S = s | Y = y) for equalized odds (eq. 6); it sets h_w's
    sensitivity, while Theorem 3.3's sigmas keep the paper's marginal rho. The epsilons:
    `_epsilon_fields`.

    noise="calibrated" scales Theorem 3.3's sigma_theta and sigma_w by one common factor k,
    the smallest for which the accountant (RDP, as for the baselines' calibration) confirms
    eps at delta for the worst silo, so SteFFLe is compared with Tran et al. and Ling et al.
    at equal realised epsilon (the theorem's sigma overshoots the label where its
    preconditions fail, e.g. T below (n~ sqrt(eps)/(2m))^2).
    """
    if noise not in NOISE_RULES:
        raise ValueError(f"noise must be one of {NOISE_RULES}, got {noise!r}")
    if loss_batch not in LOSS_BATCHES:
        raise ValueError(f"loss_batch must be one of {LOSS_BATCHES}, got {loss_batch!r}")
    rho_w = rho if rho_w is None else rho_w
    n = len(silo_sizes)
    base = {"sampling": sampling, "sampling_note": SAMPLING_NOTES[sampling], "delta": delta}
    base |= {"loss_batch": loss_batch, "rho_w": rho_w, "sound_note": sound_note(loss_batch)}
    if not is_private(eps):
        return {**base, **_noiseless_record(n)}
    eps = float(eps)
    sig_w = [sigma_w(eps, delta, rounds, n_j, rho) for n_j in silo_sizes]
    sig_t = [sigma_theta(eps, delta, rounds, n_j, rho, clip, radius) for n_j in silo_sizes]
    checks = [check_preconditions(eps, delta, rounds, n_j, batch) for n_j in silo_sizes]
    lams = sorted({float(v) for v in lambdas}) if compat_refcode else [1.0]
    scale = 1.0

    def silo_compositions(st, sw, n_j, lam):  # silos of equal size run equal batch sizes
        pairs = batch_sizes[silo_sizes.index(n_j)] if batch_sizes else [(batch, rounds)]
        return [steffle_composition(st, sw, clip, rho_w, b, n_j, r, compat_refcode, lam) for b, r in pairs]

    if noise == "calibrated":  # one factor for every silo: the largest any silo needs
        scale = max(
            calibrate_multiplier(
                eps, delta, lambda k, j=j, n_j=n_j: silo_compositions(k * sig_t[j], k * sig_w[j], n_j, lams[-1])
            )[0]
            for j, n_j in enumerate(silo_sizes)
            if silo_sizes.index(n_j) == j
        )
        sig_t, sig_w = [scale * v for v in sig_t], [scale * v for v in sig_w]
    by_lambda = {
        lam: _worst_silo(
            silo_sizes, sig_t, sig_w, lambda st, sw, n_j, lam=lam: silo_compositions(st, sw, n_j, lam), delta
        )
        for lam in lams
    }
    return {
        **base,
        "eps": eps,
        "sigma_theta": sig_t,
        "sigma_w": sig_w,
        "noise_rule": noise,
        "theorem_scale": scale,
        "preconditions_hold": all(c.all_hold for c in checks),
        "precondition_messages": sorted({m for c in checks for m in c.messages}),
        **_epsilon_fields(by_lambda, loss_batch, compat_refcode),
    }


# -- 3. the baselines' calibrated multiplier ------------------------------------------------------


def rough_multiplier(eps: float, delta: float, steps: int, sampling_rate: float) -> float:
    """Starting guess z ~ 2 q sqrt(2 T ln(1/delta)) / eps (small-q RDP of the subsampled Gaussian)."""
    return max(0.3, 2.0 * sampling_rate * math.sqrt(2.0 * steps * math.log(1.0 / delta)) / eps)


def calibrate_multiplier(
    eps: float, delta: float, compositions, z0: float = 1.0, tol: float = 0.01, max_evals: int = 30
) -> tuple[float, float]:
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
        b = b - fb / min(slope, -1e-3)  # eps decreases in z: keep the slope negative
        fb = log_eps(math.exp(b)) - target
        evals += 1
    while fb > 0:  # the library must confirm eps(z) <= eps
        b += tol / 2
        fb = log_eps(math.exp(b)) - target
    return math.exp(b), math.exp(fb + target)


def baseline_noise(eps, ctx: dict, compositions, steps: int, rate: float, sound_note: str | None = None) -> dict:
    """A baseline's privacy record at `eps`: its multiplier z calibrated (RDP) to eps for the
    `compositions(z)` it releases, and the realised (PLD) epsilon of the same compositions.

    ctx holds the job's delta and sampling (`jobs.privacy_context`); `steps` and `rate` give
    the secant search its start (`rough_multiplier`). `sound_note` None: the batch stays secret and
    `sound_epsilon` is the realised one; otherwise the sentence why the batch is not secret, and
    `sound_epsilon` is `known_membership_epsilon` of the same compositions.
    """
    base = {
        "sampling": ctx["sampling"],
        "sampling_note": ctx["sampling_note"],
        "delta": ctx["delta"],
        "sound_note": sound_note or "the batch stays secret: the paper's accounting holds",
    }
    if not is_private(eps):
        return {
            **base,
            "eps": "inf",
            "noise_multiplier": 0.0,
            "library_epsilon": math.inf,
            "realised_epsilon": math.inf,
            "realised_epsilon_rdp": math.inf,
            "known_membership_epsilon": math.inf,
            "sound_epsilon": math.inf,
        }
    z0 = rough_multiplier(float(eps), ctx["delta"], steps, rate)
    z, library = calibrate_multiplier(float(eps), ctx["delta"], compositions, z0=z0)
    realised = realised_epsilon(compositions(z), ctx["delta"])
    known = known_membership_epsilon(compositions(z), ctx["delta"])
    return {
        **base,
        "eps": float(eps),
        "noise_multiplier": z,
        "library_epsilon": library,
        "realised_epsilon": realised["pld"],
        "realised_epsilon_rdp": realised["rdp"],
        "known_membership_epsilon": known,
        "sound_epsilon": realised["pld"] if sound_note is None else known,
    }
