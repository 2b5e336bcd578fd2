import math

import pytest

from fedrepro.privacy import dpzv

# mu for (eps, delta) from eq. (11), computed outside this code; tolerance 1e-5
MU_TABLE = [
    (0.05, 0.033322, 0.017310),
    (0.1, 0.057457, 0.032521),
    (0.2, 0.101028, 0.061334),
    (0.5, 0.216914, 0.142211),
    (1, 0.388401, 0.268051),
    (2, 0.691927, 0.501552),
    (3, 0.964086, 0.719117),
    (5, 1.449607, 1.121242),
    (8, 2.083274, 1.666031),
    (10, 2.462693, 2.000446),
]


@pytest.mark.parametrize("eps,mu3,mu5", MU_TABLE)
def test_mu_table(eps, mu3, mu5):
    assert dpzv.mu_from_eps_delta(eps, 1e-3) == pytest.approx(mu3, abs=1e-5)
    assert dpzv.mu_from_eps_delta(eps, 1e-5) == pytest.approx(mu5, abs=1e-5)


def test_forward_checks():
    assert dpzv.gdp_delta(1, 1) == pytest.approx(0.1269367, abs=1e-7)
    assert dpzv.gdp_delta(1, 0.5) == pytest.approx(0.0068296, abs=1e-7)


@pytest.mark.parametrize("eps", [0.05, 1.0, 10.0, 40.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-9])
def test_round_trips(eps, delta):
    mu = dpzv.mu_from_eps_delta(eps, delta)
    assert dpzv.gdp_delta(eps, mu) == pytest.approx(delta, rel=1e-8)
    assert dpzv.eps_from_mu(mu, delta) == pytest.approx(eps, rel=1e-8)


def test_delta_monotone_and_log_space_at_large_eps():
    assert dpzv.gdp_delta(1, 0.5) < dpzv.gdp_delta(1, 1) < dpzv.gdp_delta(1, 2)
    assert dpzv.gdp_delta(0.5, 1) > dpzv.gdp_delta(1, 1) > dpzv.gdp_delta(2, 1)
    # e^eps overflows in a naive evaluation; the log-space form stays finite and in [0, 1]
    big = dpzv.gdp_delta(1500.0, 50.0)
    assert 0.0 <= big < 1.0 and math.isfinite(big)
    assert dpzv.gdp_delta(1500.0, 50.0) > dpzv.gdp_delta(1600.0, 50.0)
    assert dpzv.gdp_delta(1.0, 0.0) == 0.0
    assert dpzv.gdp_delta(math.inf, 3.0) == 0.0


def test_composition_of_gdp_rounds():
    # T-fold composition of (mu/sqrt(T))-GDP is mu-GDP; the per-round noise of
    # Theorem C.2 composes to sigma_dp = r C_L sqrt(T)/mu
    mu, t, c, b, d = 0.388401, 656_600, 10.0, 64, 60_000
    per_round = mu / math.sqrt(t)
    assert math.sqrt(t * per_round**2) == pytest.approx(mu)
    assert dpzv.sigma_dp(c, t, d, mu) == pytest.approx((b / d) * (2 * c / b) / per_round)


def test_total_rounds():
    assert dpzv.total_rounds(100, 7, 60_000, 64) == 656_600
    assert dpzv.total_rounds(100, 4, 50_000, 128) == 156_400
    assert dpzv.total_rounds(100, 12, 9_843, 64) == 184_800
    assert dpzv.total_rounds(1, 7, 60_000, 64, drop_last=True) == 7 * 937


