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


def _points():
    err = [0.20, 0.25, 0.30]
    rows = _curve("tran2021", 0.0, err, [0.080, 0.081, 0.080])  # flat: degenerate everywhere
    for h in (0.0, 0.5, 0.75):
        rows += _curve("steffle", h, err, [0.10, 0.05, 0.02])
    rows += _curve("ling2024", 0.0, err, [0.15, 0.12, 0.10])  # usable, equal privacy
    rows += _curve("ling2024", 0.5, err, [0.15, 0.12, 0.10], realised=0.5)  # usable, unequal privacy
    rows += _curve("ling2024", 0.75, err, [0.0, 0.0, 0.0], positive=0.0)  # constant predictor
    frame = pd.DataFrame(rows)
    frame.loc[frame["positive_rate"] == 0.0, "dp_violation"] = 0.0
    return frame


def test_degenerate_panels_are_named_and_left_out_of_the_headline():
    panels = report.comparison_panels(_points(), LAYOUT)
    values = report.headline_values(panels, bootstrap=200)
    status = {(r.h, r.baseline): r.status for r in values.itertuples()}
    assert all(status[(h, "tran2021")] == "collapsed" for h in (0.0, 0.5, 0.75))
    assert status[(0.0, "ling2024")] == status[(0.5, "ling2024")] == "ok"
    assert status[(0.75, "ling2024")] == "chance"
    table = report.headline_table(values, pd.DataFrame({"row": [], "mean": []})).set_index("row")
    ling = table.loc["DP violation reduction vs Ling et al. 2024 (%)"]
    assert ling["panels_used"] == 2 and ling["panels"] == 3
    assert "h=0.75" in ling["degenerate_panels"] and "constant predictor" in ling["degenerate_panels"]
    assert "h=0.5" in ling["unequal_realised_eps"] and "h=0.0" not in ling["unequal_realised_eps"]
    assert ling["bootstrap_95_low"] <= ling["ours_panel_mean"] <= ling["bootstrap_95_high"]
    assert ling["bootstrap_95_high"] - ling["bootstrap_95_low"] > 0
    expected = 100 * np.mean(
        [
            report.reduction(report._xy(p["curve"], "steffle"), report._xy(p["curve"], "ling2024"))
            for p in panels
            if p["h"] in (0.0, 0.5)
        ]
    )
    assert ling["ours_panel_mean"] == pytest.approx(expected)
    tran = table.loc["DP violation reduction vs Tran et al. 2021 (%)"]
    assert tran["status"].startswith("not tested") and np.isnan(tran["ours_panel_mean"])
    claims = report.claims_table(_points(), panels, values, {"figures": {}, "disabled_figures": []})
    first = claims.iloc[0]["holds"]
    assert first.startswith("not tested") and "1 usable" in claims.iloc[0]["evidence"]


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
