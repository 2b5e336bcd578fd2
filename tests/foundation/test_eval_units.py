"""Unit tests of fedrepro.eval with expected values from independent computations.

Each test pins one behaviour of the health checks, the fairness metrics (SteFFLe eqs. (2), (11),
(12)), the kNN monitor and the linear probe against a closed form, a brute-force loop or a
float64 reference. They are small so that mutation testing (tools/mutate.py) stays cheap.
"""

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch

from fedrepro.eval import fairness, probe
from fedrepro.eval.health import (
    OK,
    Health,
    cell_status,
    chance_margin,
    check_chance,
    check_collapse,
    check_finite,
    effective_rank,
    majority_rate,
    worst,
)
from fedrepro.eval.knn import knn_accuracy
from fedrepro.eval.verdict import not_tested

# ------------------------------------------------------------------------------------ health


def test_health_round_trips_through_a_summary_and_defaults_to_ok():
    health = Health("chance", "at chance (accuracy 0.100)")
    assert health.as_dict() == {"status": "chance", "status_reason": "at chance (accuracy 0.100)"}
    assert Health.from_dict(health.as_dict()) == health
    assert Health.from_dict({"final": {}}) == Health("ok", "")


def test_worst_of_nothing_is_ok():
    assert worst() == OK


def test_check_finite_names_the_round_value_not_the_row_and_skips_text_columns():
    frame = pd.DataFrame({"round": [10, 11, 12], "method": ["a", "b", "c"], "loss": [1.0, np.inf, 2.0]})
    assert check_finite(frame).reason == "diverged at round 11 (loss = inf)"
    assert check_finite(frame.drop(columns="round")).reason == "diverged at round 1 (loss = inf)"
    assert check_finite(frame.assign(loss=[1.0, 2.0, 3.0])) == OK


def test_chance_margin_is_three_binomial_standard_errors_above_a_floor():
    assert chance_margin(0.5, 100) == pytest.approx(3 * math.sqrt(0.25 / 100), rel=1e-12)
    assert chance_margin(0.1, 10**6) == 0.02  # 3 SE = 0.0009 < floor
    assert chance_margin(0.5, None) == chance_margin(0.5, 0) == 0.02


def test_majority_rate_is_the_frequency_of_the_most_common_label():
    assert majority_rate(np.array([0, 2, 2, 1, 2, 0])) == pytest.approx(0.5)
    assert majority_rate(np.array([[1, 1], [1, 0]])) == pytest.approx(0.75)


def test_check_chance_boundary_non_finite_and_name():
    assert check_chance(0.5 + 0.02, chance=0.5).status == "chance"  # exactly chance + margin
    assert check_chance(0.5 + 0.03, chance=0.5) == OK
    assert check_chance(float("nan"), chance=0.5) == Health("diverged", "accuracy = nan")
    assert "probe_acc 0.400" in check_chance(0.4, chance=0.5, name="probe_acc").reason


def reference_effective_rank(x: np.ndarray, center: bool = True) -> float:
    """From the eigenvalues of the (centred) second-moment matrix, in float64."""
    x = np.asarray(x, dtype=np.float64)
    if center:
        x = x - x.mean(axis=0)
    eigen = np.clip(np.linalg.eigvalsh(x.T @ x), 0, None)
    p = eigen[eigen > 1e-300] / eigen.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def test_effective_rank_matches_the_covariance_spectrum_of_offset_float32_data():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 5)) * [3.0, 2.0, 1.0, 0.5, 0.1] + [5.0, -7.0, 0.0, 2.0, 9.0]).astype(np.float32)
    assert effective_rank(x) == pytest.approx(reference_effective_rank(x), rel=1e-10)
    assert effective_rank(x, center=False) == pytest.approx(reference_effective_rank(x, center=False), rel=1e-10)


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_effective_rank_of_tiny_constant_and_overflowing_embeddings():
    rng = np.random.default_rng(4)
    tiny = rng.standard_normal((4000, 4)) * 1e-3  # every eigenvalue below 1
    assert effective_rank(tiny) == pytest.approx(reference_effective_rank(tiny), rel=1e-10)
    assert effective_rank(tiny) > 3.9
    assert effective_rank(np.ones((10, 3))) == 1.0
    assert math.isnan(effective_rank(np.array([[1e200, 0.0], [-1e200, 1.0]])))


def test_check_collapse_at_the_threshold_and_for_a_nan_rank():
    assert check_collapse(2.0, threshold=2.0) == OK
    assert check_collapse(1.99, threshold=2.0) == Health("collapsed", "collapsed (embedding effective rank 1.99 < 2)")
    assert check_collapse(float("nan"), threshold=2.0) == Health("diverged", "embedding effective rank = nan")


