"""DPZV's privacy in one place: the paper's Gaussian-DP formula, its calibration, the
accountant adapter and the privacy record every run writes. Pure math, no torch: the noise
itself is drawn by `fedrepro.privacy.mechanisms`.

Formula (Section 6 and Appendix C; Gaussian DP of Dong, Roth and Su). DPZV adds one
scalar z ~ N(0, sigma_dp^2) per server round to the batch mean of the per-sample ZO
differences clipped to [-C, C] (eq. 8; replace-one sensitivity 2C/B). A mu-GDP run is
(eps, delta(eps))-DP for every eps >= 0, with

    delta(eps; mu) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)    (eq. 11),

so an (eps, delta) target fixes mu (`mu_from_eps_delta`).

Calibration (Theorem 6.1). The paper sets

    sigma_dp = 2 C sqrt(T) / (D mu),

so that each round is (mu/sqrt(T))-GDP with the sampling rate r = B/D entering
linearly, and T rounds compose to mu-GDP; T counts every server round, one client
each (`total_rounds`). The baselines' clipped embeddings get the same paper-style
accounting with sensitivity 2 C_h (`sigma_embedding`): the paper applies VAFL's
"clipping the embeddings and adding calibrated vector noise" to them, without a formula.

Diagnostic. The linear-in-r step is the small-signal limit of the CLT for
Poisson-subsampled Gaussians, mu_CLT = r sqrt(T (exp(1/s^2) - 1)) with noise
multiplier s = sigma_dp/(2C/B) (`mu_clt`, `clt_epsilon`). The paper's calibration
is reproduced exactly; the diagnostic shows where it is too optimistic (s < 1,
large eps).

Accountant adapter. `dpzv_mechanism` describes DPZV's noise as an
`accountant.GaussianComposition` (multiplier s, T steps, Poisson rate B/D) for the
numerical accountants of `fedrepro.privacy.accountant` (the dp-accounting library's
RDP, the tight PLD epsilon).

Run records. `dpzv_noise` (DPZV's scalar) and `embedding_noise` (the baselines'
embeddings) give the sigma a run draws with and the privacy fields its summary holds;
`label_privacy_record` adds the epsilon of the label channel (Algorithm 1 trains the
server head on the raw labels).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from scipy.optimize import brentq
from scipy.stats import norm

from fedrepro.privacy import accountant
from fedrepro.privacy.checks import check_delta, non_negative, positive

_MU_BRACKET = (1e-6, 100.0)
# Above this mu, eps(delta) > mu^2/2 = 5e7: no meaningful guarantee, and the logs of eq. (11)
# lose all precision (|eps/mu| ~ mu/2 ~ 1e4 squared), so eps_from_mu answers inf.
_MU_MEANINGLESS = 1e4
PAIR_RELEASES = ("joint", "separate")
SAMPLING = (
    "Poisson subsampling at q = B/D assumed by every accountant; the runs draw shuffled "
    "fixed-size batches (drop_last), which the Poisson guarantee does not cover"
)


# ---------------------------------------------------------------------- config values and argument checks


def _positive_or_inf(name: str, value, infinite: tuple[str, ...]) -> float:
    if isinstance(value, str):
        if value.strip().lower() in infinite:
            return math.inf
        raise ValueError(f"{name} {value!r}: use a number > 0 or the string 'inf'")
    value = float(value)
    if not value > 0:
        raise ValueError(f"{name} must be > 0 or 'inf', got {value}")
    return value


def parse_eps(value) -> float:
    """eps from config: a positive number or the string "inf" (no privacy)."""
    return _positive_or_inf("eps", value, ("inf", "infinity"))


def parse_clip(value) -> float:
    """A clip threshold from config: a number > 0 or "inf" (no clipping)."""
    return _positive_or_inf("clip", value, ("inf", "infinity", "none"))


# --------------------------------------------------------------------------- the formula: eq. (11)


def gdp_delta(eps: float, mu: float) -> float:
    """delta(eps; mu) of eq. (11), evaluated in log space.

    Written as Phi(a) (1 - exp(eps + log Phi(b) - log Phi(a))) with
    a = -eps/mu + mu/2 and b = -eps/mu - mu/2, which stays accurate when
    e^eps overflows or both terms are tiny (large eps).
    """
    eps = non_negative("eps", eps)
    mu = float(mu)
    if not mu >= 0.0:
        raise ValueError(f"GDP mu must be >= 0, got {mu}")
    if mu == 0.0 or math.isinf(eps):
        return 0.0
    if math.isinf(mu):
        return 1.0
    log_a = norm.logcdf(-eps / mu + mu / 2.0)
    log_b = norm.logcdf(-eps / mu - mu / 2.0)
    # e^eps Phi(b) <= Phi(a) holds exactly, so the exponent is <= 0; at huge eps and mu the two
    # logs cancel to rounding error of either sign, and a positive one made expm1 overflow
    return float(math.exp(log_a) * -math.expm1(min(eps + log_b - log_a, 0.0)))


def mu_from_eps_delta(eps: float, delta: float) -> float:
    """The GDP mu with delta(eps; mu) = delta (brentq; delta is increasing in mu).

    eps = inf maps to mu = inf (no privacy, sigma_dp = 0).
    """
    eps = non_negative("eps", eps)
    delta = check_delta(delta)
    if math.isinf(eps):
        return math.inf
    lo, hi = _MU_BRACKET
    while gdp_delta(eps, hi) < delta:
        hi *= 2.0
    # log space: delta spans many decades over the bracket
    return float(
        brentq(
            lambda mu: math.log(max(gdp_delta(eps, mu), 1e-300)) - math.log(delta),
            lo,
            hi,
            xtol=1e-14,
            rtol=1e-13,
            maxiter=500,
        )
    )


def eps_from_mu(mu: float, delta: float) -> float:
    """The eps with delta(eps; mu) = delta (brentq; delta is decreasing in eps)."""
    delta = check_delta(delta)
    mu = float(mu)
    if not mu >= 0.0:
        raise ValueError(f"GDP mu must be >= 0, got {mu}")
    if mu > _MU_MEANINGLESS:
        return math.inf
    if gdp_delta(0.0, mu) <= delta:
        return 0.0
    hi = max(1.0, mu * mu)
    while gdp_delta(hi, mu) > delta:
        hi *= 2.0
    return float(brentq(lambda e: gdp_delta(e, mu) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12))


# ------------------------------------------------------------------------ calibration: Theorem 6.1


def dpzv_sensitivities(clip: float = 1.0, clip_h: float = 1.0) -> tuple[float, float]:
    """Replace-one sensitivities of one sample's part in the DPZV paper's releases (delta, vector).

    delta: the server's sum over the batch of per-sample ZO differences clipped to [-C, C] (eq. 8): 2C; its batch
    mean moves by 2C/B. vector: one sample's vector clipped to ||v|| <= C_h (a baseline's embedding, Section 7; a
    per-sample head gradient in the sum `label_privacy: dp_head` releases): 2 C_h.
    Every accountant, mechanism and audit of DPZV's releases reads these two numbers here.
    """
    return 2.0 * float(clip), 2.0 * float(clip_h)


def total_rounds(epochs: int, num_clients: int, num_samples: int, batch_size: int, drop_last: bool = False) -> int:
    """T = epochs * M * batches per epoch (the paper defines neither T nor an epoch: here every client
    passes once over the data per epoch, as in the VFL-CZOFO code)."""
    for name, value in (
        ("epochs", epochs),
        ("num_clients", num_clients),
        ("num_samples", num_samples),
        ("batch_size", batch_size),
    ):
        positive(name, value)
    per_epoch = num_samples // batch_size if drop_last else math.ceil(num_samples / batch_size)
    return int(epochs * num_clients * per_epoch)


def sigma_dp(clip: float, rounds: int, num_samples: int, mu: float) -> float:
    """sigma_dp = 2 C sqrt(T) / (D mu) (Theorem 6.1); mu = inf gives 0."""
    clip = positive("clip C", clip)
    rounds = positive("rounds T", rounds)
    num_samples = positive("num_samples D", num_samples)
    mu = positive("GDP mu", mu)
    if math.isinf(mu):
        return 0.0
    return dpzv_sensitivities(clip)[0] * math.sqrt(rounds) / (num_samples * mu)


def sigma_dp_for_eps(clip: float, rounds: int, num_samples: int, eps: float, delta: float) -> float:
    """sigma_dp for an (eps, delta) target: mu from eq. (11), then Theorem 6.1."""
    return sigma_dp(clip, rounds, num_samples, mu_from_eps_delta(eps, delta))


def noise_multiplier(sigma: float, clip: float, batch_size: int) -> float:
    """sigma_tilde = sigma_dp / (2C/B): noise over the replace-one sensitivity 2C/B."""
    if not float(sigma) >= 0.0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    return float(sigma) * positive("batch_size B", batch_size) / dpzv_sensitivities(positive("clip C", clip))[0]


def sigma_embedding(
    clip_h: float, batch_size: int, releases: int, num_samples: int, mu: float, embeddings_per_release: int = 1
) -> float:
    """Per-coordinate noise for the baselines' clipped embeddings (Section 7 names VAFL's mechanism, no formula).

    Same paper-style GDP accounting as DPZV: a batch release of embeddings
    clipped to ||h|| <= C_h has replace-one sensitivity 2 C_h, so
    sigma_h = r 2 C_h sqrt(T_rel)/mu = 2 C_h B sqrt(T_rel)/(D mu).
    ZOO-VFL sends k = 2 embeddings per round; treating the pair as one release
    multiplies the sensitivity by sqrt(k) (same sigma as T_rel = 2T).
    """
    k = int(embeddings_per_release)
    if k < 1:
        raise ValueError(f"embeddings_per_release must be >= 1, got {embeddings_per_release}")
    clip_h = positive("clip C_h", clip_h)
    mu = positive("GDP mu", mu)
    if math.isinf(mu):
        return 0.0
    rate = positive("batch_size B", batch_size) / positive("num_samples D", num_samples)
    releases = positive("releases T_rel", releases)
    return rate * dpzv_sensitivities(clip_h=clip_h)[1] * math.sqrt(k) * math.sqrt(releases) / mu


# ----------------------------------------------- diagnostic: the CLT of the subsampled composition


def mu_clt(sampling_rate: float, rounds: int, noise_mult: float) -> float:
    """CLT mu of T Poisson-subsampled Gaussian rounds: r sqrt(T (exp(1/s^2) - 1))."""
    r = float(sampling_rate)
    if not 0.0 < r <= 1.0:
        raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate}")
    rounds = float(rounds)
    if not rounds >= 0.0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    s = float(noise_mult)
    if not s >= 0.0:
        raise ValueError(f"noise multiplier must be >= 0, got {noise_mult}")
    if rounds == 0.0 or math.isinf(s):
        return 0.0
    if s == 0.0 or 1.0 / (s * s) > 700.0:  # exp overflows: no meaningful guarantee
        return math.inf
    return r * math.sqrt(rounds * math.expm1(1.0 / (s * s)))


def clt_epsilon(sampling_rate: float, rounds: int, noise_mult: float, delta: float) -> float:
    """eps at ``delta`` implied by ``mu_clt`` (the diagnostic beside the paper's eps)."""
    return eps_from_mu(mu_clt(sampling_rate, rounds, noise_mult), delta)


# ------------------------------------------------------------------------------ accountant adapter


def dpzv_mechanism(
    sigma_dp: float, clip: float, batch_size: int, num_samples: int, rounds: int
) -> accountant.GaussianComposition:
    """DPZV: z = sigma_dp / (2C/B), T rounds, q = B/D.

    Every round one client's batch of B sample ids is used, and the server's
    clipped mean over those B samples (labels included, the privacy unit is a
    sample row) gets one scalar of noise; a sample takes part in a round with
    probability B/D whichever client is active. The library models that as
    Poisson subsampling at q = B/D; the real loader shuffles epochs, so this is
    the standard approximation, matching the paper's own r = B/D and the CLT
    diagnostic's noise multiplier.
    """
    sens = dpzv_sensitivities(clip)[0] / float(batch_size)
    rate = float(batch_size) / float(num_samples)
    return accountant.GaussianComposition(
        accountant.multiplier(sigma_dp, sens),
        int(rounds),
        rate,
        "DPZV: scalar Gaussian, sensitivity 2C/B, Poisson q = B/D, steps = T server rounds (one client each)",
    )


# ------------------------------------------------------------------------------------- run records


@functools.lru_cache(maxsize=256)
def _library_and_pld(multiplier: float, rounds: int, delta: float, rate: float, method: str) -> tuple[float, float]:
    """(library eps, tight PLD eps) of the subsampled Gaussian composition: pure functions of these numbers, about
    1-2 s each, asked once per seed of a job with the same numbers, so computed once per process."""
    pld = accountant.tight_epsilon(accountant.GaussianComposition(multiplier, rounds, rate, "dpzv run"), delta)
    return accountant.epsilon(multiplier, rounds, delta, rate, method), pld


def _record(eps, delta, mu, sigma, multiplier, rounds, rate, method) -> dict:
    """The privacy fields every run writes (sigma = 0 and eps = inf when non-private).

    `eps_library` is the library's `method` (RDP by default); `eps_pld` is the tight PLD epsilon of
    the same subsampled Gaussian composition, with the discretisation refined until it converges
    (`accountant.tight_epsilon`; paper-scale MNIST at eps = 1: 1.064, where a fixed 1e-3 grid gave 1.447).
    """
    private = sigma > 0
    lib_eps, pld = _library_and_pld(multiplier, int(rounds), delta, rate, method) if private else (math.inf, math.inf)
    clt = mu_clt(rate, rounds, multiplier) if private else math.inf
    return {
        "eps": eps,
        "delta": delta,
        "gdp_mu": mu,
        "sigma": sigma,
        "noise_multiplier": multiplier,
        "releases": rounds,
        "sampling_rate": rate,
        "mu_clt": clt,
        "eps_clt": eps_from_mu(clt, delta) if private else math.inf,
        "eps_library": lib_eps,
        "library_method": method,
        "eps_pld": pld,
        "sampling": SAMPLING,
    }


def dpzv_noise(
    eps: float, delta: float, clip: float, rounds: int, num_samples: int, batch_size: int, library_method: str = "rdp"
) -> dict:
    """sigma_dp = 2C sqrt(T)/(D mu) of the server's scalar (Theorem 6.1); 0 when eps = inf."""
    if math.isinf(eps):
        return _record(eps, delta, math.inf, 0.0, 0.0, rounds, batch_size / num_samples, library_method)
    if math.isinf(clip):
        raise ValueError("dpzv: a finite eps needs a finite clip threshold (sensitivity 2C/B)")
    mu = mu_from_eps_delta(eps, delta)
    sigma = sigma_dp(clip, rounds, num_samples, mu)
    multiplier = noise_multiplier(sigma, clip, batch_size)
    return _record(eps, delta, mu, sigma, multiplier, rounds, batch_size / num_samples, library_method)


def embedding_noise(
    eps: float,
    delta: float,
    clip_h: float,
    rounds: int,
    num_samples: int,
    batch_size: int,
    embeddings_per_round: int = 1,
    pair_release: str = "joint",
    library_method: str = "rdp",
) -> dict:
    """Per-coordinate noise sigma_h of the baselines' clipped embeddings (`sigma_embedding`) and its record.

    sigma_h = 2 C_h B sqrt(T_rel)/(D mu). ZOO-VFL sends two embeddings a round:
    `pair_release="joint"` treats the pair as one release of sensitivity
    2 sqrt(2) C_h (default), "separate" counts T_rel = 2T releases of 2 C_h.
    """
    if pair_release not in PAIR_RELEASES:
        raise ValueError(f"zoo_pair_release {pair_release!r} is not one of {', '.join(PAIR_RELEASES)}")
    joint = embeddings_per_round if pair_release == "joint" else 1
    releases = rounds * (embeddings_per_round // joint)
    rate = batch_size / num_samples
    if math.isinf(eps):
        return _record(eps, delta, math.inf, 0.0, 0.0, releases, rate, library_method)
    if math.isinf(clip_h):
        raise ValueError("embedding noise: a finite eps needs a finite embed_clip")
    mu = mu_from_eps_delta(eps, delta)
    sigma = sigma_embedding(clip_h, batch_size, releases, num_samples, mu, embeddings_per_release=joint)
    multiplier = sigma / (dpzv_sensitivities(clip_h=clip_h)[1] * math.sqrt(joint))
    return _record(eps, delta, mu, sigma, multiplier, releases, rate, library_method)


def dp_head_multipliers(noise_multiplier: float) -> tuple[float, float]:
    """(head, joint) noise multipliers of `label_privacy: dp_head`, both against replace-one.

    Delta's multiplier is s (noise sigma_dp over its sensitivity 2C/B). The head's DP-SGD adds
    N(0, (s C_h)^2) per coordinate to the sum of per-sample gradients clipped to C_h; replacing one
    sample moves that sum by up to 2 C_h, so the head alone has multiplier s C_h / (2 C_h) = s/2.
    Both releases use the same batch, so one round is one Gaussian of the stacked vector:
    1/z^2 = 1/s^2 + 1/(s/2)^2 = 5/s^2, i.e. z = s/sqrt(5).
    """
    s = float(noise_multiplier)
    head = s / dpzv_sensitivities(clip_h=1.0)[1]  # noise s C_h over the sum's 2 C_h: C_h cancels
    return head, 1.0 / math.sqrt(1.0 / s**2 + 1.0 / head**2)


def label_privacy_record(noise: dict, label_privacy: str, delta: float) -> dict:
    """eps of the label channel under both readings (issue: the head is trained on raw labels).

    `eps_pld_sound`: with `label_privacy: none` it is inf (the unnoised head enters every Delta, so no
    finite bound holds); with `dp_head` the head's DP-SGD release and Delta use the same batch, one
    Gaussian of the joint multiplier of `dp_head_multipliers` (s/sqrt(5)) per round, composed by PLD.
    """
    if noise["sigma"] == 0:
        return {"eps_pld_sound": math.inf, "label_leak": label_privacy == "none"}
    if label_privacy == "none":
        return {"eps_pld_sound": math.inf, "label_leak": True}
    head, joint = dp_head_multipliers(noise["noise_multiplier"])
    composition = accountant.GaussianComposition(
        joint, int(noise["releases"]), noise["sampling_rate"], "DPZV Delta + DP-SGD head, same batch"
    )
    return {
        "eps_pld_sound": accountant.tight_epsilon(composition, delta),
        "label_leak": False,
        "head_noise_multiplier": head,
        "joint_noise_multiplier": joint,
    }


# ----------------------------------------------------------------- threat model and the known batch
#
# Algorithm 1 line 4: the active client draws its own mini-batch and sends the sample ids with its
# embeddings. The batch is therefore public to that client (it chose it), to the server (it receives the
# ids) and to any clients that pool what they saw. Subsampling amplification at q = B/D (Theorem 6.1's
# r = B/D, and every Poisson accountant above) needs the batch to be secret from the adversary; against
# anyone who knows it, a sample's record is released, unamplified, in each of the K rounds its id is
# in the batch, each a Gaussian of multiplier z, so the run is exactly (sqrt(K)/z)-GDP for that record
# (Dong, Roth and Su, Corollary 3.3). K is bounded before training from the data-independent schedule:
# a client's loader visits each id at most once per pass, so a record is used at most
# ceil(n_m / floor(D/B)) times by client m, which ran n_m rounds (`uses_bound`).


@dataclass(frozen=True)
class ThreatModel:
    """Who each printed epsilon holds against, for one mechanism (issue 27: every epsilon names it)."""

    mechanism: str
    protects: str  # the data the noise protects, and the privacy unit
    adversary: str  # the party the paper's accounting (Poisson at q = B/D) implicitly assumes
    sees: str  # what that party sees in clear
    known_batch: str  # why the paper's accounting does not hold against it, and what does


_IDS = "the sample ids of every batch (Algorithm 1 line 4)"
# Why the baselines' known-batch bound (fixed client model) is not the bound for what their code sends: one
# sentence per baseline, read by THREAT_MODELS and the privacy table's caption (eps_sent_one_client).
CLIENT_MODEL_LEAK = {
    "vafl": "the client trains its model by backprop on its raw features, so every later embedding carries the "
    "record: up to sqrt(B K'_m)/z-GDP over the K'_m rounds from its first use",
    "zoo_vfl": "zoo_noise 'shared' sends h' - h without noise: no finite bound",
    "vfl_czofo": "the client backpropagates through its model on its raw features, so every later embedding "
    "carries the record: up to sqrt(B K'_m)/z-GDP over the K'_m rounds from its first use",
}
# Baselines whose client trains its own model on its raw features (VAFL Section 3, VFL-CZOFO's first-order client)
TRAINS_ON_RAW_FEATURES = ("vafl", "vfl_czofo")
THREAT_MODELS = {
    "dpzv": ThreatModel(
        "DPZV (Algorithm 1: public batch, head trained on raw labels)",
        "the server's labels (with the other clients' features of the row), on the way down; unit: one "
        "training sample (record), replace-one; central DP of the server's Delta messages",
        "the clients: one client (its own Deltas) or all clients pooling theirs",
        f"{_IDS}, every Delta it receives, its own model; the server sees the embeddings in clear (features "
        "unprotected, as the paper says)",
        "the clients chose the batches, so amplification at q = B/D does not hold against them: the known-batch "
        "bound is sqrt(K)/s-GDP; the unnoised head trained on raw labels enters every later Delta, so even that "
        "bound holds only for a fixed head (label channel: inf)",
    ),
    "dpzv_dp_head": ThreatModel(
        "DPZV with label_privacy: dp_head (head by DP-SGD on the same batch)",
        "the server's labels, on the way down; unit: one training sample (record), replace-one; central DP of "
        "Delta and the head's release together",
        "the clients: one client or all clients pooled",
        f"{_IDS}, every Delta, and (post-processing) everything the trained head reveals",
        "joint multiplier s/sqrt(5) per round (`dp_head_multipliers`); the batch is public, so against the "
        "clients the bound is sqrt(K) sqrt(5)/s-GDP, not the Poisson one",
    ),
    "dpzv_secret_subsample": ThreatModel(
        "DPZV with batch: secret_subsample (our sound variant)",
        "the server's labels, on the way down; unit: one training sample (record), replace-one",
        "the clients: one client or all clients pooled (calibrated against the pooled clients)",
        f"{_IDS}, not which of them the server kept: the server keeps each id of the batch with probability p "
        "from its own secret randomness",
        "amplification holds at the secret rate p over the K rounds a sample's id is sent (Poisson-subsampled "
        "Gaussian, K steps, PLD); with p = 1 it is the exact known-batch calibration sqrt(K)/z = mu",
    ),
    **{
        name: ThreatModel(
            f"{label} (clipped embeddings plus Gaussian noise, VAFL's mechanism)",
            "a client's features, on the way up; unit: one sample's embedding (the row's slice held by one "
            "client, or the whole row over all clients), replace-one; local DP of each client's messages",
            "the server (it receives every client's noisy embeddings)",
            f"{_IDS} with the embeddings (Algorithm 1 line 4's message), and it holds the labels (unprotected)",
            "the server receives the ids, so amplification at q = B/D does not hold against it: one client's "
            "slice is sqrt(K_m)/z-GDP, the whole row (the server pools every client) sqrt(K)/z, for a fixed client "
            f"model; {leak} (the audit's rows)",
        )
        for name, label, leak in (
            ("vafl", "VAFL", CLIENT_MODEL_LEAK["vafl"]),
            ("zoo_vfl", "ZOO-VFL", CLIENT_MODEL_LEAK["zoo_vfl"]),
            ("vfl_czofo", "VFL-CZOFO", CLIENT_MODEL_LEAK["vfl_czofo"]),
        )
    },
}
KNOWN_BATCH = (
    "the batch ids are public (Algorithm 1 line 4), so subsampling amplification at q = B/D does not hold "
    "against the party that sees them; eps_known_* is the exact GDP bound over the K rounds a sample is used"
)
BATCHES = ("public", "secret_subsample")
# What each epsilon of the DPZV report protects, against whom (THREAT_MODELS in one sentence), and its short
# form for figures
THREAT_NOTE = (
    "DPZV's noise protects the server's labels on the way down (against the clients); the baselines' noise "
    "protects the clients' embeddings on the way up (against the server), so equal ε is not equal protection"
)
THREAT_SHORT = "ε: DPZV one sample's label vs the clients; baselines one sample's embedding vs the server"


# The two adversaries every method of the DPZV family is scored against (issue 39: equal epsilon means the same
# adversary and unit). Each method protects one of them at most: DPZV's Delta protects the labels against the
# clients, the baselines' noise protects the features against the server.
ADVERSARY_COLUMNS = {
    "eps_vs_server": "the server, which sees the batch ids; unit: one client's feature slice of one training record",
    "eps_vs_clients": "the clients pooled, who chose the batch ids; unit: one training record's label",
}
# what a baseline's client receives in clear each round: a function of the labels (VAFL Section 3; VFL-CZOFO's
# cascaded estimate; ZOO-VFL's loss difference)
CLEAR_TO_CLIENTS = {
    "vafl": "dL/dh_m (a B x e gradient)",
    "zoo_vfl": "the loss difference L' - L",
    "vfl_czofo": "the zeroth-order estimate of dL/dh_m",
}
FORWARD_TABLE = "table_init forward: every training record's clean initial embedding reaches the server before round 1"


def adversary_record(method: str, record: dict, label_privacy: str = "none", table_init: str = "zeros") -> dict:
    """The epsilon of one run against each common adversary (`ADVERSARY_COLUMNS`) with why: inf wherever a
    noise-free function of one training record reaches that adversary. `record` is the run's privacy record
    (its `sigma`, and `eps_known_pooled` / `eps_sent_one_client` where it has them)."""
    if not record.get("sigma", 0.0) > 0:
        return {
            "eps_vs_server": math.inf,
            "why_server": "no noise",
            "eps_vs_clients": math.inf,
            "why_clients": "no noise",
        }
    if method == "dpzv":
        out = {"eps_vs_server": math.inf, "why_server": "h+ and h- cross in clear (the paper protects no feature)"}
        if label_privacy == "dp_head":
            return {
                **out,
                "eps_vs_clients": float(record["eps_known_pooled"]),
                "why_clients": "Delta and the head's DP-SGD on the same batch, batch ids known",
            }
        return {
            **out,
            "eps_vs_clients": math.inf,
            "why_clients": "the head, trained on the raw labels without noise, enters every later Delta",
        }
    out = {"eps_vs_clients": math.inf, "why_clients": f"{CLEAR_TO_CLIENTS[method]} reaches the client in clear"}
    if table_init == "forward":
        return {**out, "eps_vs_server": math.inf, "why_server": FORWARD_TABLE}
    return {**out, "eps_vs_server": float(record["eps_sent_one_client"]), "why_server": CLIENT_MODEL_LEAK[method]}


def threat_model(method: str, label_privacy: str = "none", batch: str = "public") -> ThreatModel:
    """The threat model of one configured mechanism (a key of THREAT_MODELS)."""
    if method != "dpzv":
        return THREAT_MODELS[method]
    if batch == "secret_subsample":
        return THREAT_MODELS["dpzv_secret_subsample"]
    return THREAT_MODELS["dpzv_dp_head" if label_privacy == "dp_head" else "dpzv"]


def uses_bound(rounds_per_client, batches_per_pass: int) -> tuple[int, int]:
    """(pooled, one client): the most rounds any one sample's id can be in a batch, over all clients and
    for the busiest client. Client m's shuffled loader visits each id at most once per pass of
    floor(D/B) batches, and its n_m rounds start ceil(n_m / floor(D/B)) passes."""
    bpp = int(positive("batches_per_pass", batches_per_pass))
    passes = [-(-int(n) // bpp) for n in rounds_per_client]
    return int(sum(passes)), int(max(passes))


def known_batch_epsilon(noise_multiplier: float, uses: int, delta: float) -> float:
    """eps at delta of K = `uses` unamplified Gaussian releases of multiplier z: mu = sqrt(K)/z (exact GDP)."""
    if uses == 0 or math.isinf(noise_multiplier):
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    return eps_from_mu(math.sqrt(uses) / float(noise_multiplier), delta)


def known_batch_record(noise_multiplier: float, uses: tuple[int, int], delta: float, steps_per_use: int = 1) -> dict:
    """The known-batch epsilons against the pooled clients (or the server pooling every client) and one client.

    `steps_per_use`: releases per use of a sample (ZOO-VFL's pair counted separately: 2)."""
    pooled, one = (steps_per_use * k for k in uses)
    return {
        "uses_pooled": pooled,
        "uses_one_client": one,
        "mu_known_pooled": math.sqrt(pooled) / noise_multiplier if noise_multiplier > 0 else math.inf,
        "eps_known_pooled": known_batch_epsilon(noise_multiplier, pooled, delta),
        "eps_known_one_client": known_batch_epsilon(noise_multiplier, one, delta),
    }


def trained_client_epsilon(noise_multiplier: float, batch_size: int, rounds: int, delta: float) -> float:
    """eps at delta against the server for one client's slice when the client trains its model on its raw
    features: from a record's first use on, each of the client's `rounds` releases may move every embedding of
    its batch (sensitivity 2 C_h sqrt(B), multiplier z/sqrt(B)), so mu = sqrt(B K')/z."""
    return known_batch_epsilon(noise_multiplier / math.sqrt(int(positive("batch_size", batch_size))), rounds, delta)


def sent_record(
    method: str,
    noise_multiplier: float,
    batch_size: int,
    client_rounds: int,
    delta: float,
    fixed_model_eps: float,
    clear_difference: bool = False,
) -> dict:
    """A baseline's epsilon for what its code sends, one client's slice against the server (`CLIENT_MODEL_LEAK`):
    inf when h' - h crosses in clear, the trained-client bound over the busiest client's `client_rounds` (a record
    used in its first round) for VAFL and VFL-CZOFO, else the fixed-model known-batch bound `fixed_model_eps`."""
    if clear_difference:
        eps = math.inf
    elif method in TRAINS_ON_RAW_FEATURES:
        eps = trained_client_epsilon(noise_multiplier, batch_size, client_rounds, delta)
    else:
        eps = float(fixed_model_eps)
    return {"client_rounds": int(client_rounds), "batch_size": int(batch_size), "eps_sent_one_client": eps}


# ------------------------------------------------------------------- the sound variant: secret subsample


def _pessimistic_pld_epsilon(z: float, steps: int, rate: float, delta: float) -> float:
    """eps of `steps` Poisson(rate)-subsampled Gaussians of multiplier z by one pessimistic PLD (connect-the-dots,
    interval 1e-3: an upper bound on the true eps, ~0.1 s; the record prints the converged PLD)."""
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    event = dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(z))
    acc = PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dp_accounting.SelfComposedDpEvent(event, int(steps)))
    return float(acc.get_epsilon(delta))


def secret_multiplier(eps: float, delta: float, rate: float, uses: int, joint_factor: float = 1.0) -> float:
    """The multiplier z of each round's release such that `uses` rounds, each keeping a sample with the
    server's secret probability `rate`, are (eps, delta)-DP: exact GDP at rate 1 (z = sqrt(K)/mu), else
    the smallest z whose pessimistic PLD epsilon meets eps. `joint_factor` divides z when several releases
    share the subsample (dp_head: sqrt(5), `dp_head_multipliers`)."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"secret_rate must be in (0, 1], got {rate}")
    if rate == 1.0:
        return joint_factor * math.sqrt(uses) / mu_from_eps_delta(eps, delta)
    # amplification is at most linear in the rate: the unamplified z times the rate brackets the answer
    hi = math.sqrt(uses) / mu_from_eps_delta(eps, delta)
    lo = rate * hi / 2.0
    while _pessimistic_pld_epsilon(lo, uses, rate, delta) < eps:
        lo /= 2.0
    z = brentq(lambda v: _pessimistic_pld_epsilon(v, uses, rate, delta) - eps, lo, hi, rtol=1e-4)
    return joint_factor * float(z)


def secret_subsample_noise(
    eps: float, delta: float, clip: float, batch_size: int, rate: float, uses: tuple[int, int], label_privacy: str
) -> dict:
    """Noise and record of `batch: secret_subsample`: Delta = sum of the kept clipped differences / (p B) + z,
    sensitivity 2C/(pB); calibrated so that the pooled clients' (eps, delta) holds (for Delta and, with
    dp_head, the head's release on the same kept samples)."""
    pooled, one = uses
    rate = float(rate)
    joint = 1.0 / dp_head_multipliers(1.0)[1] if label_privacy == "dp_head" else 1.0  # z = s/sqrt(5)
    record = {"secret_rate": rate, "uses_pooled": pooled, "uses_one_client": one, "sampling_rate": rate}
    if math.isinf(eps):
        return {**record, "eps": eps, "delta": delta, "gdp_mu": math.inf, "sigma": 0.0, "noise_multiplier": 0.0}
    z = secret_multiplier(eps, delta, rate, pooled, joint)

    def realised(k):
        return accountant.tight_epsilon(accountant.GaussianComposition(z / joint, k, rate, "secret subsample"), delta)

    pooled_eps = realised(pooled)
    return {
        **record,
        "eps": eps,
        "delta": delta,
        "gdp_mu": mu_from_eps_delta(eps, delta),
        "sigma": z * dpzv_sensitivities(clip)[0] / (rate * batch_size),
        "noise_multiplier": z,
        "releases": pooled,
        "eps_library": accountant.epsilon(z / joint, pooled, delta, rate),
        "library_method": "rdp",
        "eps_pld": pooled_eps,
        "eps_known_pooled": pooled_eps,
        "eps_known_one_client": realised(one),
        "eps_pld_sound": pooled_eps if label_privacy == "dp_head" else math.inf,
        "label_leak": label_privacy != "dp_head",
        "sampling": "the server's secret Poisson subsample at rate p inside each sent batch (amplification holds "
        "against the clients, who know the batch but not the subsample)",
    }