@pytest.mark.parametrize(
    "name,clients,samples,batch,eps,expected",
    [
        ("MNIST", 7, 60_000, 64, 0.1, 4.701),
        ("MNIST", 7, 60_000, 64, 1.0, 0.6954),
        ("MNIST", 7, 60_000, 64, 10.0, 0.1097),
        ("CIFAR-10", 4, 50_000, 128, 1.0, 0.4073),
        ("ModelNet40", 12, 9_843, 64, 10.0, 0.3547),
    ],
)
def test_example_sigma_dp(name, clients, samples, batch, eps, expected):
    t = dpzv.total_rounds(100, clients, samples, batch)
    assert dpzv.sigma_dp_for_eps(10.0, t, samples, eps, 1e-3) == pytest.approx(expected, rel=1e-3)


def test_sigma_dp_direct_example_and_infinite_eps():
    assert dpzv.sigma_dp(10, 656_600, 60_000, 0.388401) == pytest.approx(0.69542, abs=1e-5)
    assert dpzv.mu_from_eps_delta(math.inf, 1e-3) == math.inf
    assert dpzv.sigma_dp_for_eps(10, 656_600, 60_000, math.inf, 1e-3) == 0.0
    assert dpzv.sigma_embedding(10, 64, 1000, 60_000, math.inf) == 0.0
    # sigma scales linearly with C (Figure 5 ablation) and with 1/mu
    assert dpzv.sigma_dp(500, 100, 1000, 1.0) == pytest.approx(50 * dpzv.sigma_dp(10, 100, 1000, 1.0))


def test_clt_diagnostic_examples():
    # MNIST (D = 60000, M = 7, 100 epochs) B = 64 at eps = 1 gives sigma~ = 2.23, mu_CLT = 0.409 vs 0.388;
    # at eps = 0.1 exactly 0.0575; at eps = 10 sigma~ = 0.35 and mu_CLT ~ 50
    t, d, b, c = 656_600, 60_000, 64, 10.0
    r = b / d
    rows = {0.1: (None, 0.0575), 1.0: (2.23, 0.409), 10.0: (0.35, 50.0)}
    for eps, (s_expected, mu_expected) in rows.items():
        sigma = dpzv.sigma_dp_for_eps(c, t, d, eps, 1e-3)
        s = dpzv.noise_multiplier(sigma, c, b)
        assert s == pytest.approx(r * math.sqrt(t) / dpzv.mu_from_eps_delta(eps, 1e-3))
        if s_expected is not None:
            assert s == pytest.approx(s_expected, abs=0.005)
        rel = 0.02 if eps == 10.0 else 0.002
        assert dpzv.mu_clt(r, t, s) == pytest.approx(mu_expected, rel=rel)
    # CIFAR B = 64, eps = 10 gives mu_CLT ~ 266
    t_c = dpzv.total_rounds(100, 4, 50_000, 64)
    s_c = dpzv.noise_multiplier(dpzv.sigma_dp_for_eps(c, t_c, 50_000, 10.0, 1e-3), c, 64)
    assert dpzv.mu_clt(64 / 50_000, t_c, s_c) == pytest.approx(266, rel=0.01)


def test_clt_epsilon_close_at_small_eps_far_at_large():
    t, d, b, c = 656_600, 60_000, 64, 10.0
    for eps, low, high in [(0.1, 0.09, 0.11), (1.0, 1.0, 1.1), (10.0, 100.0, math.inf)]:
        s = dpzv.noise_multiplier(dpzv.sigma_dp_for_eps(c, t, d, eps, 1e-3), c, b)
        assert low <= dpzv.clt_epsilon(b / d, t, s, 1e-3) <= high
    assert dpzv.mu_clt(0.01, 100, 0.0) == math.inf
    assert dpzv.mu_clt(0.01, 100, 0.01) == math.inf
    assert dpzv.mu_clt(0.01, 0, 1.0) == 0.0


