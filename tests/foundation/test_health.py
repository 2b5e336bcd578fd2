"""Degenerate runs are named: NaN/inf, chance level and collapsed embeddings (fedrepro.eval.health)."""

import numpy as np
import pandas as pd
import pytest

from fedrepro.eval.health import (
    OK,
    Health,
    cell_status,
    check_chance,
    check_collapse,
    check_finite,
    effective_rank,
    embedding_collapse,
    relative_spread,
    worst,
)
from fedrepro.report.tables import compare, wide


def test_nan_loss_is_diverged_at_its_first_round():
    loss = [2.3, 2.0, np.nan, np.nan]
    health = check_finite(pd.DataFrame({"round": [0, 1, 2, 3], "train_loss": loss}))
    assert health.status == "diverged" and "round 2" in health.reason


def test_inf_anywhere_is_diverged():
    frame = pd.DataFrame({"round": [0, 1, 2], "train_loss": [1.0, np.inf, 1.0]})
    assert check_finite(frame).reason.startswith("diverged at round 1")


def test_metric_logged_every_k_rounds_is_not_diverged():
    acc = [np.nan, np.nan, 0.5, np.nan, np.nan, 0.6, np.nan, np.nan, 0.7]
    frame = pd.DataFrame({"round": range(9), "train_loss": np.linspace(2, 1, 9), "test_acc": acc})
    assert check_finite(frame).ok
    acc[-1] = np.nan  # the evaluation at round 8 produced NaN
    assert check_finite(frame.assign(test_acc=acc)).reason.startswith("diverged at round 8")


def test_column_nan_throughout_is_diverged():
    frame = pd.DataFrame({"round": [0, 1], "train_loss": [np.nan, np.nan]})
    assert check_finite(frame).status == "diverged"


def test_chance_uses_binomial_margin():
    assert check_chance(0.11, chance=0.1, n_test=1000).status == "chance"
    assert check_chance(0.20, chance=0.1, n_test=1000).ok
    assert check_chance(0.13, chance=0.1, n_test=100).status == "chance"  # 3 SE of 100 samples = 0.09


def test_effective_rank_closed_forms():
    rng = np.random.default_rng(0)
    assert effective_rank(rng.standard_normal((20000, 8))) == pytest.approx(8, rel=0.01)
    line = rng.standard_normal((500, 1)) * np.ones((1, 8))
    assert effective_rank(line) == pytest.approx(1.0, abs=1e-6)
    two = np.concatenate([rng.standard_normal((4000, 2)), np.zeros((4000, 6))], axis=1)
    assert effective_rank(two) == pytest.approx(2.0, rel=0.02)
    assert check_collapse(effective_rank(line), threshold=2).status == "collapsed"


def _collapse_status(z, untrained) -> Health:
    return embedding_collapse(z, untrained, min_spread=1e-3, min_rank=2.0)[0]


def _cone(rng, offset, scale, rank=32, dim=32, n=2000):
    """Embeddings c + a spread over `rank` random directions: a large common offset, as ReLU features give."""
    c = np.zeros(dim)
    c[0] = offset
    basis = np.linalg.qr(rng.standard_normal((dim, dim)))[0][:, :rank]
    return c + scale * rng.standard_normal((n, rank)) @ basis.T


def test_relative_spread_closed_forms():
    rng = np.random.default_rng(0)
    assert relative_spread(rng.standard_normal((20000, 8))) == pytest.approx(1.0, abs=0.01)
    z = np.full((100, 4), 3.0) + np.array([1.0, 0, 0, 0]) * np.where(np.arange(100) % 2, 1, -1)[:, None]
    assert relative_spread(z) == pytest.approx(1 / (9 * 4 + 1))  # E||z - c||^2 = 1, E||z||^2 = 37
    assert relative_spread(np.ones((10, 3))) == 0.0


def test_a_healthy_low_rank_run_on_a_cone_is_not_collapsed():
    """FedCA at quick scale: every embedding near one large vector (uncentered rank below the old threshold
    1.05), with a 3-dimensional spread a sizeable fraction of the untrained encoder's (also on a cone)."""
    rng = np.random.default_rng(1)
    untrained, run = _cone(rng, offset=12.0, scale=0.3), _cone(rng, rank=3, offset=10.0, scale=0.3)
    assert effective_rank(run, center=False) < 1.05 and 2.5 < effective_rank(run) < 3.1
    assert _collapse_status(run, untrained) == OK


def test_one_vector_plus_noise_is_collapsed_whatever_its_centered_rank():
    """The SC loss's rank-1 point: z = c + float noise; the centered covariance is the noise's (full rank)."""
    rng = np.random.default_rng(2)
    untrained, run = _cone(rng, offset=12.0, scale=0.3), _cone(rng, offset=8.0, scale=1e-5)
    assert effective_rank(run) > 25
    health = _collapse_status(run, untrained)
    assert health.status == "collapsed" and "spread" in health.reason


def test_embeddings_varying_along_one_direction_are_collapsed():
    rng = np.random.default_rng(3)
    untrained, run = _cone(rng, offset=12.0, scale=0.3), _cone(rng, rank=1, offset=8.0, scale=2.0)
    assert relative_spread(run) / relative_spread(untrained) > 1  # the spread itself is large
    health = _collapse_status(run, untrained)
    assert health.status == "collapsed" and "rank" in health.reason


def test_status_severity_is_diverged_then_collapsed_then_chance_then_ok():
    """A cell shows its worst seed's status: a NaN run outranks a collapsed one, which outranks chance."""
    order = ["diverged", "collapsed", "chance", "ok"]
    for i, high in enumerate(order):
        for low in order[i + 1 :]:
            assert worst(Health(low), Health(high)).status == high
            assert worst(Health(high), Health(low)).status == high
    assert cell_status([Health("chance", "c"), OK, Health("collapsed", "k")]).status == "collapsed"
    assert cell_status([Health("collapsed", "k"), Health("diverged", "d")]).status == "diverged"


def test_worst_and_cell_status():
    diverged, chance = Health("diverged", "diverged at round 3"), Health("chance", "at chance")
    assert worst(Health(), chance, diverged) == diverged
    assert cell_status([Health(), diverged]).reason.endswith("(1/2 seeds diverged)")


def test_table_prints_status_not_number_for_degenerate_cells():
    ours = pd.DataFrame(
        {
            "row": ["A", "A", "B", "B"],
            "column": ["x"] * 4,
            "seed": [0, 1, 0, 1],
            "value": [0.10, 0.10, 0.90, 0.92],
            "status": ["diverged", "ok", "ok", "ok"],
            "status_reason": ["diverged at round 177 (train_loss = nan)", "", "", ""],
        }
    )
    table = compare(ours)
    a = table.set_index("row").loc["A"]
    assert np.isnan(a["ours_mean"]) and "round 177" in a["status"]
    cells = wide(table).set_index("row")["x (ours)"]
    assert cells["A"].startswith("diverged at round 177") and cells["B"] == "0.91 ± 0.01"
