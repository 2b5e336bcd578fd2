"""The SteFFLe report names degenerate comparisons, flags unequal realised epsilon and bootstraps the headline."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from fedrepro.report import steffle as report

LAYOUT = {
    "fig1": {
        "dataset": "credit",
        "fairness": "dp",
        "num_silos": 3,
        "h": [0.0, 0.5, 0.75],
        "epsilons": [1],
        "methods": ["steffle", "tran2021", "ling2024"],
    }
}
LAMS = [0.0, 1.0, 2.0]


def _curve(method, h, errors, violations, realised=1.0, positive=0.3, seeds=6):
    rng = np.random.default_rng(hash((method, h)) % 2**32)
    rows = []
    for seed in range(seeds):
        for lam, e, v in zip(LAMS, errors, violations):
            rows.append(
                {
                    "dataset": "credit",
                    "fairness": "dp",
                    "method": method,
                    "setting": f"dp_N3_h{h}" if method != "tran2021" else "dp_central",
                    "num_silos": 3 if method != "tran2021" else 1,
                    "h": h if method != "tran2021" else 0.0,
                    "eps": "1",
                    "eps_value": 1.0,
                    "lam": lam,
                    "seed": seed,
                    "error": e + 0.002 * rng.standard_normal(),
                    "dp_violation": v + 0.002 * rng.standard_normal(),
                    "eo_violation": 0.0,
                    "positive_rate": positive,
                    "realised_eps": realised,
                }
            )
    return rows


def _points(seeds=6):
    err = [0.20, 0.25, 0.30]
    rows = _curve("tran2021", 0.0, err, [0.080, 0.081, 0.080], seeds=seeds)  # flat: degenerate everywhere
    for h in (0.0, 0.5, 0.75):
        rows += _curve("steffle", h, err, [0.10, 0.05, 0.02], seeds=seeds)
    rows += _curve("ling2024", 0.0, err, [0.15, 0.12, 0.10], seeds=seeds)  # usable, equal privacy
    rows += _curve("ling2024", 0.5, err, [0.15, 0.12, 0.10], realised=0.5, seeds=seeds)  # unequal privacy
    rows += _curve("ling2024", 0.75, err, [0.0, 0.0, 0.0], positive=0.0, seeds=seeds)  # constant predictor
    frame = pd.DataFrame(rows)
    frame.loc[frame["positive_rate"] == 0.0, "dp_violation"] = 0.0
    return frame


def _headline(points):
    values = report.headline_values(report.comparison_panels(points, LAYOUT))
    return values, report.headline_table(values, pd.DataFrame({"row": [], "mean": []}), resamples=200).set_index("row")


def test_degenerate_and_unequal_privacy_panels_are_named_and_left_out_of_the_headline():
    values, table = _headline(_points())
    status = {(r.h, r.baseline): r.status for r in values.itertuples()}
    assert all(status[(h, "tran2021")] == "collapsed" for h in (0.0, 0.5, 0.75))
    assert status[(0.0, "ling2024")] == status[(0.5, "ling2024")] == "ok"
    assert status[(0.75, "ling2024")] == "chance"
    ling = table.loc["DP violation reduction vs Ling et al. 2024 (%)"]
    assert ling["panels_used"] == 1 and ling["panels"] == 3
    assert "h=0.75" in ling["degenerate_panels"] and "constant predictor" in ling["degenerate_panels"]
    assert "h=0.5" in ling["unequal_eps_sent"] and "h=0.0" not in ling["unequal_eps_sent"]
    assert ling["bootstrap_95_low"] <= ling["ours_panel_mean"] <= ling["bootstrap_95_high"]
    assert (
        ling["bootstrap_95_high"] - ling["bootstrap_95_low"] > 0 and ling["interval"] == "joint bootstrap over 6 seeds"
    )
    reductions = {
        p["h"]: report.reduction(report._xy(p["curve"], "steffle"), report._xy(p["curve"], "ling2024"))
        for p in report.comparison_panels(_points(), LAYOUT)
    }
    assert ling["ours_panel_mean"] == pytest.approx(100 * reductions[0.0])  # the unequal h=0.5 panel is out
    assert ling["mean_incl_unequal_eps"] == pytest.approx(100 * np.mean([reductions[0.0], reductions[0.5]]))
    tran = table.loc["DP violation reduction vs Tran et al. 2021 (%)"]
    assert tran["status"].startswith("not tested") and np.isnan(tran["ours_panel_mean"])


def test_joint_bootstrap_is_as_wide_on_two_identical_panels_as_on_one():
    # Panels that share seeds must share the resample: averaging independent draws of two identical
    # panels would give an interval about sqrt(2) too narrow.
    values, _ = _headline(_points())
    one = values[(values["baseline"] == "ling2024") & (values["h"] == 0.0)]
    low1, high1 = report.joint_bootstrap(one, resamples=400)
    low2, high2 = report.joint_bootstrap(pd.concat([one, one]), resamples=400)
    assert high1 - low1 > 0
    assert (high2 - low2) == pytest.approx(high1 - low1)


def test_two_seeds_give_no_bootstrap_interval():
    _, table = _headline(_points(seeds=2))
    ling = table.loc["DP violation reduction vs Ling et al. 2024 (%)"]
    assert ling["interval"] == "too few seeds for an interval (2 seeds)"
    assert np.isnan(ling["bootstrap_95_low"]) and np.isfinite(ling["ours_panel_mean"])


def test_claim_one_is_a_paired_verdict_over_seeds_never_holds_on_one_seed():
    spec = {"figures": {}, "disabled_figures": []}
    for seeds, label in ((6, "holds"), (1, "inconclusive")):
        points = _points(seeds=seeds)
        panels = report.comparison_panels(points, LAYOUT)
        first = report.claims_table(points, panels, report.headline_values(panels), spec).iloc[0]
        assert first["verdict"].startswith(label), first["verdict (effect [95 % interval], wins/seeds)"]
        assert "1 usable" in first["evidence"] and "5 pair(s) left out" in first["evidence"]
    assert first["effect"] > 0 and first["seeds"] == 1


def test_claim_one_does_not_hold_when_steffle_is_worse_on_every_seed():
    points = _points()
    worse = (points["method"] == "steffle") & (points["h"] == 0.0)
    points.loc[worse, "dp_violation"] += 0.2  # SteFFLe's curve now above Ling's at every error level
    panels = report.comparison_panels(points, LAYOUT)
    first = report.claims_table(points, panels, report.headline_values(panels), {"figures": {}}).iloc[0]
    assert first["verdict"] == "does not hold" and first["ci_high"] < 0 and first["wins"] == 0


def test_realised_label_flags_unequal_privacy():
    assert report.realised_label(3, {"steffle": 3.05, "ling2024": 2.9}) == "eps=3 (realised: Ling 2.9, SteFFLe 3.05)"
    assert report.realised_label(3, {"steffle": 8.8, "ling2024": 2.9}).endswith("UNEQUAL")


def test_refcode_table_reports_realised_epsilon_and_constant_predictors(tmp_path):
    rows = []
    for lam, positive in ((0.0, 0.2), (2.0, 0.004)):  # 0.4 % positives: near-constant
        for seed in range(2):
            rows.append(
                {
                    "h": 0.0,
                    "eps": "1",
                    "lam": lam,
                    "seed": seed,
                    "fairness": "dp",
                    "error": 0.25,
                    "dp_violation": 0.1 if positive else 0.0,
                    "eo_violation": 0.0,
                    "positive_rate": positive,
                }
            )
    summary = tmp_path / "summary.json"
    summary.write_text(
        json.dumps(
            {
                "spec": {"h": 0.0, "train": {"compat_refcode": True}},
                "privacy": {
                    "per_eps": {
                        "1": {"eps": 1.0, "realised_epsilon": 2600.0, "realised_by_lambda": {"0.0": 0.0, "2.0": 2600.0}}
                    }
                },
            }
        )
    )
    table = report.refcode_table(pd.DataFrame(rows), [str(summary)]).set_index("lam")
    assert table.loc[0.0, "realised_epsilon_pld"] == 0.0 and table.loc[2.0, "realised_epsilon_pld"] == 2600.0
    assert table.loc[0.0, "status"] == "ok" and table.loc[2.0, "status"] == "chance"
    assert "predicted negative" in table.loc[2.0, "status_reason"]
    note = report._private_note({"train": {"compat_refcode": True}}, {"eps": 1.0, "realised_epsilon": 2600.0})
    assert note.startswith("NO") and "2.6e+03" in note


def test_refcode_table_non_private_cells_cost_nothing_at_lambda_zero_and_inf_otherwise(tmp_path):
    # eps = inf runs record no per-lambda epsilon; at lambda = 0 compat_refcode's sensitivities are 0
    rows = [
        {
            "h": 0.0,
            "eps": "inf",
            "lam": lam,
            "seed": seed,
            "fairness": "dp",
            "error": 0.2,
            "dp_violation": 0.1,
            "eo_violation": 0.0,
            "positive_rate": 0.3,
        }
        for lam in (0.0, 1.0)
        for seed in range(2)
    ]
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"spec": {"h": 0.0}, "privacy": {"per_eps": {"inf": {"eps": "inf"}}}}))
    table = report.refcode_table(pd.DataFrame(rows), [str(summary)]).set_index("lam")
    assert table.loc[0.0, "realised_epsilon_pld"] == 0.0
    assert table.loc[1.0, "realised_epsilon_pld"] == math.inf


def test_eta_w_table_shows_w_trajectory_beside_the_metrics():
    rows = []
    for setting, flips in (("dp_N3_h0", 0.0), ("dp_N3_h0_wpaper", 0.0), ("dp_N3_h0_fixed", 1.0)):
        for seed in range(2):
            rows.append(
                {
                    "dataset": "credit",
                    "method": "steffle",
                    "setting": setting,
                    "eps": "1",
                    "lam": 2.0,
                    "seed": seed,
                    "error": 0.2,
                    "dp_violation": 0.01,
                    "eo_violation": 0.0,
                    "w_norm": 0.5,
                    "w_flip_rate": flips,
                    "w_radius_share": 0.0,
                }
            )
    table = report.eta_w_table(pd.DataFrame(rows), {"eta_w": {"tuned": 1.0, "paper": 1e-5, "w_step_tuned": "capped"}})
    assert set(table["eta_w"]) == {"paper (1e-05, fixed step)", "tuned (1, capped step)"}
    assert {"w_norm", "w_flip_rate", "w_radius_share"} <= set(table.columns)
    assert (table["w_flip_rate"] == 0).all()


def test_refcode_cells_are_checked_against_the_authors_seed_range():
    ours = pd.DataFrame(
        {
            "h": [0.0, 0.0, 0.75],
            "eps_label": ["inf", "1", "inf"],
            "lam": [1.0, 1.0, 0.5],
            "error_mean": [0.202, 0.250, 0.180],
            "dp_violation_mean": [0.030, 0.010, 0.050],
        }
    )
    authors = pd.DataFrame(
        [
            {"h": 0, "eps": "inf", "lam": 1, "seed": s, "error": e, "dp_violation": v}
            for s, e, v in ((0, 0.198, 0.031), (1, 0.201, 0.034), (2, 0.199, 0.032))
        ]
        + [
            {"h": 0.0, "eps": "1", "lam": 1.0, "seed": s, "error": e, "dp_violation": v}
            for s, e, v in ((0, 0.240, 0.005), (1, 0.260, 0.020), (2, 0.270, 0.008))
        ]
    )  # no authors' cell at h = 0.75: not counted
    table = report.beside_authors(ours, authors, "dp").set_index(["h", "eps_label", "lam"])
    inf, one = table.loc[(0.0, "inf", 1.0)], table.loc[(0.0, "1", 1.0)]
    assert not inf["error_within_authors"] and not inf["dp_violation_within_authors"]  # above / below
    assert one["error_within_authors"] and one["dp_violation_within_authors"]
    assert inf["authors_error_mean"] == pytest.approx(0.1993333, abs=1e-6) and inf["authors_error_count"] == 3
    assert table.loc[(0.75, "inf", 0.5), "error_within_authors"] is None
    assert report.within_counts(table, "dp") == "error: 1 of 2 cells, DP: 1 of 2 cells"