def test_verdict_and_cell_status_texts():
    sides = {"a": Health("chance", "at chance"), "b": Health("diverged", "")}
    assert not_tested(sides).label == "not tested (a: at chance; b: diverged)"
    assert not_tested({"a": OK}) is None
    assert cell_status([OK, OK]) == OK


# ------------------------------------------------------------------------------------ fairness


def brute_rates(y_hat, value, cond, s):
    """P[y_hat = value | cond, s = g] per group g with a non-empty conditioning set."""
    out = []
    for g in sorted(set(s)):
        rows = [i for i in range(len(s)) if cond[i] and s[i] == g]
        if rows:
            out.append(sum(y_hat[i] == value for i in rows) / len(rows))
    return out


def brute_dp(y_hat, s):
    gaps = [0.0]
    for value in set(y_hat):
        rates = brute_rates(y_hat, value, [True] * len(s), s)
        gaps += [abs(a - b) for a, b in itertools.combinations(rates, 2)]
    return max(gaps)


def brute_eo(y_hat, y, s):
    gaps = [0.0]
    for value in set(y_hat) | set(y):
        for cond in ([t == value for t in y], [t != value for t in y]):
            rates = brute_rates(y_hat, value, cond, s)
            gaps += [abs(a - b) for a, b in itertools.combinations(rates, 2)]
    return max(gaps)


def brute_dp_marginal(y_hat, s):
    gaps = [0.0]
    for value in set(y_hat):
        marginal = sum(v == value for v in y_hat) / len(y_hat)
        gaps += [abs(r - marginal) for r in brute_rates(y_hat, value, [True] * len(s), s)]
    return max(gaps)


# three labels; group 2 has a single sample; y == value drives the equalized-odds maximum
Y_HAT = [[0, 1, 2, 2, 1, 0, 0, 1], [1, 1, 1, 0, 0, 2, 2, 2]]
Y = [0, 1, 2, 1, 1, 0, 2, 1]
S = [0, 0, 0, 1, 1, 1, 1, 2]


def test_fairness_metrics_match_brute_force_for_each_model_of_a_grid():
    grid = np.array(Y_HAT)
    expected_error = [np.mean([a != b for a, b in zip(row, Y)]) for row in Y_HAT]
    np.testing.assert_allclose(fairness.misclassification_error(grid, Y), expected_error, rtol=1e-12)
    np.testing.assert_allclose(fairness.dp_violation(grid, S), [brute_dp(r, S) for r in Y_HAT], rtol=1e-12)
    np.testing.assert_allclose(fairness.eo_violation(grid, Y, S), [brute_eo(r, Y, S) for r in Y_HAT], rtol=1e-12)
    np.testing.assert_allclose(
        fairness.dp_violation_marginal(grid, S), [brute_dp_marginal(r, S) for r in Y_HAT], rtol=1e-12
    )


def test_fairness_metrics_of_one_model_are_scalars():
    y_hat = np.array(Y_HAT[0])
    for value in (
        fairness.misclassification_error(y_hat, Y),
        fairness.dp_violation(y_hat, S),
        fairness.eo_violation(y_hat, Y, S),
        fairness.dp_violation_marginal(y_hat, S),
    ):
        assert np.shape(value) == ()
    assert fairness.dp_violation_marginal(y_hat, np.array(S, dtype=float)) == pytest.approx(
        brute_dp_marginal(Y_HAT[0], S)
    )


def test_equalized_odds_uses_the_positive_condition():
    # every group has the same rate given y != 1; only the y == 1 rates differ (1 vs 0)
    y_hat, y, s = [1, 0, 0, 0], [1, 0, 1, 0], [0, 0, 1, 1]
    assert fairness.eo_violation(np.array(y_hat), y, s) == pytest.approx(brute_eo(y_hat, y, s)) == pytest.approx(1.0)


def test_a_single_model_with_one_group_has_no_gap():
    assert fairness.eo_violation(np.array([[1, 0]]), [1, 0], [0, 0]).tolist() == [0.0]


# ------------------------------------------------------------------------------------ kNN monitor


def unit(angle: float) -> list[float]:
    return [math.cos(angle), math.sin(angle)]


