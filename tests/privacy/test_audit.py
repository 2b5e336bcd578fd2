"""The empirical audit: its statistics and power against closed forms, its verdicts, and the mechanisms it ran."""

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import beta, binom, norm

from fedrepro.privacy import accountant, audit, fedsc

ROOT = Path(__file__).parents[2]


def _gdp_epsilon(mu, delta):
    """eps at delta of a mu-GDP mechanism (Dong, Roth and Su, Corollary 2.13), solved here with brentq."""
    return brentq(lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta, 0, 200)


def _gdp_mu(eps, delta):
    return brentq(lambda mu: _gdp_epsilon(mu, delta) - eps, 0.1, 10)


# ------------------------------------------------------------------------------ statistics


@pytest.mark.parametrize("k,n", [(0, 10), (3, 50), (49, 50), (120, 1000)])
def test_clopper_pearson_upper_is_the_exact_binomial_limit(k, n):
    alpha = 0.05
    upper = audit.clopper_pearson_upper(k, n, alpha)
    # defining property: P(Binomial(n, upper) <= k) = alpha
    assert binom.cdf(k, n, upper) == pytest.approx(alpha, rel=1e-6)
    assert upper > k / n
    assert audit.clopper_pearson_upper(n, n, alpha) == 1.0
    with pytest.raises(ValueError):
        audit.clopper_pearson_upper(n + 1, n, alpha)


