"""DPZV reports refuse degenerate runs: a chance-level or diverged side makes a claim "not tested",
the Figure 3 table prints the status instead of a number, and every eps carries its realised PLD."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from fedrepro.report import dpzv as report


def summary_file(tmp_path, method, cells):
    """A job summary with one variant per (eps, accuracy, status) cell, two seeds each."""
    folder = tmp_path / "runs" / "digits" / method / "x" / "s0_1"
    folder.mkdir(parents=True)
    variants = {}
    for index, (eps, acc, status) in enumerate(cells):
        clip = 10.0 if method == "dpzv" else math.nan
        privacy = {"eps_pld": 1.04 * eps if math.isfinite(eps) else math.inf, "sigma": 0.5}

        # a small seed effect that differs by cell and method: paired differences are never identical
        step = 0.001 * (1 + index) * (2 if method == "dpzv" else 1)
        reason = "" if status == "ok" else f"{status} (made up)"
        seeds = {
            str(s): {
                "best": {"test_acc": acc + step * s},
                "privacy": privacy,
                "status": status,
                "status_reason": reason,
            }
            for s in (0, 1)
        }
        variants[f"eps{eps}"] = {
            "eps": "inf" if math.isinf(eps) else eps,
            "clip": clip,
            "seeds": seeds,
        }
    path = folder / "summary.json"
    path.write_text(json.dumps({"variants": variants}, default=str))
    return str(path)


def _rows(tmp_path, cells_by_method):
    paths = [summary_file(tmp_path / m, m, cells) for m, cells in cells_by_method.items()]
    best = report.load_best(paths)
    spec = {"clip": 10, "methods": list(cells_by_method), "figures": {"fig3": ["digits"]}}
    metrics = pd.DataFrame(columns=["dataset", "method", "eps", "clip", "seed", "test_loss"])
    memory = pd.DataFrame(columns=["dataset", "label", "ratio"])
    return {r["claim"]: r for r in report._claim_rows(best, metrics, memory, spec)}


def test_chance_under_its_own_dp_noise_is_a_result(tmp_path):
    """VAFL trains at eps = inf and sits at chance at eps = 1: the comparison is tested (issue 29), with the
    paired verdict and a note; at chance without noise too, it is not tested."""
    rows = _rows(
        tmp_path,
        {"dpzv": [(1.0, 0.9, "ok"), (math.inf, 0.95, "ok")], "vafl": [(1.0, 0.1, "chance"), (math.inf, 0.97, "ok")]},
    )
    at_one = rows["digits, ε = 1 (PLD 1.04): DPZV above VAFL"]
    assert at_one["verdict"] == "holds" and "at chance under its DP noise" in at_one["note"]
    assert at_one["effect"] == pytest.approx(0.8005) and at_one["seeds"] == 2 and at_one["wins"] == 2
    assert rows["digits, ε = ∞: DPZV above VAFL"]["verdict"] == "does not hold"
    assert rows["digits: DPZV accuracy falls as ε falls (ε = ∞ above ε = 1)"]["verdict"] == "holds"
    leak = [r for c, r in rows.items() if "privacy guarantee" in c][0]
    assert leak["verdict"] == "does not hold" and "raw labels" in leak["evidence"]
    untrained = _rows(
        tmp_path / "b",
        {"dpzv": [(1.0, 0.9, "ok"), (math.inf, 0.95, "ok")], "vafl": [(1.0, 0.1, "chance"), (math.inf, 0.1, "chance")]},
    )
    assert untrained["digits, ε = 1 (PLD 1.04): DPZV above VAFL"]["verdict"].startswith("not tested")


def test_verdicts_are_paired_over_seeds(tmp_path):
    """Seed 0: DPZV 0.90 vs VAFL 0.80; seed 1: 0.70 vs 0.75. The means favour DPZV but the paired t
    interval spans 0: inconclusive, one win of two."""
    paths = []
    for method, accs in (("dpzv", (0.9, 0.7)), ("vafl", (0.8, 0.75))):
        path = summary_file(tmp_path / method, method, [(1.0, 0.0, "ok")])
        data = json.loads(open(path).read())
        for seed, acc in zip(("0", "1"), accs):
            data["variants"]["eps1.0"]["seeds"][seed] = {"best": {"test_acc": acc}, "privacy": {}, "status": "ok"}
        open(path, "w").write(json.dumps(data))
        paths.append(path)
    best = report.load_best(paths)
    spec = {"clip": 10, "methods": ["dpzv", "vafl"], "figures": {"fig3": ["digits"]}}
    metrics = pd.DataFrame(columns=["dataset", "method", "eps", "clip", "seed", "test_loss"])
    rows = report._claim_rows(best, metrics, pd.DataFrame(columns=["dataset", "label", "ratio"]), spec)
    row = [r for r in rows if r["claim"].endswith("DPZV above VAFL")][0]
    assert row["verdict"] == "inconclusive (2 seeds); needs about 72 seeds" and row["wins"] == 1
    assert row["seeds_needed"] == 72
    assert row["effect"] == pytest.approx(0.025) and row["ci_low"] < 0 < row["ci_high"]


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


def test_a_chance_run_at_the_smallest_eps_is_the_fall_not_a_degenerate_side(tmp_path):
    """eps = inf trained and eps = 0.1 at chance: accuracy fell (holds). A diverged smallest-eps run or an
    untrained eps = inf leaves the claim untested."""

    def falls_verdict(method, cells):
        best = report.load_best([summary_file(tmp_path / method / str(len(cells)) / cells[0][2], method, cells)])
        spec = {"clip": 10, "methods": [method], "figures": {"fig3": ["digits"]}}
        metrics = pd.DataFrame(columns=["dataset", "method", "eps", "clip", "seed", "test_loss"])
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


def test_figure5_large_c_at_chance_under_its_noise_is_tested(tmp_path):
    """Figure 5's C sweep has no eps = inf run at C = 500; DPZV's eps = inf run at the default C is the
    noiseless reference, so C = 500 at chance under its (50x) noise is a result, not 'not tested'."""
    folder = tmp_path / "runs" / "digits" / "dpzv" / "x" / "s0_1"
    folder.mkdir(parents=True)
    cells = [(1.0, 10.0, 0.9, "ok"), (1.0, 500.0, 0.1, "chance"), (math.inf, 10.0, 0.95, "ok")]
    variants = {
        f"eps{e}-C{c}": {
            "eps": "inf" if math.isinf(e) else e,
            "clip": c,
            "seeds": {
                s: {"best": {"test_acc": a + 0.01 * int(s) * (k + 1)}, "privacy": {}, "status": st} for s in ("0", "1")
            },
        }
        for k, (e, c, a, st) in enumerate(cells)
    }
    (folder / "summary.json").write_text(json.dumps({"variants": variants}))
    best = report.load_best([str(folder / "summary.json")])
    spec = {
        "clip": 10,
        "methods": ["dpzv"],
        "figures": {"fig5": {"datasets": ["digits"], "eps": 1, "clips": [10, 500]}},
    }
    metrics = pd.DataFrame(columns=["dataset", "method", "eps", "clip", "seed", "test_loss"])
    rows = report._claim_rows(best, metrics, pd.DataFrame(columns=["dataset", "label", "ratio"]), spec)
    row = [r for r in rows if "Fig. 5" in r["claim"]][0]
    assert row["verdict"] == "holds" and "at chance under its DP noise" in row["note"]


# ------------------------------------------------------------------------------------ issues 39 and 44


def _summary(tmp_path, method, cells, seeds=(0, 1, 2), num_test=450, folder="s0_1_2"):
    """A job summary: one variant per (eps, clip, calibration, accuracies by seed, status) cell."""
    path = tmp_path / "runs" / "digits" / method / "x" / folder
    path.mkdir(parents=True, exist_ok=True)
    variants = {}
    for eps, clip, calibration, accs, status in cells:
        privacy = {"eps_pld": eps, "sigma": 0.5, "eps_vs_server": math.inf, "eps_vs_clients": 0.9}
        per_seed = {
            str(s): {"best": {"test_acc": a}, "privacy": privacy, "status": status, "num_test": num_test}
            for s, a in zip(seeds, accs)
        }
        tag = f"eps{eps}-C{clip}-{calibration}"
        variants[tag] = {"eps": "inf" if math.isinf(eps) else eps, "clip": clip, "calibration": calibration}
        variants[tag]["seeds"] = per_seed
    (path / "summary.json").write_text(json.dumps({"variants": variants}, default=str))
    return str(path / "summary.json")


def _claims(best, methods):
    spec = {"clip": 10, "methods": methods, "figures": {"fig3": ["digits"]}}
    metrics = pd.DataFrame(columns=["dataset", "method", "eps", "clip", "seed", "test_loss"])
    return report._claim_rows(best, metrics, pd.DataFrame(columns=["dataset", "label", "ratio"]), spec)


def test_comparisons_with_sides_at_chance_under_their_noise_are_one_distinct_comparison(tmp_path):
    """Issue 44: DPZV at eps 1 against three baselines that all sit at chance under their noise is one
    comparison (DPZV at eps 1 vs the majority-class predictor), the other two restate it (`also`)."""
    from fedrepro.report.claims import counts, distinct

    nan = math.nan
    dpzv = [(1.0, 10.0, "paper", (0.90, 0.88, 0.91), "ok"), (math.inf, 10.0, "paper", (0.95, 0.94, 0.96), "ok")]
    paths = [_summary(tmp_path / "d", "dpzv", dpzv)]
    for m, k in (("vafl", 1), ("zoo_vfl", 2), ("vfl_czofo", 3)):
        cells = [
            (1.0, nan, "paper", (0.10, 0.10, 0.10), "chance"),
            (math.inf, nan, "paper", (0.9 + k / 100,) * 3, "ok"),
        ]
        paths.append(_summary(tmp_path / m, m, cells))
    rows = distinct(_claims(report.load_best(paths), ["dpzv", "vafl", "zoo_vfl", "vfl_czofo"]))
    at_one = [r for r in rows if r["claim"].startswith("digits, ε = 1")]
    assert len(at_one) == 1 and at_one[0]["also"].count("DPZV above") == 2
    falls = [r for r in rows if "falls" in r["claim"]]
    assert len(falls) == 4  # each method at eps = inf against chance: its own run set
    assert sum(counts(r["verdict"] for r in rows).values()) == len(rows)


def test_the_quoted_cifar_gap_is_the_smallest_effect_of_its_two_comparisons_only(tmp_path):
    """The paper quotes one gap (CIFAR-10 at eps 0.1: DPZV over 90 %, ZOO-VFL and VFL-CZOFO below 30 %): 0.6 for
    those comparisons at eps 0.1, none elsewhere; an interval within +-0.6 there reads 'no effect at this scale'."""
    nan = math.nan
    dpzv = [(0.1, 10.0, "paper", (0.50, 0.52, 0.51), "ok")]
    zoo = [(0.1, nan, "paper", (0.45, 0.56, 0.49), "ok")]
    vafl = [(0.1, nan, "paper", (0.45, 0.56, 0.49), "ok")]
    paths = [_summary(tmp_path / m, m, c) for m, c in (("dpzv", dpzv), ("zoo_vfl", zoo), ("vafl", vafl))]
    rows = {r["claim"].split(": ")[-1]: r for r in _claims(report.load_best(paths), ["dpzv", "zoo_vfl", "vafl"])}
    assert rows["DPZV above ZOO-VFL"]["smallest_effect"] == pytest.approx(0.6)
    assert rows["DPZV above ZOO-VFL"]["verdict"] == "no effect at this scale"
    assert math.isnan(rows["DPZV above VAFL"]["smallest_effect"])
    assert (
        rows["DPZV above VAFL"]["verdict"].startswith("inconclusive")
        and "needs about" in rows["DPZV above VAFL"]["verdict"]
    )


def test_differences_one_test_example_apart_in_float32_are_identical(tmp_path):
    """Resolution = one test example (1/num_test): three seeds each one of 450 images apart read inconclusive
    (sign test, 6 seeds), not a zero-width 'holds'."""
    nan = math.nan
    a = [float(np.float32(k / 450)) for k in (360, 362, 365)]
    b = [float(np.float32((k - 1) / 450)) for k in (360, 362, 365)]
    paths = [
        _summary(tmp_path / "d", "dpzv", [(math.inf, 10.0, "paper", a, "ok")]),
        _summary(tmp_path / "v", "vafl", [(math.inf, nan, "paper", b, "ok")]),
    ]
    row = _claims(report.load_best(paths), ["dpzv", "vafl"])[0]
    assert row["verdict"].startswith("inconclusive (3 seeds, identical differences)") and row["seeds_needed"] == 6
    # differences within half an example of each other (here 1e-4 apart, far above float32 rounding) are the
    # same one-example difference: without the resolution their t interval would be a narrow 'holds'
    a, b = [0.80232, 0.70212, 0.90222], [0.8, 0.7, 0.9]
    paths = [
        _summary(tmp_path / "d2", "dpzv", [(math.inf, 10.0, "paper", a, "ok")]),
        _summary(tmp_path / "v2", "vafl", [(math.inf, nan, "paper", b, "ok")]),
    ]
    row = _claims(report.load_best(paths), ["dpzv", "vafl"])[0]
    assert row["verdict"].startswith("inconclusive (3 seeds, identical differences)")


def test_the_sound_row_is_printed_beside_the_papers_and_kept_out_of_the_claims(tmp_path):
    nan = math.nan
    dpzv = [
        (1.0, 10.0, "paper", (0.90, 0.92, 0.91), "ok"),
        (1.0, 10.0, "sound", (0.24, 0.22, 0.26), "ok"),
        (math.inf, 10.0, "paper", (0.95, 0.94, 0.96), "ok"),
    ]
    vafl = [(1.0, nan, "paper", (0.5, 0.6, 0.55), "ok"), (math.inf, nan, "paper", (0.96,) * 3, "ok")]
    paths = [_summary(tmp_path / "d", "dpzv", dpzv), _summary(tmp_path / "v", "vafl", vafl)]
    best = report.load_best(paths)
    assert not any("sound" in r["claim"] or "22" in r["evidence"] for r in _claims(best, ["dpzv", "vafl"]))
    sentence = report.soundness_cost(best)
    assert "digits ε = 1: 24.0 % against the paper's row's 91.0 %" in sentence and "holds" in sentence
    privacy = report.privacy_table(best)
    sound = privacy[privacy["label"] == report.SOUND_LABEL].iloc[0]
    assert sound["accuracy"] == pytest.approx(24.0) and sound["seeds"] == 3
    assert {"eps_vs_server", "eps_vs_clients"} <= set(privacy.columns)
    assert "secret" in sound["adversary"] or "pooled" in sound["adversary"]
    out = tmp_path / "out"

    class Job:
        spec = {"clip": 10, "methods": ["dpzv", "vafl"], "figures": {"fig3": ["digits"]}, "delta": 1e-3}
        spec.update(scale="quick", decimals=1, embed_clips={"digits": 0.5}, subsamples={})
        input = {"summaries": paths}
        output = {"md": str(out / "fig3.md")}

    report.table3(Job())
    text = (out / "fig3.md").read_text()
    assert f"| {report.SOUND_LABEL}" in text and "What soundness costs" in text and "C_h = 0.5 (digits)" in text


def test_more_seeds_are_named_and_paired_over_every_seed_both_sides_ran(tmp_path):
    nan = math.nan
    dpzv = [(math.inf, 10.0, "paper", (0.95, 0.94, 0.96), "ok")]
    vafl = [(math.inf, nan, "paper", (0.96, 0.97, 0.95), "ok")]
    paths = [_summary(tmp_path / "d", "dpzv", dpzv), _summary(tmp_path / "v", "vafl", vafl)]
    paths += [
        _summary(tmp_path / "d", "dpzv", [(math.inf, 10.0, "paper", (0.93, 0.95, 0.94), "ok")], (3, 4, 5), folder="s3"),
        _summary(tmp_path / "v", "vafl", [(math.inf, nan, "paper", (0.97, 0.96, 0.95), "ok")], (3, 4, 5), folder="s3"),
    ]
    best = report.load_best(paths)
    assert _claims(best, ["dpzv", "vafl"])[0]["seeds"] == 6
    note = report.more_seeds_note(best[best["method"] == "dpzv"].assign(label="DPZV"))
    assert note == ""  # every cell of this frame has 6 seeds: none has more than the others
    vafl = best[(best["method"] == "vafl") & (best["seed"] < 3)]
    mixed = pd.concat([best, vafl.assign(eps=1.0), vafl.assign(eps=5.0), vafl.assign(eps=10.0)])
    assert (
        report.more_seeds_note(mixed)
        == " Cells with more seeds than 3: digits DPZV ε = ∞ C = 10 (6), digits VAFL ε = ∞ (6)."
    )


def test_figure_legends_name_each_methods_adversary():
    assert "vs clients" in report.LEGEND["DPZV"] and "vs server" in report.LEGEND["VAFL"]
    assert all("vs" in report.LEGEND[label] for label in [*report.LABELS.values(), report.SOUND_LABEL])
