"""SteFFLe's headline and claims compare like with like: equal epsilon for what the code sends (the paper's
accounting beside it), the privacy units named, the private lambda in claim 5, one row per distinct
comparison; the figure titles say which eta_W ran."""

import zlib

import numpy as np
import pandas as pd
import pytest

from fedrepro.experiments import steffle as plan
from fedrepro.report import claims
from fedrepro.report import steffle as report

from .helpers import pipeline_config

LAMS = [0.0, 1.0, 2.0]
LAYOUT = {
    "fig1": {
        "dataset": "credit",
        "fairness": "dp",
        "num_silos": 3,
        "h": [0.0, 0.75],
        "epsilons": [1],
        "methods": ["steffle", "steffle_sound", "ling2024", "erm"],
    }
}


def _curve(method, h, errors, violations, paper=1.0, sent=None, seeds=6):
    """One method's points in one panel: error and violation per lambda, with seed noise, and the method's
    epsilon under the paper's accounting and for what the code sends (default: the same)."""
    rng = np.random.default_rng(zlib.crc32(f"{method} {h}".encode()))
    central = method == "erm"
    return [
        {
            "dataset": "credit",
            "fairness": "dp",
            "method": method,
            "setting": "central" if central else f"dp_N3_h{h}",
            "num_silos": 1 if central else 3,
            "h": 0.0 if central else h,
            "eps": "inf" if central else "1",
            "eps_value": np.inf if central else 1.0,
            "lam": lam,
            "seed": seed,
            "error": e + 0.002 * rng.standard_normal(),
            "dp_violation": v + 0.002 * rng.standard_normal(),
            "eo_violation": 0.0,
            "positive_rate": 0.3,
            "realised_eps": np.inf if central else paper,
            "sound_eps": np.inf if central else (paper if sent is None else sent),
        }
        for seed in range(seeds)
        for lam, e, v in zip(LAMS if not central else [0.0], errors, violations)
    ]


def _points():
    err = [0.20, 0.25, 0.30]
    rows = _curve("erm", 0.0, [0.18], [0.12])
    for h, gap in ((0.0, 0.01), (0.75, 0.03)):
        # Algorithm 1 sends g in clear on the sensitive batch: 7.5 for what is sent; the sound variant 1.0
        at_lambda = [0.18, 0.18 + gap, 0.30]  # at lambda = 0 (no noise) as ERM; the gap opens at lambda = 1
        alg1 = _curve("steffle", h, at_lambda, [0.10, 0.05, 0.02], sent=7.5)
        rows += alg1 + [{**r, "method": "steffle_sound", "sound_eps": r["realised_eps"]} for r in alg1]
        rows += _curve("ling2024", h, err, [0.15, 0.12, 0.10], paper=0.95)
    return pd.DataFrame(rows)


def _tables(points):
    panels = report.comparison_panels(points, LAYOUT)
    values = report.headline_values(panels)
    headline = report.headline_table(values, pd.DataFrame({"row": [], "mean": []}), resamples=100)
    return panels, values, headline


def test_the_headline_counts_only_panels_at_equal_epsilon_for_what_is_sent():
    _, _, headline = _tables(_points())
    rows = headline.set_index("ours")
    alg1, sound = rows.loc[report.METHODS["steffle"].label], rows.loc[report.METHODS["steffle_sound"].label]
    assert alg1["panels_used"] == 0 and alg1["status"].startswith("not tested")
    assert alg1["panels_used_paper_accounting"] == 2 and np.isfinite(alg1["ours_panel_mean_paper_accounting"])
    assert "(7.5 vs 0.95)" in alg1["unequal_eps_sent"] and alg1["unequal_eps_paper_accounting"] == "none"
    reductions = [
        report.reduction(report._xy(p["curve"], "steffle_sound"), report._xy(p["curve"], "ling2024"))
        for p in report.comparison_panels(_points(), LAYOUT)
    ]
    assert sound["panels_used"] == 2 and sound["ours_panel_mean"] == pytest.approx(100 * np.mean(reductions))
    assert sound["privacy_units"] == "SteFFLe-sound: attribute, ISRL-DP vs server; Ling: record, per client vs server"