def test_the_bound_takes_each_clopper_pearson_limit_at_alpha_over_two():
    # Issue 27 item 7: two limits (FPR and FNR) at 95 % overall need 1 - 0.05/2 each (union bound).
    # Recompute both limits with scipy's beta quantile from the counts at the reported threshold.
    rng = np.random.default_rng(5)
    delta, confidence, n = 1e-3, 0.95, 600
    out, inn = rng.normal(0, 1, n), rng.normal(1.5, 1, n)
    bound = audit.epsilon_lower_bound(out, inn, delta, confidence)
    ev_out, ev_in = out[n // 2 :], inn[n // 2 :]
    fp, fn = int(np.sum(ev_out > bound.threshold)), int(np.sum(ev_in <= bound.threshold))
    m = n - n // 2
    q = 1 - (1 - confidence) / 2
    fpr, fnr = beta.ppf(q, fp + 1, m - fp), beta.ppf(q, fn + 1, m - fn)
    assert bound.fpr_upper == pytest.approx(fpr, rel=1e-9)
    assert bound.fnr_upper == pytest.approx(fnr, rel=1e-9)
    expected = max(math.log((1 - delta - fnr) / fpr), math.log((1 - delta - fpr) / fnr), 0.0)
    assert bound.eps_lower == pytest.approx(expected, rel=1e-9)
    # at alpha instead of alpha/2 both limits would be lower and the bound higher (and not valid at 95 %)
    assert beta.ppf(confidence, fp + 1, m - fp) < fpr


def test_lower_bound_of_a_gaussian_mechanism_is_below_and_near_its_true_epsilon():
    rng = np.random.default_rng(0)
    mu, delta, n = 1.0, 1e-2, 20_000
    out, inn = rng.normal(0, 1, n), rng.normal(mu, 1, n)
    truth = _gdp_epsilon(mu, delta)  # the best any test can do
    bound = audit.epsilon_lower_bound(out, inn, delta, 0.95)
    assert bound.n_out == bound.n_in == n // 2
    assert 0.5 * truth < bound.eps_lower <= truth
    assert bound.eps_lower <= bound.eps_point
    # the reverse direction (the canary lowers the score) is caught too
    flipped = audit.epsilon_lower_bound(-out, -inn, delta, 0.95)
    assert flipped.eps_lower == pytest.approx(bound.eps_lower, rel=0.15)


def test_lower_bound_without_a_difference_is_zero_at_the_stated_confidence():
    # identical worlds: eps = 0 is the truth, so a bound > 0 is a false claim; at 95 % confidence at most
    # ~5 % of audits may make one (empirical rates alone make many)
    rng = np.random.default_rng(1)
    false_claims = sum(
        audit.epsilon_lower_bound(rng.normal(size=40), rng.normal(size=40), 0.0).eps_lower > 0 for _ in range(200)
    )
    assert false_claims <= 10


def test_lower_bound_rejects_bad_input():
    with pytest.raises(ValueError, match="confidence"):
        audit.epsilon_lower_bound(np.zeros(8), np.ones(8), 1e-5, 1.0)
    with pytest.raises(ValueError, match="at least 4"):
        audit.epsilon_lower_bound(np.zeros(2), np.ones(2), 1e-5)
    with pytest.raises(ValueError, match="finite"):
        audit.epsilon_lower_bound(np.array([0, 1, 2, np.nan]), np.ones(4), 1e-5)


# ------------------------------------------------------------------------------ power


def test_detection_rate_is_the_false_claim_rate_at_no_signal_and_one_far_above_the_target():
    assert audit.detection_rate(0.0, 0.0, 1e-2, 100, 0.95, trials=100) <= 0.1
    assert audit.detection_rate(8.0, 1.0, 1e-2, 400, 0.95, trials=20) == 1.0
    # a canary at exactly the target's mu can never refute it (the test is valid): rate ~ 0
    mu = _gdp_mu(1.5, 1e-2)
    assert audit.detection_rate(mu, 1.5, 1e-2, 400, 0.95, trials=50) <= 0.1


def test_largest_detected_scaling_is_below_the_noise_that_meets_the_target():
    delta, eps = 1e-2, 1.72
    mu = _gdp_mu(eps, delta)  # a canary that attains the claim exactly
    k = audit.largest_detected_scaling(mu, eps, delta, 1000, 0.95, power=0.8, trials=60)
    # sigma x k is detected 80 % of the time, so it must be a real under-scaling (mu / k above the target's
    # mu) and, at 1000 runs per world, at least a halving of the noise
    assert 0.5 <= k < 1.0
    assert _gdp_epsilon(mu / k, delta) > eps
    assert audit.detection_rate(mu / k, eps, delta, 1000, 0.95, trials=60) >= 0.8
    # fewer runs detect only a larger under-scaling; no canary detects none
    assert audit.largest_detected_scaling(mu, eps, delta, 100, 0.95, trials=60) < k
    assert audit.largest_detected_scaling(0.0, eps, delta, 1000, 0.95) == 0.0


# ------------------------------------------------------------------------------ verdicts


def test_verdict_compares_the_bound_with_the_attackers_epsilon_only():
    from fedrepro.report.audit import verdict

    # issue 27 item 6: DPZV's paper head at quick scale, a bound of 1.02 against a Poisson label of 1: the attacker
    # knows the batch, no finite eps holds against it (the head leaks), and the leak-free head reaches 3.53
    assert verdict(1.02, math.inf, 3.53, 0.0).startswith("no evidence of the leak")
    assert verdict(4.1, math.inf, 3.53, 0.0).startswith("leak shown")
    # a finite epsilon for the attacker's adversary: refuted only above it, whatever the label says
    assert verdict(2.0, 3.53, math.nan, 0.5).startswith("not refuted") and "sigma x 0.5" in verdict(
        2.0, 3.53, math.nan, 0.5
    )
    assert verdict(3.6, 3.53, math.nan, 0.5).startswith("refuted")
    assert "no power" in verdict(0.0, 3.53, math.nan, 0.0)
    # a leak with a finite bound (VAFL's client model): tested against it, and against the leak-free bound of the
    # same adversary
    both = verdict(1.2, 6.87, 0.8, 0.0)
    assert both.startswith("not refuted") and "leak shown: 1.20 > 0.80" in both
    assert "no evidence of the leak: 0.50 <= 0.80" in verdict(0.5, 6.87, 0.8, 0.0)


def test_audit_table_names_each_rows_adversary_and_never_tests_another(tmp_path):
    from fedrepro.audit.common import Audited
    from fedrepro.report import audit as report

    rng = np.random.default_rng(2)
    mu = 3.0  # well above the adversary's epsilon, below the claimed label's? no: the label is for another adversary
    result = Audited(
        mechanism="m",
        variant="v",
        adversary="the clients pooled",
        out=rng.normal(0, 1, 400),
        inn=rng.normal(mu, 1, 400),
        delta=1e-2,
        eps_claimed=0.5,
        claimed_for="one who does not know the batch",
        eps_adversary=1.0,
        eps_reference=math.nan,
        mu_attained=mu,
        sigma=0.1,
        note="n",
    )
    spec = {"confidence": 0.95, "level": "quick", "power": {"probability": 0.8, "trials": 20}}
    table = report.write(
        [result], spec, str(tmp_path / "privacy" / "audit.csv"), str(tmp_path / "privacy" / "audit.md")
    )
    row = table.iloc[0]
    assert row["eps_lower_bound"] > row["eps_adversary"] > row["eps_claimed"]
    assert row["verdict"].startswith("refuted") and "> 1.00 against this adversary" in row["verdict"]
    assert row["runs_per_world"] == 400 and row["runs_in_bound"] == 200
    assert 0 < row["detects_scaling"] < 1
    text = (tmp_path / "privacy" / "audit.md").read_text()
    assert "attacker = the clients pooled" in text and "is for one who does not know the batch" in text


# ------------------------------------------------------------------------------ DP-CalR alone


def test_fedsc_release_scores_measure_the_noise_and_the_clipped_sensitivity():
    # score = sum over shares of <R~ - mid, D>: N(-+ T |D|^2 / 2, T sigma^2 |D|^2) with |D| = sqrt(2) mu / n
    # when the release clips to sqrt(mu) and adds N(0, sigma^2) per entry; no clipping makes |D| 100x larger,
    # no noise makes the std 0, one reused draw makes the shares' noise add up to T sigma instead of sqrt(T) sigma
    sigma, mu, n, shares, runs = 0.05, 2.0, 16, 3, 200
    out, inn = audit.fedsc_release_scores(runs, sigma, mu, n, shares, hidden=6, seed=3)
    d = math.sqrt(2) * mu / n
    for scores, sign in ((out, -1), (inn, 1)):
        assert scores.mean() == pytest.approx(
            sign * shares * d**2 / 2, abs=4 * math.sqrt(shares) * sigma * d / math.sqrt(runs)
        )
        assert scores.std() == pytest.approx(math.sqrt(shares) * sigma * d, rel=0.15)
    # the bound never exceeds the true (PLD) epsilon of the release
    truth = accountant.tight_epsilon(fedsc.fedsc_mechanism(sigma, mu, n, shares), 1e-2)
    assert audit.epsilon_lower_bound(out, inn, 1e-2).eps_lower <= truth


# ------------------------------------------------------------------------------ FedSC's class


FEDSC_WORLD = {
    "delta": 1e-2,
    "clients": 3,
    "local_size": 4,
    "participation": 0.67,
    "rounds": 3,
    "mu": 1e-3,
    "hidden": 8,
}


@pytest.fixture(scope="module")
def fedsc_audit():
    import torch

    torch.set_num_threads(1)
    from fedrepro.audit.fedsc import fedsc_scores

    # eps = 1e4: little noise, so a replay that misses the real run's augmentations shows at once (2x the noise)
    return {eps: fedsc_scores({**FEDSC_WORLD, "eps": eps}, 2, seed=0) for eps in (1e4, 2.0)}


def test_fedsc_audit_replays_the_class_and_is_compared_at_its_realised_shares(fedsc_audit):
    from fedrepro.algorithms.fedsc.fedsc import noise_sigma

    sens = math.sqrt(2) * 1e-3 / 4
    for eps, result in fedsc_audit.items():
        # the class's own sigma: Prop. 6.6 for 3 planned shares at |D_j| = 4, times p = 2/3 (2 of 3 clients a round)
        spec = {"rounds": 3, "mu": 1e-3, "sharing": {"after": 0.0, "every": 1}, "privacy": {"eps": eps, "delta": 1e-2}}
        assert result.sigma == pytest.approx(noise_sigma(spec, [4, 4, 4], 2))
        assert result.sigma == pytest.approx(fedsc.sigma_for_epsilon(eps, 3, 1e-3, 4, 1e-2) * 2 / 3)
        # every upload of the canary's client is scored: the first sharing round has every client upload
        shares = result.extra["shares"]
        assert 1 <= shares <= 3
        # the server's crafted weights make the canary attain the sqrt(2) mu/|D_j| sensitivity in every share
        assert result.mu_attained == pytest.approx(math.sqrt(shares) * sens / result.sigma, rel=0.1)
    replay = fedsc_audit[1e4]
    # the replay reproduces the release up to its noise: observed minus noiseless has the noise's std
    assert replay.extra["noise_std"] == pytest.approx(replay.sigma, rel=0.1)
    assert (replay.out < 0).all() and (replay.inn > 0).all()
    # eps against the server: `shares` unamplified Gaussians, exact GDP (closed form here)
    result = fedsc_audit[2.0]
    mu = math.sqrt(result.extra["shares"]) * sens / result.sigma
    assert result.eps_adversary == pytest.approx(_gdp_epsilon(mu, 1e-2), rel=1e-2)


# ------------------------------------------------------------------------------ DPZV's class


@pytest.fixture(scope="module")
def dpzv_audit():
    import torch

    from fedrepro.audit.dpzv import dpzv_label_scores, dpzv_settings, tiny_vfl_data

    torch.set_num_threads(1)
    data = tiny_vfl_data(32)
    cfg = {
        "batch_size": 8,
        "epochs": 1,
        "clip": 0.05,
        "lr_server": 1.0,
        "lr_client": 1e-3,
        "head_clip": 1.0,
        "dp_head_lr_server": 1e-3,
        "eps": 1.0,
        "delta": 1e-3,
    }
    return {
        variant: dpzv_label_scores(4, dpzv_settings(cfg, variant), data, canary=0, canary_scale=30.0)
        for variant in ("paper", "frozen_head", "dp_head")
    }


# One test reads the shared fixture: mutation testing reruns only the test that first called a function.
def test_dpzv_audit_measures_the_noise_the_head_leak_and_the_dp_head(dpzv_audit):
    _check_rounds_and_scalar_noise(dpzv_audit)
    _check_server_head_leak(dpzv_audit)
    _check_dp_head(dpzv_audit)


def _check_rounds_and_scalar_noise(dpzv_audit):
    from fedrepro.privacy import dpzv

    for out, inn, info in dpzv_audit.values():
        # the 32-sample data passed in, not the default: 1 epoch x 2 clients x 32/8 batches
        assert info["rounds"] == dpzv.total_rounds(1, 2, 32, 8) == 8
        assert info["canary_rounds"] == 2  # once per client pass over the data
        assert info["sigma"] == pytest.approx(info["privacy"]["sigma"])
        assert info["noise_std"] == pytest.approx(info["sigma"], rel=0.3)  # 4 runs x 2 worlds x 8 rounds
        assert np.isfinite(out).all() and np.isfinite(inn).all()
        assert len(set(out)) == len(out)  # fresh noise in every run
        assert info["noise_distinct"] == 1.0  # and in every round


def _check_server_head_leak(dpzv_audit):
    _, _, paper = dpzv_audit["paper"]
    out, inn, frozen = dpzv_audit["frozen_head"]
    two_c_over_b = 2 * 0.05 / 8
    assert 0 < paper["canary_rounds"] < paper["rounds"]
    # trained head: rounds without the canary move by more than the 2C/B a round may move at all
    assert paper["leak_max"] > two_c_over_b
    # frozen head: rounds without the canary do not move at all
    assert frozen["leak_max"] == 0.0
    # each of the canary's own K = 2 rounds moves by exactly 2C/B: the crafted head splits the canary's prediction
    # between its two labels, so its clipped difference is +C in one world and -C in the other in every round
    # (`_craft_head`; a random head split them in about half the rounds: 0.71 of the full mu), so mu^2 is
    # 2 (2C/B / sigma)^2 (broken clipping would move them further, a head leak would add the other rounds)
    rounds_split = [(mu * frozen["sigma"] / two_c_over_b) ** 2 for mu in frozen["mu_canary"]]
    assert len(rounds_split) == 4 * 2
    assert all(k == pytest.approx(2, abs=1e-4) for k in rounds_split), rounds_split
    # the head's leak multiplies the worlds' separation (mu^2 of the replayed noiseless scalars), and the
    # attacker's mean log-likelihood-ratio gap estimates it (a mu-GDP Gaussian: N(-+mu^2/2, mu^2) per run;
    # 4 runs per world: within 4 standard errors)
    mu2_paper, mu2_frozen = (float(np.mean(np.square(info["mu_all"]))) for info in (paper, frozen))
    assert mu2_paper > 3 * mu2_frozen
    paper_out, paper_in, _ = dpzv_audit["paper"]
    gap = paper_in.mean() - paper_out.mean()
    assert 0 < gap and abs(gap - mu2_paper) < 4 * math.sqrt(2 * mu2_paper / len(paper_in))


def _check_dp_head(dpzv_audit):
    out, inn, info = dpzv_audit["dp_head"]
    frozen = dpzv_audit["frozen_head"][2]
    # the replicas take the real head before each round: rounds without the canary are the same in both worlds
    assert info["leak_max"] == 0.0
    # the head's noisy gradient adds to what the attacker sees of the canary's rounds, within the joint
    # multiplier s/sqrt(5): K = 2 rounds of sensitivity 2C/B (Delta) and 2 C_h (head, noise s C_h)
    s = info["privacy"]["noise_multiplier"]
    bound = math.sqrt(2) * math.sqrt(5) / s
    assert min(info["mu_canary"]) > max(frozen["mu_canary"]) and max(info["mu_canary"]) <= bound * (1 + 1e-5)
    # the crafted head keeps the canary's prediction on its two labels: both parts reach their full sensitivity
    assert min(info["mu_canary"]) > 0.999 * bound
    assert np.isfinite(out).all() and len(set(inn)) == len(inn)


# ------------------------------------------------------------------------------ SteFFLe's class


STEFFLE_WORLD = {
    "eps": 3.0,
    "lam": 1.0,
    "silos": 2,
    "num_train": 40,
    "batch": 8,
    "epochs": 2,
    "eta_theta": 0.25,
    "eta_w": 1.0,
    "clip": 2.0,
    "radius": 2.0,
    "canary_scale": 10.0,
}


def _canary_rounds(silo_sizes=(20, 20), batch=8, epochs=2) -> int:
    """Rounds in which the canary (row 0: silo 0's local index 0) is in its silo's batch, from the audit
    seed's Poisson schedule replayed here."""
    from fedrepro.algorithms.steffle.base import BatchSchedule, seed_generator

    schedule, gen = BatchSchedule(list(silo_sizes), batch, "poisson"), seed_generator(0, "batches")
    hits = 0
    for _ in range(epochs):
        local, weight = schedule.epoch(gen)
        hits += int(((local[0] == 0) & (weight[0] > 0)).any(-1).sum())
    return hits


def test_steffle_audit_replays_the_trainer_and_is_compared_with_the_known_membership_epsilon():
    import torch

    from fedrepro.audit.steffle import steffle_scores

    torch.set_num_threads(1)
    runs = 300
    result = steffle_scores(STEFFLE_WORLD, runs, seed=0)
    hits = _canary_rounds()
    assert result.extra["canary_rounds"] == hits > 0
    # against the server, who sees the batch: k unamplified Gaussians of the joint multiplier (exact GDP)
    mu = math.sqrt(hits) / result.extra["joint_multiplier"]
    assert result.eps_adversary == pytest.approx(_gdp_epsilon(mu, result.delta), rel=1e-2)
    assert result.delta == pytest.approx(1 / 40**2)
    # an exact replay makes the score the Gaussian log-likelihood ratio: N(-+ mu^2/2, mu^2) per world with the
    # canary's attained mu (a replay off by anything but the noise, e.g. a P_S that differs between the worlds,
    # moves the means; a wrong sigma scales them)
    m = result.mu_attained
    assert 0 < m <= mu * (1 + 1e-6)
    tol = 4 * m / math.sqrt(runs)
    assert result.out.mean() == pytest.approx(-(m**2) / 2, abs=tol)
    assert result.inn.mean() == pytest.approx(m**2 / 2, abs=tol)
    assert result.out.std() == pytest.approx(m, rel=0.15) and result.inn.std() == pytest.approx(m, rel=0.15)


def test_tran_audit_replays_the_primal_steps_and_counts_the_dual_releases():
    import torch

    from fedrepro.algorithms.steffle.base import BatchSchedule, seed_generator
    from fedrepro.audit import steffle as audit_steffle

    torch.set_num_threads(1)
    cfg = {k: STEFFLE_WORLD[k] for k in ("eps", "lam", "num_train", "batch", "epochs", "eta_theta", "canary_scale")}
    cfg["clip"] = 1.0
    result = audit_steffle.tran_scores(cfg, 60, seed=0)
    # the canary's primal steps, from the shared Poisson schedule of the one (central) silo
    schedule, gen = BatchSchedule([40], 8, "poisson"), seed_generator(0, "batches")
    hits = 0
    for _ in range(2):
        local, weight = schedule.epoch(gen)
        hits += int(((local[0] == 0) & (weight[0] > 0)).any(-1).sum())
    assert result.extra["canary_rounds"] == hits > 0
    # known batch: those steps and both epochs' dual releases, each a Gaussian of multiplier z (exact GDP)
    mu = math.sqrt(hits + 2) / result.extra["noise_multiplier"]
    assert result.eps_adversary == pytest.approx(_gdp_epsilon(mu, result.delta), rel=1e-2)
    assert 0 < result.mu_attained <= mu * (1 + 1e-6)
    # the primal replay is exact: observed step minus the replica's noiseless step is the noise, std 2 z C_p / m
    data = {w: d.centralised() for w, d in audit_steffle.steffle_world({**cfg, "silos": 1}, 0).items()}
    real, shadow, _ = audit_steffle._tran_runs(data, cfg, 60, 0)
    primal, dual = audit_steffle._run_tran_world(real["out"], shadow, (1.0, 1.0))
    residual = torch.cat([(obs - clean).flatten() for step in primal for obs, clean, _, _ in step])
    assert float(residual.std()) == pytest.approx(2 * result.extra["noise_multiplier"] / 8, rel=0.05)
    assert len(dual) == 2 and len(primal) == real["out"].rounds


LING_WORLD = {
    **{k: STEFFLE_WORLD[k] for k in ("eps", "lam", "silos", "num_train", "batch", "epochs", "eta_theta")},
    "dp_norm": 1.0,
    "clip_norm_for_loss": 1.0,
    "canary_scale": 10.0,
}


def test_ling_audit_removes_the_record_and_is_compared_with_the_known_batch_epsilon():
    import torch

    from fedrepro.audit.steffle import ling_scores

    torch.set_num_threads(1)
    runs = 300
    result = ling_scores(LING_WORLD, runs, seed=0)
    hits = _canary_rounds()
    assert result.extra["canary_rounds"] == hits > 0
    # known batch: per canary round the update (C/m) and the loss statistic (B_t/m), both multiplier z: mu^2 = 2k/z^2
    mu = math.sqrt(2 * hits) / result.extra["noise_multiplier"]
    assert result.eps_adversary == pytest.approx(_gdp_epsilon(mu, result.delta), rel=1e-2)
    # the outlier the initial model gets wrong sits on both clips: nearly the whole sensitivity (a canary that
    # stayed in the world without it would attain 0; one that is not clipped, more than mu)
    m = result.mu_attained
    assert 0.9 * mu < m <= mu * (1 + 1e-6)
    tol = 4 * m / math.sqrt(runs)
    assert result.out.mean() == pytest.approx(-(m**2) / 2, abs=tol)
    assert result.inn.mean() == pytest.approx(m**2 / 2, abs=tol)
    assert result.out.std() == pytest.approx(m, rel=0.15) and result.inn.std() == pytest.approx(m, rel=0.15)


@pytest.mark.parametrize("mu", [0.3, 0.9, 1.6])
def test_largest_detected_scaling_bisects_to_the_linear_scans_answer(mu):
    # the first k of SCALINGS (largest first) whose simulated detection rate reaches the power, found by
    # scanning every k with detection_rate (all trials, no early stop)
    delta, eps, runs, trials = 1e-2, 1.5, 200, 40
    scan = next((k for k in audit.SCALINGS if audit.detection_rate(mu / k, eps, delta, runs, 0.95, trials) >= 0.8), 0.0)
    assert audit.largest_detected_scaling(mu, eps, delta, runs, 0.95, 0.8, trials) == scan


def test_audit_row_gives_the_full_canarys_power_and_the_unit():
    from fedrepro.audit.common import Audited
    from fedrepro.report.audit import audit_row

    rng = np.random.default_rng(3)
    eps, delta = 1.5, 1e-2
    weak = Audited(
        mechanism="m",
        variant="v",
        adversary="a",
        out=rng.normal(0, 1, 400),
        inn=rng.normal(0.3, 1, 400),
        delta=delta,
        eps_claimed=eps,
        claimed_for="a",
        eps_adversary=eps,
        eps_reference=math.nan,
        mu_attained=0.3,
        sigma=1.0,
        note="",
        unit="one record",
    )
    row = audit_row(weak, 0.95, {"probability": 0.8, "trials": 40})
    # the full canary attains the adversary's mu: it detects a smaller under-scaling than a weak canary
    full = audit.largest_detected_scaling(_gdp_mu(eps, delta), eps, delta, 400, 0.95, 0.8, 40)
    assert row["detects_scaling_full_canary"] == full > row["detects_scaling"]
    assert row["unit"] == "one record"


def test_the_canaries_attain_nearly_the_full_sensitivity_where_the_audit_sizes_for_sigma_over_two():
    # issue 27: the audit detects sigma/2 only if its canary reaches >= ~0.85 of the adversary's GDP mu (a
    # Gaussian canary of ratio r at mu_max / k). SteFFLe needs balanced groups (h_w's 2 sqrt(2/rho)/m assumes both
    # at rho), Tran a canary predicted positive (its group sums carry sigma_i) and a dual step that puts the
    # primal fairness gradient on its clip; the settings of config.yaml's audit block, q = 1.
    import torch

    from fedrepro.audit import steffle as audit_steffle

    torch.set_num_threads(1)
    steffle = audit_steffle.steffle_scores({**STEFFLE_WORLD, "lam": 10.0, "batch": 20}, 40, seed=0)
    mu = math.sqrt(steffle.extra["canary_rounds"]) / steffle.extra["joint_multiplier"]
    assert 0.9 * mu < steffle.mu_attained <= mu * (1 + 1e-6)
    cfg = {"eps": 3.0, "lam": 200.0, "num_train": 40, "batch": 40, "epochs": 3, "eta_theta": 0.25, "clip": 1.0}
    tran = audit_steffle.tran_scores({**cfg, "canary_scale": 10.0}, 40, seed=0)
    mu = math.sqrt(tran.extra["canary_rounds"] + 3) / tran.extra["noise_multiplier"]
    assert 0.9 * mu < tran.mu_attained <= mu * (1 + 1e-6)


def test_power_limit_names_the_size_or_the_canary():
    from fedrepro.report.audit import power_limit

    assert power_limit(0.55, 0.6) == "detects sigma x 0.5"
    assert power_limit(0.35, 0.6).startswith("canary-limited")
    assert power_limit(0.35, 0.45).startswith("size-limited")
    assert "no under-scaling down to sigma x 0.05" in power_limit(0.0, 0.0)


def test_dp_fermi_audit_runs_steffles_trainer_on_the_centralised_rows():
    import torch

    from fedrepro.audit.steffle import steffle_scores
    from fedrepro.privacy import steffle

    torch.set_num_threads(1)
    runs = 300
    result = steffle_scores({**STEFFLE_WORLD, "lam": 10.0}, runs, seed=0, central=True)
    # one silo of all 40 rows, batch = every row (q = 1): the canary is in both rounds
    assert "1 silos" in result.variant and result.extra["canary_rounds"] == 2
    assert result.unit == steffle.THREAT_MODELS["dp_fermi"].unit
    mu = math.sqrt(2) / result.extra["joint_multiplier"]
    assert result.eps_adversary == pytest.approx(_gdp_epsilon(mu, result.delta), rel=1e-2)
    m = result.mu_attained
    assert 0.9 * mu < m <= mu * (1 + 1e-6)
    tol = 4 * m / math.sqrt(runs)
    assert result.out.mean() == pytest.approx(-(m**2) / 2, abs=tol)
    assert result.inn.mean() == pytest.approx(m**2 / 2, abs=tol)


# ------------------------------------------------------------------------------ DPZV's baselines


@pytest.fixture(scope="module")
def baseline_audits():
    import logging

    import torch

    from fedrepro.audit.dpzv import dpzv_baseline_audits

    torch.set_num_threads(1)
    logging.getLogger("absl").setLevel(logging.ERROR)
    cfg = {
        "eps": 0.5,
        "delta": 1e-2,
        "num_train": 32,
        "clients": 2,
        "batch_size": 8,
        "epochs": 1,
        "clip": 0.05,
        "lr_server": 1.0,
        "lr_client": 1e-3,
        "head_clip": 1.0,
        "canary_scale": 30.0,
        "baselines": ["vafl", "zoo_vfl", "vfl_czofo"],
        "embed_clip": 1.0,
    }
    return {name: row for name, row in zip(cfg["baselines"], dpzv_baseline_audits(cfg, 16, seed=0))}


def test_baseline_audits_replay_the_embeddings_and_name_the_servers_epsilons(baseline_audits):
    for name, result in baseline_audits.items():
        z, k, after = (result.extra[key] for key in ("noise_multiplier", "canary_rounds", "rounds_after"))
        steps = 2 if name == "zoo_vfl" and "separate" in result.note else 1
        assert k == 1 and after >= k  # 1 epoch: the canary's id is sent once, in one of client 0's rounds
        # the record's fixed-model known-batch bound: k unamplified Gaussians of multiplier z (exact GDP)
        assert result.eps_reference == pytest.approx(_gdp_epsilon(math.sqrt(steps * k) / z, result.delta), rel=1e-3)
        # the optimised canary pair sits on the clip, opposite: its row moves by the full 2 C_h
        assert result.extra["mu_canary"] == pytest.approx(2 * 1.0 / result.sigma, rel=1e-3)
        if name == "zoo_vfl":
            # h' - h crosses without noise: no finite epsilon, and the scores separate the worlds exactly
            assert math.isinf(result.eps_adversary) and result.inn.min() > result.out.max()
            assert result.extra["tau"] < 1e-5
        else:
            # the client trains on its raw features: every round of client 0 from the canary's first use may
            # move the whole batch, 2 C_h sqrt(B) each
            mu = math.sqrt(after * 8) / z
            assert result.eps_adversary == pytest.approx(_gdp_epsilon(mu, result.delta), rel=1e-3)
            # an exact replay: the Gaussian log-likelihood ratio, N(-+ mu^2/2, mu^2) per world
            assert result.inn.mean() > result.out.mean()
        # the client-model leak: VAFL's and VFL-CZOFO's clients train on the canary's raw features, so their later
        # rounds differ between the worlds; ZOO-VFL's client moves only by the server's scalars, so they do not
        if name == "zoo_vfl":
            assert result.extra["mu_all"] == result.extra["mu_canary"]
        else:
            assert result.extra["mu_all"] > result.extra["mu_canary"]
        # observed minus the replica's clipped embedding of the run's own world is the noise, sigma_h per coordinate
        assert result.extra["noise_std"] == pytest.approx(result.sigma, rel=0.05)


def test_a_row_with_a_leak_free_bound_gives_the_power_for_it():
    # VAFL's row: a finite bound for its leak (6.87) and the fixed-model bound (0.8) its canary is built to test
    from fedrepro.audit.common import Audited
    from fedrepro.report.audit import audit_row

    rng = np.random.default_rng(4)
    delta, reference = 1e-2, 0.8
    result = Audited(
        mechanism="m",
        variant="v",
        adversary="a",
        out=rng.normal(0, 1, 400),
        inn=rng.normal(0.45, 1, 400),
        delta=delta,
        eps_claimed=0.5,
        claimed_for="a",
        eps_adversary=6.87,
        eps_reference=reference,
        mu_attained=0.45,
        sigma=1.0,
        note="",
    )
    row = audit_row(result, 0.95, {"probability": 0.8, "trials": 40})
    full = audit.largest_detected_scaling(_gdp_mu(reference, delta), reference, delta, 400, 0.95, 0.8, 40)
    assert row["detects_scaling_full_canary"] == full > 0


# ------------------------------------------------------------------------------ releases in clear (issue 39)


def test_a_release_in_clear_reaches_the_most_the_runs_can_show(tmp_path):
    """The VFL table init and FedSC's weights: no noise reaches them, the attacker's exact replay separates the
    worlds in every run, so the lower bound is the Clopper-Pearson ceiling of the held-out half (0/n errors on
    each side), above the leak-free 0, and the power columns say any under-scaling is caught."""
    import torch

    from fedrepro.audit import dpzv as audit_dpzv
    from fedrepro.audit import fedsc as audit_fedsc
    from fedrepro.config import load_yaml
    from fedrepro.report.audit import audit_row

    torch.set_num_threads(1)
    cfg = load_yaml(ROOT / "config.yaml")["audit"]
    rows = [
        audit_dpzv.vfl_table_init_audit(cfg["dpzv"], 24, seed=0),
        audit_fedsc.fedsc_weights_audit(cfg["fedsc"], 24, seed=0),
    ]
    ceiling = audit.clopper_pearson_upper(0, 12, 0.025)
    for result in rows:
        assert (result.inn > 0).all() and (result.out < 0).all()  # every run separated
        row = audit_row(result, 0.95, {"probability": 0.8, "trials": 50})
        assert row["eps_lower_bound"] == pytest.approx(math.log((1 - result.delta - ceiling) / ceiling))
        assert row["verdict"].startswith("leak shown") and row["detects_scaling"] == max(audit.SCALINGS)
        assert math.isinf(result.eps_adversary) and result.eps_reference == 0.0


def test_the_threshold_sits_between_the_worlds_so_separated_held_out_runs_are_not_misread():
    """Perfectly separated worlds whose scores spread (FedSC's weights): a threshold at the largest "out" score
    of the first half misread a held-out "out" score above it; the midpoint to the next candidate does not."""
    out = np.concatenate([-np.arange(1.0, 11.0), [-0.5], -np.arange(2.0, 11.0)])  # held-out -0.5 above -1
    inn = np.arange(2.0, 22.0)
    bound = audit.epsilon_lower_bound(out, inn, delta=0.0, confidence=0.95)
    assert bound.fpr_upper == bound.fnr_upper == pytest.approx(audit.clopper_pearson_upper(0, 10, 0.025))
    assert -0.5 < bound.threshold < 2.0


def test_make_audit_detects_sigma_over_two_on_dpzvs_label_rows():
    """Issue 39: at `audit.runs.full` every DPZV label row's canary (config.yaml's settings, crafted head)
    detects sigma x 0.5 or more with the set power (before: 0.40 paper / frozen, 0.35 dp_head, at 0.7 of the
    full mu)."""
    import torch

    from fedrepro.audit import dpzv as audit_dpzv
    from fedrepro.config import load_yaml

    torch.set_num_threads(1)
    cfg = load_yaml(ROOT / "config.yaml")["audit"]
    runs, power = int(cfg["runs"]["full"]["dpzv"]), cfg["power"]
    for result in audit_dpzv.dpzv_audits({**cfg["dpzv"], "variants": ["paper", "frozen_head", "dp_head"]}, 4, seed=0):
        target = result.eps_reference if math.isfinite(result.eps_reference) else result.eps_adversary
        k = audit.largest_detected_scaling(
            result.mu_attained, target, result.delta, runs, 0.95, power["probability"], power["trials"]
        )
        assert k >= 0.5, (result.variant, k)
