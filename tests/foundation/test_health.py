"""Degenerate runs are named: NaN/inf, chance level and collapsed embeddings (fedrepro.eval.health)."""

import numpy as np
import pandas as pd
import pytest

from fedrepro.eval.health import (
    Health,
    cell_status,
    check_chance,
    check_collapse,
    check_finite,
    effective_rank,
    verdict,
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


def test_worst_and_verdict():
    diverged, chance = Health("diverged", "diverged at round 3"), Health("chance", "at chance")
    assert worst(Health(), chance, diverged) == diverged
    assert verdict(True, {"DPZV": Health(), "VAFL": diverged}).startswith("not tested (VAFL: diverged")
    assert verdict(False, {"a": Health(), "b": Health()}) == "does not hold"
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
