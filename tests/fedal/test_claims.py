"""FedAL's claims: paired verdicts with the paper's smallest gap and one test example's resolution,
one row per distinct comparison in the claims table, outcomes in the tables' captions."""

from __future__ import annotations

import csv
import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fedrepro.experiments import fedal as plan
from fedrepro.plan import load_config
from fedrepro.report import fedal_claims
from fedrepro.report.fedal import with_setting

ROOT = Path(__file__).resolve().parents[2]
SETTING = "digits_het-a1-c4-p200-i30"
N_TEST = 450


def _frame(accs: dict[str, list[float]], panels=(SETTING,)) -> pd.DataFrame:
    rows = [
        {"dataset": "digits", "method": m, "setting": s, "seed": i, "acc": a, "status": "ok", "n_test": N_TEST}
        for s in panels
        for m, values in accs.items()
        for i, a in enumerate(values)
    ]
    frame = with_setting(pd.DataFrame(rows))
    frame["panel"] = [f"alpha={a:g}" for a in frame["alpha"]]
    return frame


def _published_gaps(ours: str, other: str) -> list[float]:
    """Every FedAL-minus-baseline gap of the paper's Tables IV-IX, read from the CSVs directly."""
    gaps = []
    for name in ("table4", "table5", "table6", "table7", "table8", "table9"):
        path = resources.files("fedrepro.report") / "published" / f"fedal_{name}.csv"
        rows = list(csv.DictReader(path.open()))
        if name == "table8":
            rows = [{"row": r["column"], "column": "alpha=2", "mean": r["mean"]} for r in rows]
        cell = {(r["row"], r["column"]): float(r["mean"]) for r in rows}
        gaps += [m - cell[(other, c)] for (row, c), m in cell.items() if row == ours and (other, c) in cell]
    return gaps


@pytest.mark.parametrize(
    "ours, other, label_ours, label_other",
    [
        ("fedal", "fedmd", "FedAL", "FedMD"),
        ("fedal", "fedmd_lf", "FedAL", "FedMD-LF"),
        ("fedal", "fccl", "FedAL", "FCCL"),
    ],
)
def test_smallest_effect_is_the_smallest_gap_the_paper_reports(ours, other, label_ours, label_other):
    gap, where = fedal_claims.paper_gap(ours, other)
    assert gap == pytest.approx(min(g for g in _published_gaps(label_ours, label_other) if g > 0))
    assert where.startswith("Table ")
    assert fedal_claims.paper_gap("fedal", "fedmd") == (0.02, "Table V, alpha=5")
    assert fedal_claims.paper_gap("fedal", "fedmd_lf")[0] == 0.012  # Table VIII: 0.744 - 0.732
    assert math.isnan(fedal_claims.paper_gap("feddf_al", "feddf")[0])  # only Fig. 10's curves


def _claim(rows: list[dict], claim: str, panel: str) -> dict:
    return next(r for r in rows if r["claim"] == claim and r["panel"] == panel)


def test_comparisons_are_paired_verdicts_at_the_papers_smallest_gap_and_one_test_example():
    frame = _frame({"fedal": [0.70, 0.72, 0.75], "fedmd": [0.60, 0.63, 0.64], "fedmd_lf": [0.1, 0.1, 0.1]})
    frame.loc[frame["method"] == "fedmd_lf", "status"] = "chance"
    rows = fedal_claims.comparisons(frame, "Table V")
    verdict = _claim(rows, "FedAL > FedMD", "alpha=1")["verdict"]
    half = stats.t.ppf(0.975, 2) * 0.01 / math.sqrt(3)  # differences 0.10, 0.09, 0.11: mean 0.1, sd 0.01
    assert verdict.label == "holds" and (verdict.low, verdict.high) == pytest.approx((0.1 - half, 0.1 + half))
    assert verdict.smallest_effect == 0.02
    assert _claim(rows, "FedAL > FedMD-LF", "alpha=1")["verdict"].label.startswith("not tested")
    assert _claim(rows, "FedAL > FedMD", "alpha=1")["where"] == "Table V (alpha=1)"


def test_three_seeds_one_test_image_apart_read_inconclusive_not_a_zero_width_holds():
    """Mean client accuracies of 4 clients on 450 test images move in steps of 1/1800: FedAL one such
    step above FedMD on every seed (float32 values) is three identical differences, which the t
    interval would call a zero-width 'holds'; the sign test needs 6 seeds."""
    quantum = 1 / (4 * N_TEST)
    fedmd = [float(np.float32(k * quantum)) for k in (1100, 1130, 1170)]
    fedal = [float(np.float32((k + 1) * quantum)) for k in (1100, 1130, 1170)]
    rows = fedal_claims.comparisons(_frame({"fedal": fedal, "fedmd": fedmd}), "Table V")
    verdict = _claim(rows, "FedAL > FedMD", "alpha=1")["verdict"]
    assert verdict.label == "inconclusive (3 seeds, identical differences)" and verdict.needed == 6
    assert fedal_claims.resolution(_frame({"fedal": fedal})) == quantum  # one test image of one client


