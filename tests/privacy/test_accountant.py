import math

import numpy as np
import pytest

from fedrepro.privacy import accountant, dpzv, fedsc, steffle

from .test_fedsc_accounting import TABLE6


def _improved_conversion(orders, rdp, delta):
    """Canonne-Kamath-Steinke RDP -> DP (the conversion dp_accounting uses)."""
    orders = np.asarray(orders)
    eps = rdp + np.log1p(-1 / orders) - np.log(delta * orders) / (orders - 1)
    return float(np.min(eps[orders > 1.01]))


def test_rdp_of_gaussian_is_alpha_over_2z2():
    for z, steps in [(0.8, 1), (2.0, 1), (3.0, 25)]:
        orders, rdp = accountant.rdp_curve(z, steps)
        assert np.allclose(rdp, steps * orders / (2 * z**2), rtol=1e-10)


@pytest.mark.parametrize("z,steps,delta", [(1.0, 1, 1e-5), (4.0, 100, 1e-5), (12.0, 50, 1e-2)])
def test_library_epsilon_is_min_over_its_orders(z, steps, delta):
    orders, _ = accountant.rdp_curve(z, steps)
    closed = _improved_conversion(orders, steps * orders / (2 * z**2), delta)
    assert accountant.epsilon(z, steps, delta) == pytest.approx(closed, rel=1e-9)
    # the plain conversion of FedSC's Lemma 6.5 is never better
    plain = np.min(steps * orders / (2 * z**2) + math.log(1 / delta) / (orders - 1))
    assert accountant.epsilon(z, steps, delta) <= plain


def test_subsampling_and_noise_reduce_epsilon():
    full = accountant.epsilon(1.0, 100, 1e-5)
    sub = accountant.epsilon(1.0, 100, 1e-5, sampling_rate=0.05)
    assert sub < full / 5
    eps = [accountant.epsilon(z, 100, 1e-5, sampling_rate=0.05) for z in (0.7, 1.0, 2.0, 4.0)]
    assert eps == sorted(eps, reverse=True)
    more_steps = [accountant.epsilon(1.0, t, 1e-5, sampling_rate=0.05) for t in (10, 100, 1000)]
    assert more_steps == sorted(more_steps)


@pytest.mark.parametrize("z,steps,q", [(1.0, 1000, 0.01), (2.0, 100, 1.0)])
def test_pld_and_rdp_agree_loosely(z, steps, q):
    rdp = accountant.epsilon(z, steps, 1e-5, q, method="rdp")
    pld = accountant.epsilon(z, steps, 1e-5, q, method="pld")
    assert 0.7 * rdp <= pld <= 1.02 * rdp  # PLD is the tighter one


@pytest.mark.parametrize("method", accountant.METHODS)
def test_delta_for_epsilon_inverts_epsilon(method):
    eps = accountant.epsilon(1.5, 200, 1e-5, 0.02, method)
    back = accountant.delta_for_epsilon(1.5, 200, eps, 0.02, method)
    assert back == pytest.approx(1e-5, rel=1e-3)


