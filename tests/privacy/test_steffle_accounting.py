import math

import numpy as np
import pytest

from fedrepro.privacy import steffle

CREDIT_SEX = [11_888, 18_112]  # male, female over the 30,000 rows (UCI Credit Card, SEX)
ADULT_SEX = [14_695, 30_527]  # female, male over the 45,222 rows

# Theorem 3.3 computed by hand at the paper's settings (App. E.2: 40 epochs, m = 256, 3:1 split,
# delta = 1/n_train^2, rho from the sex counts of the whole data set): dataset, N, n~, n_train,
# counts, T, ln(1/delta), rho, sigma_w at eps 1/3/9, T_min at eps 1/3/9, T-condition holds at eps 1/3/9
TABLE = [
    (
        "Credit",
        3,
        7_500,
        22_500,
        CREDIT_SEX,
        1_200,
        20.04,
        0.396,
        (0.1314, 0.0438, 0.0146),
        (215, 644, 1_931),
        (True, True, False),
    ),
    (
        "Adult",
        3,
        11_305,
        33_916,
        ADULT_SEX,
        1_800,
        20.86,
        0.325,
        (0.1203, 0.0401, 0.0134),
        (488, 1_463, 4_388),
        (True, True, False),
    ),
    (
        "Credit",
        1,
        22_500,
        22_500,
        CREDIT_SEX,
        3_520,
        20.04,
        0.396,
        (0.0750, 0.0250, 0.0083),
        (1_931, 5_794, 17_381),
        (True, False, False),
    ),
    (
        "Credit",
        12,
        1_875,
        22_500,
        CREDIT_SEX,
        320,
        20.04,
        0.396,
        (0.2714, 0.0905, 0.0302),
        (13, 40, 121),
        (True, True, True),
    ),
]


@pytest.mark.parametrize("row", TABLE, ids=[f"{r[0]}-N{r[1]}" for r in TABLE])
def test_theorem_3_3_at_the_papers_settings(row):
    _, _, n_local, n_train, counts, t, log_inv, rho_shown, sigmas, t_mins, holds = row
    assert steffle.num_iterations(40, n_local, 256) == t
    delta = steffle.delta_for_n(n_train)
    assert -math.log(delta) == pytest.approx(log_inv, abs=0.005)
    rho = steffle.rho_from_counts(counts)
    assert rho == pytest.approx(rho_shown, abs=0.0005)
    for eps, sigma, t_min, ok in zip((1, 3, 9), sigmas, t_mins, holds):
        assert round(steffle.sigma_w(eps, delta, t, n_local, rho), 4) == pytest.approx(sigma, abs=1e-12)
        assert round(steffle.min_iterations(eps, n_local, 256)) == t_min
        pre = steffle.check_preconditions(eps, delta, t, n_local, 256)
        assert pre.applicable and pre.eps_bound
        assert pre.iterations_bound is ok
        assert pre.all_hold is ok
        assert len(pre.messages) == (0 if ok else 1)


def test_sigma_theta_is_l_d_sigma_w():
    delta = steffle.delta_for_n(22_500)
    rho = steffle.rho_from_counts(CREDIT_SEX)
    sw = steffle.sigma_w(1, delta, 1_200, 7_500, rho)
    st = steffle.sigma_theta(1, delta, 1_200, 7_500, rho, lipschitz=5, radius=5)
    assert st == pytest.approx(25 * sw)
    assert round(st, 2) == 3.28  # by hand: Credit, N = 3, eps = 1, L = D = 5
    # squared form of Theorem 3.3
    assert st**2 == pytest.approx(16 * 25 * 25 * math.log(1 / delta) * 1_200 / (7_500**2 * rho))


def test_scaling_laws():
    # Theorem 3.3's scaling: sigma ~ sqrt(T), 1/eps, 1/n~, 1/sqrt(rho)
    base = steffle.sigma_w(2.0, 1e-6, 100, 1_000, 0.3)
    assert steffle.sigma_w(2.0, 1e-6, 400, 1_000, 0.3) == pytest.approx(2 * base)
    assert steffle.sigma_w(4.0, 1e-6, 100, 1_000, 0.3) == pytest.approx(base / 2)
    assert steffle.sigma_w(2.0, 1e-6, 100, 2_000, 0.3) == pytest.approx(base / 2)
    assert steffle.sigma_w(2.0, 1e-6, 100, 1_000, 0.075) == pytest.approx(2 * base)
    assert steffle.sigma_w(math.inf, 1e-6, 100, 1_000, 0.3) == 0.0
    assert steffle.sigma_theta(math.inf, 1e-6, 100, 1_000, 0.3, 5, 5) == 0.0


def test_preconditions_eps_bound_and_non_private():
    delta = 1e-2  # 2 ln(1/delta) = 9.21
    pre = steffle.check_preconditions(10.0, delta, 10**6, 100, 10)
    assert pre.applicable and not pre.eps_bound and pre.iterations_bound
    assert "2 ln(1/delta)" in pre.messages[0]
    inf = steffle.check_preconditions(math.inf, delta, 1, 100, 10)
    assert not inf.applicable and inf.all_hold


def test_rho_from_attribute_and_errors():
    s = np.array([0] * 30 + [1] * 70)
    assert steffle.rho_from_attribute(s, 2) == pytest.approx(29 / 100)
    with pytest.raises(ValueError, match="at most one sample"):
        steffle.rho_from_attribute(np.array([0, 0, 0]), 2)
    with pytest.raises(ValueError, match="group ids"):
        steffle.rho_from_attribute(np.array([0, 2]), 2)
    with pytest.raises(ValueError, match="delta"):
        steffle.sigma_w(1.0, 1.0, 10, 10, 0.3)
    with pytest.raises(ValueError, match="rho"):
        steffle.sigma_w(1.0, 1e-3, 10, 10, 0.0)