def test_pooled_rows_and_a_claim_the_seeds_cannot_tell_apart():
    two = _frame({"fedal": [0.70, 0.60], "fedmd_lf": [0.68, 0.61]}, panels=(SETTING, "digits_het-a5-c4-p200-i30"))
    rows = fedal_claims.comparisons(two, "Table V")
    pooled = _claim(rows, "FedAL > FedMD-LF", "pooled over alpha=1, alpha=5")
    assert pooled["diffs"] == pytest.approx([0.02, -0.01, 0.02, -0.01])
    assert pooled["comparison"][1] == (SETTING, "digits_het-a5-c4-p200-i30")
    same = _frame({"fedal": [0.70, 0.60], "fedmd_lf": [0.70, 0.60]})
    assert "give the same accuracy on every seed" in fedal_claims.caption_claims(same, "Table VIII")[0]
    assert "same accuracy" not in fedal_claims.caption_claims(two, "Table VIII")[0]


def _write_summaries(root: Path, config: dict) -> list[str]:
    """One summary per planned claims run and seed tag, with accuracies FedAL > FedMD by a seed-varying margin."""
    tags = plan.seed_tags_by_run(config)
    rng = np.random.default_rng(0)
    paths = []
    for run in plan.claims_runs(config):
        for tag in tags[run.key]:
            folder = Path(run.folder(str(root), "fedal", tag))
            folder.mkdir(parents=True)
            seeds = {
                str(s): {"final": {"acc": 0.6 + 0.05 * (run.method == "fedal") + rng.normal(0, 0.02)}, "n_test": N_TEST}
                for s in map(int, tag[1:].split("_"))
            }
            (folder / "summary.json").write_text(json.dumps({"seeds": seeds}))
            paths.append(str(folder / "summary.json"))
    return paths


def _expected_keys(spec: dict) -> dict[tuple, list[str]]:
    """Distinct (claim, settings) of the claims spec, each with every table panel that prints it."""
    keys: dict[tuple, list[str]] = {}
    for name, output in spec["outputs"].items():
        panels: dict[tuple, set] = {}
        for method, setting in output["runs"]:
            steps = plan.parse_setting(setting)["local_steps"]
            panels.setdefault((method, steps), set()).add(plan.panel_setting(setting))
        for ours, other in fedal_claims.CLAIMS:
            for (method, steps), settings in panels.items():
                both = sorted(settings & panels.get((ours, None), set())) if method == other else []
                for group in [[s] for s in both] + ([both] if len(both) > 1 else []):
                    keys.setdefault((ours, other, steps, tuple(group)), []).append(name)
    return keys


def test_the_claims_table_prints_each_distinct_comparison_once_with_its_counts(tmp_path):
    from fedrepro.pipeline import make_job

    config = load_config([str(ROOT / "config.yaml")])
    spec = plan.claims_spec(config)
    out = tmp_path / "tables/claims.md"
    fedal_claims.table(make_job(spec, {"md": str(out)}, {"summaries": _write_summaries(tmp_path, config)}))
    frame = pd.read_csv(out.with_suffix(".csv"))
    expected = _expected_keys(spec)
    assert len(frame) == len(expected)
    alpha1 = frame[(frame["claim"] == "FedAL > FedMD") & frame["runs"].str.startswith("N=4")]
    assert len(alpha1) == 1  # Table IV's N = 4 panel is the alpha = 1 runs of Tables V-VII and IX
    printed = alpha1["printed in"].iloc[0]
    assert all(t in printed for t in ("Table IV", "Table V ", "Table VI ", "Table VII ", "Table IX"))
    assert alpha1["seeds"].iloc[0] == 6  # more_seeds: FedAL and FedMD run seeds 0-5 at every alpha
    inconclusive = frame[frame["verdict"].str.startswith("inconclusive")]
    assert inconclusive["verdict (effect [95 % interval], wins/seeds)"].str.contains("needs about|no seed count").all()
    assert (frame.loc[frame["claim"] == "FedAL > FedMD", "smallest effect (paper)"] == "0.02: Table V, alpha=5").all()
    caption = out.read_text().split("\n\n")[0]
    assert f"{len(expected)} distinct comparisons: " in caption
    counts = frame["verdict"].str.extract(r"^(holds|does not hold|no effect|inconclusive|not tested)")[0].value_counts()
    assert f"{counts.get('holds', 0)} holds, {counts.get('does not hold', 0)} does not hold" in caption