def test_edge_cases_and_errors():
    assert accountant.epsilon(0.0, 10, 1e-5) == math.inf
    assert accountant.epsilon(0.0, 0, 1e-5) == 0.0
    assert accountant.epsilon(1.0, 0, 1e-5) == 0.0
    assert accountant.epsilon(math.inf, 10, 1e-5) == 0.0
    assert accountant.delta_for_epsilon(0.0, 10, 1.0) == 1.0
    assert accountant.delta_for_epsilon(1.0, 0, 1.0) == 0.0
    with pytest.raises(ValueError, match="allowed: rdp, pld"):
        accountant.epsilon(1.0, 10, 1e-5, method="prv")
    with pytest.raises(ValueError, match="sampling_rate"):
        accountant.epsilon(1.0, 10, 1e-5, sampling_rate=0.0)
    with pytest.raises(ValueError, match="steps"):
        accountant.epsilon(1.0, 2.5, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        accountant.epsilon(1.0, 10, 0.0)


@pytest.mark.parametrize("row", TABLE6, ids=[f"{r[0]}-eps{r[1]}-d{r[2]:g}" for r in TABLE6])
def test_fedsc_library_matches_sqrt2_column(row):
    _, _, delta, mu, sigma, t, n, _, eps_sqrt2 = row
    mech = fedsc.fedsc_mechanism(sigma, mu, n, t)
    assert mech.sampling_rate == 1.0 and mech.steps == t
    assert mech.noise_multiplier == pytest.approx(sigma * n / (math.sqrt(2) * mu))
    # the library's RDP curve with Prop. 6.6's conversion = the sqrt(2) column,
    # up to the discretisation of the library's order grid
    orders, rdp = accountant.rdp_curve(mech.noise_multiplier, t)
    plain = float(np.min(rdp + math.log(1 / delta) / (orders - 1)))
    closed = fedsc.epsilon(t, mu, sigma, n, delta)
    assert closed <= plain <= closed + 0.01
    assert plain == pytest.approx(eps_sqrt2, abs=0.015)
    # with the library's own (tighter) conversion eps is lower, within 30 %
    library = mech.epsilon(delta)
    assert 0.7 * closed < library < closed


def test_fedsc_paper_sensitivity_and_no_noise():
    _, _, delta, mu, sigma, t, n, eps_paper, _ = TABLE6[0]
    mech = fedsc.fedsc_mechanism(sigma, mu, n, t, sens_factor=1.0)
    orders, rdp = accountant.rdp_curve(mech.noise_multiplier, t)
    assert float(np.min(rdp + math.log(1 / delta) / (orders - 1))) == pytest.approx(eps_paper, abs=0.015)
    assert fedsc.fedsc_mechanism(0.0, mu, n, t).epsilon(delta) == math.inf


def test_dpzv_adapter_and_clt_diagnostic():
    t, d, b, c, delta = 656_600, 60_000, 64, 10.0, 1e-3
    for eps_paper, low, high in [(0.1, 0.1, 0.15), (1.0, 1.0, 1.5), (10.0, 100.0, math.inf)]:
        sigma = dpzv.sigma_dp_for_eps(c, t, d, eps_paper, delta)
        mech = dpzv.dpzv_mechanism(sigma, c, b, d, t)
        assert mech.sampling_rate == pytest.approx(b / d)
        assert mech.noise_multiplier == pytest.approx(dpzv.noise_multiplier(sigma, c, b))
        eps = mech.epsilon(delta)
        # the paper's calibration is fine for small eps, far too optimistic for eps = 10
        assert low <= eps <= high
    assert dpzv.dpzv_mechanism(0.0, c, b, d, t).epsilon(delta) == math.inf


def test_steffle_adapters():
    rho = steffle.rho_from_counts([11_888, 18_112])
    delta = steffle.delta_for_n(22_500)
    t, n_local, m = 1_200, 7_500, 256
    sw = steffle.sigma_w(1.0, delta, t, n_local, rho)
    theta = steffle.steffle_theta_mechanism(sw, clip=1.0, batch_size=m, local_size=n_local, iterations=t)
    # Theorem 3.3 at n = 22,500, 3 silos, T = 1,200, m = 256: z = m sigma_theta / C ~ 34 under add/remove, ~ 17 under replace-one (D = L = 1)
    assert theta.noise_multiplier == pytest.approx(16.8, abs=0.1)
    add_remove = steffle.steffle_theta_mechanism(sw, 1.0, m, n_local, t, adjacency="add_remove")
    assert add_remove.noise_multiplier == pytest.approx(2 * theta.noise_multiplier)
    assert theta.sampling_rate == pytest.approx(m / n_local) and theta.steps == t
    assert theta.epsilon(delta) < 1.0  # the closed form is conservative for theta
    w = steffle.steffle_w_mechanism(sw, m, n_local, t, rho)
    assert w.noise_multiplier == pytest.approx(sw * m / (2 * math.sqrt(2 / rho)))
    both = accountant.combined_epsilon([theta, w], delta)
    assert max(theta.epsilon(delta), w.epsilon(delta)) < both
    assert accountant.combined_epsilon([theta], delta) == pytest.approx(theta.epsilon(delta))
    assert accountant.combined_epsilon([], delta) == 0.0
    with pytest.raises(ValueError, match="allowed: replace_one, add_remove"):
        steffle.steffle_theta_mechanism(sw, 1.0, m, n_local, t, adjacency="swap")


# ---------------------------------------------------------------- PLD against closed forms


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact eps of mu-GDP at delta (Dong, Roth and Su 2022, Cor. 2.13; for one release this is
    the analytic Gaussian mechanism of Balle and Wang 2018, Thm. 8, with mu = sensitivity / sigma)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return brentq(excess, 0.0, 300.0, xtol=1e-12)


@pytest.mark.parametrize(
    "z,steps,delta", [(1.0, 1, 1e-5), (20.0, 3, 1e-5), (2.0, 100, 1e-5), (0.5, 10, 1e-5), (5.0, 400, 1e-3)]
)
def test_pld_of_full_batch_gaussian_is_the_exact_gdp_epsilon(z, steps, delta):
    # T full-batch Gaussian releases with multiplier z are exactly sqrt(T)/z-GDP
    exact = _gaussian_epsilon(math.sqrt(steps) / z, delta)
    pld = accountant.epsilon(z, steps, delta, method="pld")
    assert exact <= pld * (1 + 1e-9)  # pessimistic: never below the truth
    assert pld == pytest.approx(exact, rel=2e-3)
    assert accountant.tight_epsilon(accountant.GaussianComposition(z, steps, 1.0, "g"), delta) == pld
    # RDP is looser, never tighter
    assert accountant.epsilon(z, steps, delta, method="rdp") > pld
    # delta at the exact eps is delta back
    assert accountant.delta_for_epsilon(z, steps, exact, method="pld") == pytest.approx(delta, rel=2e-2)


def test_tight_epsilon_composes_every_release_of_a_run():
    a = accountant.GaussianComposition(2.0, 50, 1.0, "a")
    b = accountant.GaussianComposition(4.0, 200, 1.0, "b")
    mu = math.sqrt(50 / 2.0**2 + 200 / 4.0**2)  # GDP composes as the root of the sum of squares
    assert accountant.tight_epsilon([a, b], 1e-5) == pytest.approx(_gaussian_epsilon(mu, 1e-5), rel=2e-3)
    assert accountant.tight_epsilon([], 1e-5) == 0.0
    assert accountant.tight_epsilon([accountant.GaussianComposition(0.0, 5, 1.0, "none")], 1e-5) == math.inf


def test_pld_discretisation_is_fine_enough_at_paper_scale_dpzv_mnist():
    # paper-scale MNIST: D = 54000 (after the 10 % holdout), B = 64, 7 clients, 100 epochs, eps = 1
    from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
    from dp_accounting.pld import PLDAccountant

    d, b, t, delta = 54_000, 64, 7 * (54_000 // 64) * 100, 1e-3
    sigma = dpzv.sigma_dp_for_eps(10.0, t, d, 1.0, delta)
    mech = dpzv.dpzv_mechanism(sigma, 10.0, b, d, t)
    tight = accountant.tight_epsilon(mech, delta)

    def fixed(interval):
        acc = PLDAccountant(value_discretization_interval=interval)
        acc.compose(SelfComposedDpEvent(PoissonSampledDpEvent(b / d, GaussianDpEvent(mech.noise_multiplier)), t))
        return acc.get_epsilon(delta)

    assert fixed(1e-3) > 1.3  # what a fixed 1e-3 interval gives: 1.41
    assert tight == pytest.approx(fixed(1e-5), rel=2e-3)  # 1.057
    assert 1.0 < tight < 0.9 * mech.epsilon(delta, method="rdp")  # RDP: 1.215
