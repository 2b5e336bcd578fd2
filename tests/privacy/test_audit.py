"""The empirical audit: its statistics against closed forms, and what the audited mechanisms did."""

import math

import numpy as np
import pytest
from scipy.stats import binom, norm

from fedrepro.privacy import accountant, audit, fedsc


def _gdp_epsilon(mu, delta):
    from scipy.optimize import brentq

    return brentq(lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta, 0, 200)


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
    # identical worlds: eps = 0 is the truth, so a bound > 0 is a false claim; at 95 %
    # confidence at most ~5 % of audits may make one (empirical rates alone make many)
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


@pytest.fixture(scope="module")
def dpzv_audit():
    import torch

    from tests.dpzv.conftest import tiny_settings

    torch.set_num_threads(1)
    data = audit.tiny_vfl_data(32)
    results = {}
    for name, lr_server in (("paper", 1.0), ("frozen", 0.0)):
        settings = tiny_settings(lr_server=lr_server, eps=1.0, delta=1e-3, record_wire=False, extra={"clip": 0.05})
        results[name] = audit.dpzv_label_scores(4, settings, data, canary=0, canary_scale=30.0)
    return results


# One test reads the shared fixture: mutation testing reruns only the test that first called a function.
def test_dpzv_audit_measures_the_scalar_noise_and_exposes_the_server_head_leak(dpzv_audit):
    _check_rounds_and_scalar_noise(dpzv_audit)
    _check_server_head_leak(dpzv_audit)


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
    out, inn, frozen = dpzv_audit["frozen"]
    two_c_over_b = 2 * 0.05 / 8
    assert 0 < paper["canary_rounds"] < paper["rounds"]
    # trained head: rounds without the canary move by more than the 2C/B a round may move at all
    assert paper["leak_max"] > two_c_over_b
    # frozen head: rounds without the canary do not move at all
    assert frozen["leak_max"] == 0.0
    # the mean log-likelihood-ratio gap between the worlds (mu^2 for a mu-GDP Gaussian) grows with the leak
    paper_out, paper_in, _ = dpzv_audit["paper"]
    assert paper_in.mean() - paper_out.mean() > 3 * (inn.mean() - out.mean()) > 0


def test_audit_table_says_n_claim_bound_confidence_and_what_follows(tmp_path):
    import pandas as pd

    from fedrepro.report import audit as report

    assert report._finding(1.4, 1.0, math.nan).startswith("claim refuted")
    assert report._finding(0.8, 1.0, 0.5).startswith("sound bound refuted")
    assert report._finding(0.3, 1.0, 0.5).startswith("no violation detected")
    row = {c: math.nan for c in report.COLUMNS}
    row.update(
        mechanism="m",
        variant="v",
        runs_per_world=1000,
        runs_in_bound=500,
        delta=1e-3,
        eps_claimed=1.0,
        eps_lower_bound=2.5,
        confidence=0.95,
        note="n",
        finding=report._finding(2.5, 1.0, math.nan),
    )
    path = tmp_path / "audit.md"
    report.write_markdown(pd.DataFrame([row], columns=report.COLUMNS), path, "full")
    text = path.read_text()
    assert "confidence 0.95" in text and "| m | v | 1000 | 500 | 0.001 | 1 |" in text
    assert "| 2.5 |" in text and "claim refuted" in text
    # both levels audit both mechanisms, the full one with more runs
    quick, full = report.SETTINGS["quick"], report.SETTINGS["full"]
    assert set(full["dpzv"]["variants"]) == {"paper", "frozen_head"}
    assert full["dpzv"]["runs"] >= 1000 and full["fedsc"]["runs"] > quick["fedsc"]["runs"]