def test_claim_one_filters_on_what_is_sent_names_the_units_and_prints_both_filters_where_they_differ():
    points = _points()
    panels, values, _ = _tables(points)
    table = report.claims_table(points, panels, values, {"figures": {}})
    first = table[table["claim"].str.startswith("1.")].set_index("claim")
    alg1 = first.loc["1. SteFFLe's curve beats Tran et al. and Ling et al. in every usable panel"]
    assert alg1["verdict"] == "not tested (no usable pair for what the code sends)"
    paper = [c for c in first.index if c.startswith("1. SteFFLe's") and "paper's accounting" in c]
    assert len(paper) == 1 and first.loc[paper[0], "verdict"] == "holds"  # the filters differ: both printed
    sound = [c for c in first.index if c.startswith("1. SteFFLe-sound's")]
    assert len(sound) == 1  # its two filters select the same pairs: one distinct comparison
    assert "paper's accounting" in first.loc[sound[0], "also"]
    text = first.loc[sound[0], "verdict (effect [95 % interval], wins/seeds)"]
    assert text.startswith("holds") and "privacy units differ: SteFFLe-sound: attribute, ISRL-DP" in text
    assert first.loc[sound[0], "smallest_effect"] == report.SMALLEST_REDUCTION
    assert claims.counts(table["verdict"])["holds"] >= 2


def test_claim_five_compares_the_private_method_with_erm_at_a_lambda_above_zero():
    points = _points()
    panels, values, _ = _tables(points)
    table = report.claims_table(points, panels, values, {"figures": {}}).set_index("claim")
    gap = table.loc["5a. an error gap to non-private non-fair ERM remains (most heterogeneous h)"]
    growth = table.loc["5b. the error gap to ERM is largest when heterogeneous"]
    assert "SteFFLe(lambda=1, private)" in gap["evidence"]
    assert gap["verdict"] == "holds" and gap["effect"] == pytest.approx(0.03, abs=0.003)  # at lambda 0 it is 0
    assert growth["verdict"] == "holds" and growth["effect"] == pytest.approx(0.02, abs=0.003)
    assert report.private_lambda(points) == 1.0


def test_figure_titles_name_the_eta_w_that_ran_on_the_merged_paper_config(monkeypatch):
    config = pipeline_config("paper")
    assert config["steffle"]["train"]["eta_w"] != config["steffle"]["eta_w_paper"]  # paper scale runs eta_W = 1
    spec = plan.figure_spec(config, "fig1")
    note = report.eta_w_note(spec["eta_w"])
    assert note == "eta_W = 1 capped at eta_W lambda <= 1/2; the paper's 1e-05"
    titles = []
    monkeypatch.setattr(report.figures, "save_figure", lambda fig, *a: titles.append(fig._suptitle.get_text()))
    job = type("Job", (), {"spec": {**spec, "layout": {**LAYOUT["fig1"], "h": [0.0]}}, "output": {"png": "x.png"}})
    report.comparison_figure(job, _points())
    assert len(titles) == 1 and note in titles[0] and "paper scale" in titles[0]


def test_soundness_cost_pairs_the_sound_variant_with_algorithm_one_and_names_both_bounds():
    points = _points()
    points.loc[points["method"] == "steffle_sound", "error"] += 0.004
    panels, _, _ = _tables(points)
    sentence = report.soundness_cost(panels)
    assert "per seed over 2 panels" in sentence and "error holds: +0.0040, 6/6 seeds" in sentence
    assert "credit DP at label 1: 1 against 7.5" in sentence
    assert report.soundness_cost([p for p in panels if False]) == ""