def test_embedding_noise_calibration():
    mu = dpzv.mu_from_eps_delta(1.0, 1e-3)
    t_rel = 656_600
    sigma_h = dpzv.sigma_embedding(10.0, 64, t_rel, 60_000, mu)
    assert sigma_h == pytest.approx(2 * 10 * 64 * math.sqrt(t_rel) / (60_000 * mu))
    # same calibration as DPZV's scalar but with sensitivity 2 C_h instead of 2C/B
    assert sigma_h == pytest.approx(64 * dpzv.sigma_dp(10.0, t_rel, 60_000, mu))
    pair = dpzv.sigma_embedding(10.0, 64, t_rel, 60_000, mu, embeddings_per_release=2)
    assert pair == pytest.approx(dpzv.sigma_embedding(10.0, 64, 2 * t_rel, 60_000, mu))


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="delta"):
        dpzv.mu_from_eps_delta(1.0, 0.0)
    with pytest.raises(ValueError, match="eps"):
        dpzv.mu_from_eps_delta(-1.0, 1e-3)
    with pytest.raises(ValueError, match="clip C"):
        dpzv.sigma_dp(0.0, 10, 100, 1.0)
    with pytest.raises(ValueError, match="sampling_rate"):
        dpzv.mu_clt(1.5, 10, 1.0)
    with pytest.raises(ValueError, match="embeddings_per_release"):
        dpzv.sigma_embedding(1.0, 8, 10, 100, 1.0, embeddings_per_release=0)


def test_no_overflow_at_huge_mu():
    """Issue 16: eps = 10 at paper scale on a small data set gave mu_CLT ~ 1e152 and an
    OverflowError inside gdp_delta's brentq bracket. Huge mu now means eps = inf."""
    assert dpzv.gdp_delta(1e304, 1e152) == 0.0
    assert 0.0 <= dpzv.gdp_delta(5e7, 1e4) <= 1.0
    assert math.isinf(dpzv.eps_from_mu(1e100, 1e-3))
    assert math.isinf(dpzv.clt_epsilon(0.5, 1000, 0.05, 1e-3))
    # mu = 1e3 is still answered, close to the closed-form large-mu limit mu^2/2 + mu * z(delta)
    assert dpzv.eps_from_mu(1e3, 1e-3) == pytest.approx(0.5e6 + 1e3 * 3.09, rel=1e-3)


def test_dp_head_joint_multiplier_is_s_over_sqrt5_closed_form():
    """dp_head: Delta (multiplier s) and the head's DP-SGD (noise s C_h on a sum of replace-one
    sensitivity 2 C_h, multiplier s/2) on the same batch. Without subsampling (q = 1) the T rounds are
    exact GDP with mu = sqrt(T (1/s^2 + 4/s^2)) = sqrt(5 T)/s; the PLD epsilon must match that closed
    form (the old s/sqrt(2) gives sqrt(2 T)/s, far below)."""
    s, t, delta = 8.0, 30, 1e-3
    noise = {"sigma": 1.0, "noise_multiplier": s, "releases": t, "sampling_rate": 1.0}
    record = dpzv.label_privacy_record(noise, "dp_head", delta)
    assert record["head_noise_multiplier"] == pytest.approx(s / 2)
    assert record["joint_noise_multiplier"] == pytest.approx(s / math.sqrt(5))
    closed_form = dpzv.eps_from_mu(math.sqrt(5 * t) / s, delta)
    assert record["eps_pld_sound"] == pytest.approx(closed_form, rel=2e-3)
    assert record["eps_pld_sound"] > 1.3 * dpzv.eps_from_mu(math.sqrt(2 * t) / s, delta)


def test_dp_head_digits_label_1_is_2_83():
    """Quick digits (D = 1212 after the holdout, B = 64, M = 4, 20 epochs, T = 1440) at eps = 1:
    the joint PLD epsilon is 2.83 (the s/sqrt(2) accounting printed 1.56)."""
    t = dpzv.total_rounds(20, 4, 1212, 64, drop_last=True)
    noise = dpzv.dpzv_noise(1.0, 1e-3, 10.0, t, 1212, 64)
    assert dpzv.label_privacy_record(noise, "dp_head", 1e-3)["eps_pld_sound"] == pytest.approx(2.83, abs=0.01)
