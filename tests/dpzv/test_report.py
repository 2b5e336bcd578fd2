"""DPZV reports refuse degenerate runs: a chance-level or diverged side makes a claim "not tested",
the Figure 3 table prints the status instead of a number, and every eps carries its realised PLD."""

import json
import math

import pandas as pd

from fedrepro.report import dpzv as report


def summary_file(tmp_path, method, cells):
    """A job summary with one variant per (eps, accuracy, status) cell, two seeds each."""
    folder = tmp_path / "runs" / "digits" / method / "x" / "s0_1"
    folder.mkdir(parents=True)
    variants = {}
    for eps, acc, status in cells:
        clip = 10.0 if method == "dpzv" else math.nan
        privacy = {"eps_pld": 1.04 * eps if math.isfinite(eps) else math.inf, "sigma": 0.5}
        seed = {
            "best": {"test_acc": acc},
            "privacy": privacy,
            "status": status,
            "status_reason": "" if status == "ok" else f"{status} (made up)",
        }
        variants[f"eps{eps}"] = {
            "eps": "inf" if math.isinf(eps) else eps,
            "clip": clip,
            "seeds": {"0": seed, "1": seed},
        }
    path = folder / "summary.json"
    path.write_text(json.dumps({"variants": variants}, default=str))
    return str(path)


def test_claims_are_not_tested_when_a_side_is_at_chance(tmp_path):
    paths = [
        summary_file(tmp_path, "dpzv", [(1.0, 0.9, "ok"), (math.inf, 0.95, "ok")]),
        summary_file(tmp_path, "vafl", [(1.0, 0.1, "chance"), (math.inf, 0.97, "ok")]),
    ]
    best = report.load_best(paths)
    spec = {"clip": 10, "methods": ["dpzv", "vafl"], "figures": {"fig3": ["digits"]}}
    metrics = pd.DataFrame(columns=["dataset", "method", "eps", "clip", "test_loss"])
    memory = pd.DataFrame(columns=["dataset", "label", "ratio"])
    rows = {r["claim"]: r for r in report._claim_rows(best, metrics, memory, spec)}
    at_one = rows["digits, ε = 1 (PLD 1.04): DPZV above VAFL"]
    assert at_one["verdict"].startswith("not tested") and "VAFL" in at_one["verdict"]
    assert rows["digits, ε = ∞: DPZV above VAFL"]["verdict"] == "does not hold"
    assert rows["digits: DPZV accuracy falls as ε falls"]["verdict"] == "holds"
    leak = [r for c, r in rows.items() if "privacy guarantee" in c][0]
    assert leak["verdict"] == "does not hold" and "raw labels" in leak["evidence"]


def test_figure3_table_prints_status_not_number_and_pld_beside_eps(tmp_path):
    paths = [
        summary_file(tmp_path, "dpzv", [(1.0, 0.9, "ok")]),
        summary_file(tmp_path, "vafl", [(1.0, 0.1, "diverged")]),
    ]
    out = tmp_path / "out"

    class Job:
        spec = {
            "clip": 10,
            "methods": ["dpzv", "vafl"],
            "figures": {"fig3": ["digits"]},
            "delta": 1e-3,
            "scale": "quick",
            "decimals": 1,
        }
        input = {"summaries": paths}
        output = {"png": str(out / "fig3.png"), "md": str(out / "fig3.md")}

    report.table3(Job())
    text = (out / "fig3.md").read_text()
    assert "digits eps=1 (PLD 1.04)" in text
    assert "diverged (made up)" in text
    vafl_line = [line for line in text.splitlines() if line.startswith("| VAFL")][0]
    assert "10.0" not in vafl_line
    assert "server head" in text  # the label leak is stated in the caption


def test_falls_as_eps_falls_allows_seed_noise_but_not_a_trend():
    """Ascending eps. A rise towards small eps within the seeds' spread is noise; beyond it, or a
    smallest eps not below the largest, the claim fails."""
    assert report.falls_as_eps_falls([0.5, 0.89, 0.88, 0.95], [0.0, 0.01, 0.01, 0.01])
    assert report.falls_as_eps_falls([0.5, 0.92, 0.9, 0.95], [0.0, 0.02, 0.02, 0.01])  # 0.02 < hypot(.02, .02)
    assert not report.falls_as_eps_falls([0.5, 0.95, 0.9, 0.95], [0.0, 0.01, 0.01, 0.01])
    assert not report.falls_as_eps_falls([0.96, 0.9, 0.95], [0.05, 0.05, 0.05])  # ends above eps = inf


def test_falls_as_eps_falls_ignores_a_rise_between_two_chance_level_cells():
    accs, stds = [0.101, 0.099, 0.099, 0.139, 0.908], [0.001, 0.001, 0.001, 0.04, 0.03]
    assert not report.falls_as_eps_falls(accs, stds)  # 0.101 -> 0.099 is a "rise"
    assert report.falls_as_eps_falls(accs, stds, [True, True, True, False, False])
    assert not report.falls_as_eps_falls(accs, stds, [True, False, True, False, False])


def test_a_chance_run_at_the_smallest_eps_is_the_fall_not_a_degenerate_side(tmp_path):
    """eps = inf trained and eps = 0.1 at chance: accuracy fell (holds). A diverged smallest-eps run or an
    untrained eps = inf leaves the claim untested."""

    def falls_verdict(method, cells):
        best = report.load_best([summary_file(tmp_path / method / str(len(cells)) / cells[0][2], method, cells)])
        spec = {"clip": 10, "methods": [method], "figures": {"fig3": ["digits"]}}
        metrics = pd.DataFrame(columns=["dataset", "method", "eps", "clip", "test_loss"])
        memory = pd.DataFrame(columns=["dataset", "label", "ratio"])
        rows = {r["claim"]: r for r in report._claim_rows(best, metrics, memory, spec)}
        return [r["verdict"] for c, r in rows.items() if "falls" in c][0]

    assert falls_verdict("dpzv", [(0.1, 0.1, "chance"), (math.inf, 0.95, "ok")]) == "holds"
    assert falls_verdict("vafl", [(0.1, 0.1, "diverged"), (math.inf, 0.95, "ok")]).startswith("not tested")
    assert falls_verdict("zoo_vfl", [(0.1, 0.1, "chance"), (math.inf, 0.1, "chance")]).startswith("not tested")


def test_dpzv_is_compared_with_the_zeroth_order_methods_first():
    """Figure 2's caption: DPZV "surpasses all other ZO-based methods" and "outperforms first-order VFL
    methods"; the claims follow that order (traits of the method table), whatever order the config lists."""
    assert report.compared_with_dpzv(["vafl", "dpzv", "vfl_czofo", "zoo_vfl"]) == ["zoo_vfl", "vfl_czofo", "vafl"]
    assert report.compared_with_dpzv(["dpzv", "vafl"]) == ["vafl"]
