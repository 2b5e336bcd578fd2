"""The figures' metrics (App. E.1, eqs. 11 and 12) on hand-computed cases."""

import numpy as np
import pytest

from fedrepro.eval import fairness


def test_error_and_dp_violation_by_hand():
    y_hat = np.array([1, 1, 0, 0, 1, 0, 0, 0])
    s = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    y = np.array([1, 0, 0, 0, 1, 1, 0, 0])
    assert fairness.misclassification_error(y_hat, y) == pytest.approx(2 / 8)
    # P(yhat=1|s=0) = 2/4, P(yhat=1|s=1) = 1/4
    assert fairness.dp_violation(y_hat, s) == pytest.approx(0.25)
    # eq. (2): max |P(yhat|s) - P(yhat)| = |0.5 - 0.375| = 0.125
    assert fairness.dp_violation_marginal(y_hat, s) == pytest.approx(0.125)


def test_eo_violation_is_max_tpr_fpr_gap():
    y_hat = np.array([1, 1, 0, 1, 1, 0, 0, 0, 1, 0])
    y = np.array([1, 1, 1, 0, 0, 1, 1, 0, 0, 0])
    s = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    # group 0: TPR 2/3, FPR 2/2; group 1: TPR 0/2, FPR 1/3
    tpr_gap, fpr_gap = 2 / 3, 1 - 1 / 3
    assert fairness.eo_violation(y_hat, y, s) == pytest.approx(max(tpr_gap, fpr_gap))


def test_binary_symmetry_and_broadcasting():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 2, 200)
    y = rng.integers(0, 2, 200)
    y_hat = rng.integers(0, 2, (3, 4, 200))
    dp = fairness.dp_violation(y_hat, s)
    assert dp.shape == (3, 4)
    # y'=0 and y'=1 give the same gap for binary predictions
    one = [abs(y_hat[i, j][s == 0].mean() - y_hat[i, j][s == 1].mean()) for i in range(3) for j in range(4)]
    np.testing.assert_allclose(dp.ravel(), one)
    eo = fairness.eo_violation(y_hat, y, s)
    for i in range(3):
        for j in range(4):
            p = y_hat[i, j]
            tpr = [p[(y == 1) & (s == g)].mean() for g in (0, 1)]
            fpr = [p[(y == 0) & (s == g)].mean() for g in (0, 1)]
            assert eo[i, j] == pytest.approx(max(abs(tpr[0] - tpr[1]), abs(fpr[0] - fpr[1])))


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="length mismatch"):
        fairness.dp_violation(np.zeros(4), np.zeros(3))