def test_knn_default_k_is_200():
    # 100 class-0 and 99 class-1 points on the query, 2 class-1 points at cos 0.99: the 201st
    # neighbour tips the vote to class 1 (99 e^10 + 2 e^9.9 > 100 e^10), the first 200 do not
    off = math.acos(0.99)
    bank = torch.tensor([unit(0.0)] * 199 + [unit(off)] * 2)
    labels = torch.tensor([0] * 100 + [1] * 101)
    query = torch.tensor([unit(0.0)])
    assert knn_accuracy(bank, labels, query, torch.tensor([0]), num_classes=2) == 1.0
    assert knn_accuracy(bank, labels, query, torch.tensor([1]), num_classes=2, k=201) == 1.0


def test_knn_accuracy_passes_its_temperature_on():
    # one class-0 point at cos 1, two class-1 points at cos 0.5: the nearest wins at temperature 0.1,
    # the majority at temperature 10 (e^0.1 < 2 e^0.05)
    bank = torch.tensor([unit(0.0), unit(math.pi / 3), unit(-math.pi / 3)])
    labels = torch.tensor([0, 1, 1])
    query = torch.tensor([unit(0.0)])
    assert knn_accuracy(bank, labels, query, torch.tensor([0]), num_classes=2, k=3) == 1.0
    assert knn_accuracy(bank, labels, query, torch.tensor([1]), num_classes=2, k=3, temperature=10.0) == 1.0


# ------------------------------------------------------------------------------------ linear probe


def probe_data(n=10, dim=3, classes=3):
    gen = torch.Generator().manual_seed(7)
    train_f, test_f = torch.randn(n, dim, generator=gen), torch.randn(6, dim, generator=gen)
    return train_f, torch.arange(n) % classes, test_f, torch.arange(6) % classes


def reference_probe(train_f, train_y, num_classes, epochs, batch_size, lr, seed, betas=(0.9, 0.999), eps=1e-8):
    """The probe's head from the same seeded draws, trained by Adam (Kingma & Ba 2015, Algorithm 1)
    written out in float64 with autograd gradients."""
    gen = torch.Generator().manual_seed(seed)
    bound = 1.0 / math.sqrt(train_f.shape[1])
    params = [
        ((torch.rand(num_classes, train_f.shape[1], generator=gen) * 2 - 1) * bound).double(),
        ((torch.rand(num_classes, generator=gen) * 2 - 1) * bound).double(),
    ]
    m, v = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    x, step = train_f.double(), 0
    for _ in range(epochs):
        for idx in torch.randperm(train_f.shape[0], generator=gen).split(batch_size):
            weight, bias = (p.clone().requires_grad_(True) for p in params)
            loss = torch.nn.functional.cross_entropy(x[idx] @ weight.T + bias, train_y[idx])
            grads = torch.autograd.grad(loss, [weight, bias])
            step += 1
            for i, g in enumerate(grads):
                m[i] = betas[0] * m[i] + (1 - betas[0]) * g
                v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
                m_hat, v_hat = m[i] / (1 - betas[0] ** step), v[i] / (1 - betas[1] ** step)
                params[i] = params[i] - lr * m_hat / (v_hat.sqrt() + eps)
    return params[0].float(), params[1].float()


class RecordingAdam(probe.Adam):
    """The probe's own optimiser, keeping a handle on the head it trains."""

    last = None

    def __init__(self, params, **kwargs):
        super().__init__(params, **kwargs)
        RecordingAdam.last = self


def test_linear_probe_trains_the_same_head_as_a_float64_adam(monkeypatch):
    monkeypatch.setattr(probe, "Adam", RecordingAdam)
    train_f, train_y, test_f, test_y = probe_data()
    result = probe.linear_probe(train_f, train_y, test_f, test_y, 3, epochs=2, batch_size=4, seed=5)
    weight, bias = RecordingAdam.last.params
    ref_weight, ref_bias = reference_probe(train_f, train_y, 3, epochs=2, batch_size=4, lr=3e-3, seed=5)
    torch.testing.assert_close(weight.detach(), ref_weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bias.detach(), ref_bias, rtol=1e-5, atol=1e-6)
    head_acc = float(((test_f @ weight.T + bias).argmax(1) == test_y).float().mean())
    assert result["final_acc"] == head_acc and len(result["curve"]) == 2
    assert result["max_acc"] == max(result["curve"])


def test_linear_probe_defaults_and_smallest_valid_settings():
    train_f, train_y, test_f, test_y = probe_data(n=4)
    assert len(probe.linear_probe(train_f, train_y, test_f, test_y, 3)["curve"]) == 200
    assert len(probe.linear_probe(train_f, train_y, test_f, test_y, 3, epochs=1, batch_size=1)["curve"]) == 1
    with pytest.raises(ValueError, match="probe needs"):  # its own check, not Adam's
        probe.linear_probe(train_f, train_y, test_f, test_y, 3, lr=0.0)
