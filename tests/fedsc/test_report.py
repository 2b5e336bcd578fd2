"""FedSC reports refuse degenerate runs: collapsed / chance / diverged cells print their status, claims
with a degenerate side are 'not tested', Tables 3-5 show the realised tight epsilon beside each label."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fedrepro.experiments.fedsc import PRIVATE_VS_NO_SHARING, PROPOSED_VS_NO_SHARING, VS_UNTRAINED
from fedrepro.pipeline import make_job
from fedrepro.report import fedsc as report
from fedrepro.report import fedsc_claims as claims_report
from fedrepro.report.claims import counts_text
from tests.fedsc.helpers import tiny_spec, write_prepared_digits

torch.set_num_threads(1)


def test_probe_records_effective_rank_and_flags_a_collapsed_encoder(tmp_path):
    """Embeddings that are one vector plus a tiny spread (a projector scaled down, with a bias) have an uncentered effective rank
    of 1 -> collapsed; an untrained (random) encoder is not collapsed; both probes record their ranks."""
    from fedrepro.algorithms.fedsc.base import build_net
    from fedrepro.algorithms.fedsc.probing import probe_job, random_probe_job

    data = write_prepared_digits(tmp_path)
    tiny = tiny_spec()
    spec = {
        "encoder": tiny["encoder"],
        "projector": tiny["projector"],
        "probe": {"epochs": 2, "batch_size": 64, "collapse_rank": 1.05},
        "device": "cpu",
    }
    torch.manual_seed(0)  # the weights come from the global generator: other tests' draws must not decide
    net = build_net(tiny, 1)
    projector = dict(net.projector.state_dict())  # z = 1 + a tiny input-dependent part: one vector plus noise
    projector["2.weight"], projector["2.bias"] = 1e-3 * projector["2.weight"], torch.ones_like(projector["2.bias"])
    model = {"seeds": {0: {"backbone": net.backbone.state_dict(), "projector": projector}}}
    torch.save(model, tmp_path / "model.pt")
    out = tmp_path / "trained" / "probe.json"
    probe_job(make_job(spec, {"probe": str(out)}, {"data": str(data), "model": str(tmp_path / "model.pt")}))
    seed = json.loads(out.read_text())["seeds"]["0"]
    assert seed["effective_rank"] == pytest.approx(1.0, abs=1e-3)
    assert seed["embedding_rank_centered"] > 2.0  # the centered covariance cannot see this collapse
    assert seed["status"] == "collapsed" and "spread" in seed["status_reason"]  # one vector: no spread left
    assert seed["feature_rank_centered"] > 2.0  # the backbone itself is intact

    out = tmp_path / "random" / "probe.json"
    spec.update(
        encoder={"name": "small_cnn", "kwargs": {"width": 16, "feature_dim": 64, "image_size": 8}},
        projector={"hidden": 128, "out": 64},
    )  # the quick scale's architecture
    random_probe_job(make_job(spec, {"probe": str(out)}, {"data": str(data)}, seeds=[0, 1]))
    seeds = json.loads(out.read_text())["seeds"]
    assert set(seeds) == {"0", "1"} and all(
        s["effective_rank"] > 1.05 and s["status"] != "collapsed" for s in seeds.values()
    )
    assert seeds["0"]["effective_rank"] != seeds["1"]["effective_rank"]  # one seeded initialisation per seed


def _write_run(folder: Path, accs: dict, statuses: dict | None = None, privacy: dict | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    statuses = statuses or {}
    seeds = {
        str(s): {
            "final_acc": a,
            "max_acc": a,
            "curve": [a],
            "effective_rank": 5.0,
            **({"status": statuses[s][0], "status_reason": statuses[s][1]} if s in statuses else {}),
        }
        for s, a in accs.items()
    }
    (folder / "probe.json").write_text(json.dumps({"spec": {}, "seeds": seeds}))
    summary = {
        str(s): {
            "status": "ok",
            "status_reason": "",
            "client_sizes": [100, 120],
            **({"privacy": privacy} if privacy else {}),
        }
        for s in accs
    }
    (folder / "summary.json").write_text(json.dumps({"spec": {}, "seeds": summary}))
    return str(folder / "probe.json")


def test_table_prints_status_not_number_and_realised_epsilon_beside_the_label(tmp_path):
    avg = _write_run(tmp_path / "avg", {0: 0.80, 1: 0.82})
    private = {"sigma": 0.05, "mu": 2.0, "shares": [3, 5]}
    eps3 = _write_run(
        tmp_path / "eps3",
        {0: 0.11, 1: 0.50},
        {0: ("collapsed", "collapsed (embedding effective rank 1.01 < 2)")},
        privacy=private,
    )
    cells = [
        {"path": avg, "row": "FedAvg+SC", "column": "digits 2/10"},
        {"path": eps3, "row": "ε=3", "column": "digits 2/10", "private": True},
    ]
    job = make_job(
        {
            "table": "table5",
            "cells": cells,
            "scale": "quick",
            "decimals": 2,
            "delta": 1e-4,
            "note": "Quick scale cannot show this",
        },
        {k: str(tmp_path / f"t5.{k}") for k in ("md", "csv", "tex")},
    )
    report.probe_table(job)
    text = (tmp_path / "t5.md").read_text()
    assert "collapsed (embedding effective rank 1.01 < 2) (1/2 seeds collapsed)" in text
    assert "30.5" not in text  # the collapsed cell's mean is not shown
    assert "81.00" in text and "Quick scale cannot show this" in text
    # the realised tight epsilon: PLD of the composed Gaussian with sensitivity sqrt(2) mu / |D_j|, worst client
    from dp_accounting import dp_event, pld

    def pld_eps(n, t):
        acc = pld.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dp_event.GaussianDpEvent(0.05 / (math.sqrt(2) * 2.0 / n)), t)
        return acc.get_epsilon(1e-4)

    expected = max(pld_eps(100, 3), pld_eps(120, 5))
    eps = report.realised_epsilon(Path(eps3).with_name("summary.json"), 1e-4)
    assert eps == pytest.approx(expected, rel=0.02)
    assert f"ε=3 [realised PLD ε: digits 2/10 {eps:.2f}]" in text


def _claim(text: str, a: str, b: str, kind: str = VS_UNTRAINED, column: str = "digits 10/10") -> dict:
    return {
        "claim": text,
        "column": column,
        "dataset": column.split(" ")[0],
        "kind": kind,
        "a_name": text.split(" > ")[0],
        "b_name": text.split(" > ")[1],
        "a": [{"path": a, "row": "A", "column": column}],
        "b": [{"path": b, "row": "B", "column": column}],
    }


def test_claims_are_paired_verdicts_with_intervals(tmp_path):
    """Each claim is judged on the per-seed differences A - B (points): the t interval is recomputed here
    by hand; a side with a chance-level seed makes the claim 'not tested'; a spread-out difference is
    'inconclusive' and says how many seeds it would need."""
    a = _write_run(tmp_path / "a", {0: 0.90, 1: 0.88, 2: 0.86})
    b = _write_run(tmp_path / "b", {0: 0.80, 1: 0.79, 2: 0.78})  # A - B = 10, 9, 8 points
    c = _write_run(tmp_path / "c", {0: 0.95, 1: 0.95, 2: 0.95}, {1: ("chance", "at chance")})
    d = _write_run(tmp_path / "d", {0: 0.80, 1: 0.89, 2: 0.84})  # A - D = 10, -1, 2 points
    claims = [_claim("A > B", a, b), _claim("B > A", b, a), _claim("C > A", c, a), _claim("A > D", a, d)]
    frame, _ = claims_report.claims_frame(claims, {"digits": 100 / 450})
    assert list(frame["verdict"]) == ["holds", "does not hold", "not tested (C: at chance (1/3 seeds chance))"] + [
        "inconclusive (3 seeds)"
    ]
    half = 4.302653 * 1.0 / np.sqrt(3)  # t(0.975, 2 df) x sd 1 / sqrt(3)
    assert frame.loc[0, "effect"] == pytest.approx(9.0)
    assert frame.loc[0, "ci_low"] == pytest.approx(9.0 - half, abs=1e-4)
    assert frame.loc[0, "ci_high"] == pytest.approx(9.0 + half, abs=1e-4)
    assert frame.loc[1, "ci_high"] == pytest.approx(-9.0 + half, abs=1e-4)
    assert list(frame["wins"][:2]) == [3, 0] and list(frame["seeds"][:2]) == [3, 3]
    assert frame.loc[0, claims_report.VERDICT_TEXT].startswith("holds: +9.00 [+6.52, +11.48], 3/3")
    assert frame.loc[0, "A per seed (%)"] == "90.0 / 88.0 / 86.0"
    assert "needs about" in frame.loc[3, claims_report.VERDICT_TEXT]


def test_one_test_image_apart_in_float32_is_inconclusive_not_holds(tmp_path):
    """Issue 44's FedSC row: each seed one test image of 450 above FedAvg+SC, the float32 accuracies making
    the differences differ in the sixth digit, read 'holds' with a zero-width interval; at the data's
    resolution they are identical differences, which the sign test cannot decide at 3 seeds (6 needed)."""
    k = (360, 362, 365)
    a = _write_run(tmp_path / "a", {s: float(np.float32(n / 450)) for s, n in enumerate(k)})
    b = _write_run(tmp_path / "b", {s: float(np.float32((n - 1) / 450)) for s, n in enumerate(k)})
    claim = _claim("FedSC (ε=12, δ=0.01) > FedAvg+SC (Table 4)", a, b, PRIVATE_VS_NO_SHARING)
    frame, _ = claims_report.claims_frame([claim], claims_report.resolutions([_meta(tmp_path, 450)]))
    assert frame.loc[0, "verdict"] == "inconclusive (3 seeds, identical differences)"
    assert frame.loc[0, "seeds_needed"] == 6
    assert "needs about 6 seeds" in frame.loc[0, claims_report.VERDICT_TEXT]
    # differences within half a test image of each other are the same difference (the resolution is passed)
    near = _write_run(
        tmp_path / "near", {s: float(np.float32((n - 1) / 450 + (s - 1) * 1e-4)) for s, n in enumerate(k)}
    )
    frame, _ = claims_report.claims_frame([{**claim, "b": [{**claim["b"][0], "path": near}]}], {"digits": 100 / 450})
    assert frame.loc[0, "verdict"] == "inconclusive (3 seeds, identical differences)"


def _meta(folder: Path, n_test: int) -> str:
    path = folder / "meta.json"
    path.write_text(json.dumps({"name": "digits", "n_test": n_test}))
    return str(path)


def test_claims_with_the_same_per_seed_values_are_one_comparison(tmp_path):
    """FedSC's partial-participation eps 3 / 6 / 8 runs came out with the same accuracies seed by seed: one
    row, the restatements in 'also', one verdict in the caption's count; a different run stays its own row."""
    same = {0: 0.84, 1: 0.81, 2: 0.76}
    runs = {name: _write_run(tmp_path / name, same) for name in ("eps3", "eps6", "eps8")}
    other = _write_run(tmp_path / "eps12", {0: 0.85, 1: 0.80, 2: 0.77})
    base = _write_run(tmp_path / "avg", {0: 0.843, 1: 0.812, 2: 0.757})
    claims = [_claim(f"FedSC ({n}) > FedAvg+SC", p, base, PRIVATE_VS_NO_SHARING) for n, p in runs.items()]
    claims.append(_claim("FedSC (eps12) > FedAvg+SC", other, base, PRIVATE_VS_NO_SHARING))
    frame, rows = claims_report.claims_frame(claims, {"digits": 100 / 450})
    assert list(frame["claim"]) == ["FedSC (eps3) > FedAvg+SC", "FedSC (eps12) > FedAvg+SC"]
    assert frame.loc[0, "also"] == "FedSC (eps6) > FedAvg+SC; FedSC (eps8) > FedAvg+SC"
    assert len(rows) == 4 and counts_text(frame["verdict"]).startswith("2 distinct comparisons")


def test_smallest_effects_are_the_papers_smallest_reported_gaps():
    """FedSC (eps = inf) vs FedAvg+SC: Table 2's smallest gap, SVHN 2/5 (91.03 - 89.89); a private level vs
    FedAvg+SC: Table 5's SVHN 2/5 at eps = 3 (89.95 - 89.89); against the untrained encoder the paper
    reports nothing."""
    effect, source = claims_report.smallest_effect(PROPOSED_VS_NO_SHARING)
    assert effect == pytest.approx(1.14) and "SVHN 2/5" in source
    effect, source = claims_report.smallest_effect(PRIVATE_VS_NO_SHARING)
    assert effect == pytest.approx(0.06) and "Table 5" in source
    assert math.isnan(claims_report.smallest_effect(VS_UNTRAINED)[0])


def test_a_claim_holds_for_the_project_only_where_it_holds_on_every_standin():
    rows = [
        {"claim": "X > Y", "column": f"{d} {c}", "verdict": v}
        for d, c, v in [
            ("shapes", "10/10", "holds"),
            ("textures", "10/10", "holds"),
            ("shapes", "2/10", "holds"),
            ("textures", "2/10", "does not hold"),
            ("shapes", "1/10", "inconclusive (3 seeds)"),
            ("textures", "1/10", "does not hold"),
        ]
    ]
    joint = claims_report.across(rows, ["shapes", "textures"])
    assert list(joint["column"]) == ["shapes + textures 10/10", "shapes + textures 2/10", "shapes + textures 1/10"]
    assert list(joint["verdict"]) == [
        "holds on every stand-in",
        "holds on shapes only (textures: does not hold)",
        "holds on none (shapes: inconclusive; textures: does not hold)",
    ]
    assert claims_report.across(rows[:2], ["shapes"]).empty


def test_claims_caption_names_each_collapsed_side_once_with_its_seeds(tmp_path):
    """The claims caption says which sides were not tested and why (a stand-in's FedSC collapsing): each side
    once over its claims, with the most seeds any claim gives it; healthy sides are not named."""
    ok = _write_run(tmp_path / "ok", {0: 0.3, 1: 0.3, 2: 0.3})
    bad = _write_run(
        tmp_path / "bad",
        {0: 0.2, 1: 0.2, 2: 0.2},
        {0: ("collapsed", "rank 1.00 < 2"), 2: ("collapsed", "rank 1.3 < 2")},
    )
    more = _write_run(tmp_path / "more", {3: 0.2}, {3: ("collapsed", "rank 1.1 < 2")})
    claims = [
        _claim("FedSC > FedAvg", bad, ok, column="textures 10/10"),
        _claim("FedSC > untrained", bad, ok, column="textures 10/10"),
    ]
    claims[1]["a"] = claims[1]["a"] + [{"path": more, "row": "A", "column": "textures 10/10"}]
    assert _untested(claims) == ["FedSC at textures 10/10: rank 1.00 < 2 (3/4 seeds collapsed)"]
    assert _untested(claims[:1]) == ["FedSC at textures 10/10: rank 1.00 < 2 (2/3 seeds collapsed)"]
    assert _untested([_claim("FedAvg > untrained", ok, ok)]) == []
    private = _untested([_claim("ε=6 > FedAvg", more, ok, column="textures 2/10")])
    assert private == ["FedSC ε=6 at textures 2/10: rank 1.1 < 2 (1/1 seeds collapsed)"]  # Table 3's row, named


def _untested(claims: list[dict], counted=frozenset()) -> list[str]:
    healths = claims_report.side_healths(claims, counted)
    return [f"{side}: {h.reason}" for side, h in healths.items() if not h.ok]


def test_a_fedsc_collapse_counted_on_a_standin_is_judged_and_any_other_stays_not_tested(tmp_path):
    """`collapse_counted`: on those data sets a collapse of a FedSC run (its shared term's doing) is FedSC's
    result, judged on its accuracies (here 10, 11, 12 points under FedAvg+SC: 'does not hold'); FedSC's
    collapse elsewhere, and FedAvg+SC's anywhere, still make a comparison 'not tested'."""
    collapsed = {s: ("collapsed", "rank 1.0 < 2") for s in range(3)}
    runs = tmp_path / "runs" / "textures"
    fedsc = _write_run(runs / "fedsc" / "full_epsinf" / "s0_1_2", {0: 0.20, 1: 0.20, 2: 0.20}, collapsed)
    avg = _write_run(runs / "fedavg_sc" / "full" / "s0_1_2", {0: 0.30, 1: 0.31, 2: 0.32})
    avg_collapsed = _write_run(runs / "fedavg_sc" / "partial" / "s0_1_2", {0: 0.10, 1: 0.1, 2: 0.1}, collapsed)
    claim = _claim("FedSC > FedAvg+SC", fedsc, avg, PROPOSED_VS_NO_SHARING, column="textures 10/10")
    for cells in (claim["a"], claim["b"]):
        cells[0]["dataset"] = "textures"
    judged, _, _ = claims_report.judge(claim, 0.1, frozenset({"textures"}))
    assert judged.outcome == "does not hold" and judged.effect == pytest.approx(-11.0)
    assert "counted as FedSC's result" in judged.note
    assert claims_report.judge(claim, 0.1, frozenset({"shapes"}))[0].outcome == "not tested"
    assert claims_report.judge(claim, 0.1)[0].outcome == "not tested"
    flipped = {**claim, "a": [{**claim["b"][0], "path": avg_collapsed}]}
    assert claims_report.judge(flipped, 0.1, frozenset({"textures"}))[0].outcome == "not tested"
    assert _untested([claim], frozenset({"textures"})) == []


def test_uncentered_effective_rank_sees_embeddings_that_are_one_vector_plus_noise():
    """SC's collapse: z = c + small noise. The centered covariance is full rank (the noise), the uncentered
    second moment E[z z^T], the matrix SC's loss is built on, is rank one in effect."""
    from fedrepro.eval.health import effective_rank

    rng = np.random.default_rng(0)
    c = rng.normal(size=16)
    z = c + 0.01 * rng.normal(size=(500, 16))
    assert effective_rank(z) > 12
    assert effective_rank(z, center=False) < 1.01
    spread = rng.normal(size=(500, 16))
    assert effective_rank(spread, center=False) > 12


def test_standin_table_has_no_published_column_and_samples_figure_shows_every_class(tmp_path):
    """The stand-in's probe table compares no published number (the paper has none for it); the samples
    figure of a prepared data set is written."""
    from fedrepro.data.prepare import prepare_dataset

    run = _write_run(tmp_path / "avg", {0: 0.30, 1: 0.32, 2: 0.31})
    job = make_job(
        {"table": "standin", "cells": [{"path": run, "row": "FedAvg+SC", "column": "shapes 10/10"}], "scale": "quick"}
        | {"decimals": 2},
        {k: str(tmp_path / f"s.{k}") for k in ("md", "csv", "tex")},
    )
    report.probe_table(job)
    text = (tmp_path / "s.md").read_text()
    assert "31.00" in text and "published" not in text and "generated stand-in" in text
    data = prepare_dataset("shapes", tmp_path / "shapes", tmp_path, {"train_per_class": 2, "test_per_class": 1})
    figure = make_job(
        {"scale": "quick", "per_class": 2},
        {k: str(tmp_path / f"f.{k}") for k in ("png", "pdf")},
        {"data": str(data / "arrays.npz")},
    )
    report.samples_figure(figure)
    assert (tmp_path / "f.png").stat().st_size > 0 and (tmp_path / "f.pdf").stat().st_size > 0


def test_the_privacy_table_names_what_fedsc_epsilon_covers_and_whom_it_holds_against(tmp_path):
    job = make_job(
        {"cells": [], "scale": "quick", "decimals": 2}, {k: str(tmp_path / f"p.{k}") for k in ("md", "csv", "tex")}
    )
    report.privacy_table(job)
    text = (tmp_path / "p.md").read_text()
    assert "correlation matrices only" in text and "model weights in the clear" in text
    assert "against the server (and the other clients) ε = ∞" in text


def test_ablation_table_pairs_each_variant_with_its_run_and_with_fedavg_sc(tmp_path):
    """The ablation table: per stand-in, each variant against the run it changes and against FedAvg+SC,
    paired by seed (A - B in points); the base run against FedAvg+SC only."""
    col = "shapes 10/10"
    avg = _write_run(tmp_path / "avg", {0: 0.30, 1: 0.31, 2: 0.29})
    base = _write_run(tmp_path / "base", {0: 0.33, 1: 0.35, 2: 0.31})
    variant = _write_run(tmp_path / "variant", {0: 0.28, 1: 0.30, 2: 0.26})  # base - 5 points each seed
    cells = [
        {"path": avg, "row": "FedAvg+SC", "column": col, "dataset": "shapes"},
        {"path": base, "row": "FedSC ε=∞", "column": col, "dataset": "shapes"},
        {
            "path": variant,
            "row": "FedSC ε=∞, mu1",
            "column": col,
            "dataset": "shapes",
            "against": "FedSC ε=∞",
            "change": {"mu": 1.0},
        },
    ]
    frame = claims_report.ablation_frame(cells, {"shapes": 0.1}).set_index("run")
    assert frame.loc["FedSC ε=∞, mu1", "per seed (%)"] == "28.0 / 30.0 / 26.0"
    assert frame.loc["FedSC ε=∞, mu1", "change"] == '{"mu": 1.0}'
    assert frame.loc["FedSC ε=∞, mu1", "vs the run it changes"].startswith(
        "FedSC ε=∞: inconclusive (3 seeds, identical differences): -5.00"
    )  # the same 5 points on every seed: the sign test needs 6
    assert frame.loc["FedSC ε=∞", "vs the run it changes"] == ""
    assert frame.loc["FedSC ε=∞", "vs FedAvg+SC"] == "FedAvg+SC: holds: +3.00 [+0.52, +5.48], 3/3 seeds"
    assert frame.loc["FedAvg+SC", "vs FedAvg+SC"] == ""
    assert set(frame["health"]) == {"ok"}
    collapsed = _write_run(
        tmp_path / "collapsed", {0: 0.2, 1: 0.2, 2: 0.2}, {s: ("collapsed", "rank 1") for s in range(3)}
    )
    cells[2] = {**cells[2], "path": collapsed}
    frame = claims_report.ablation_frame(cells, {"shapes": 0.1}).set_index("run")
    assert frame.loc["FedSC ε=∞, mu1", "health"].startswith("collapsed: ")
    assert frame.loc["FedSC ε=∞, mu1", "vs FedAvg+SC"].startswith("FedAvg+SC: not tested")
    runs = tmp_path / "runs" / "shapes" / "fedsc"  # a FedSC run's folder: on a counted stand-in, judged
    counted = _write_run(runs / "full_epsinf_mu1" / "s0_1_2", {0: 0.2, 1: 0.2, 2: 0.2}, {0: ("collapsed", "rank 1")})
    cells[2] = {**cells[2], "path": counted}
    frame = claims_report.ablation_frame(cells, {"shapes": 0.1}, frozenset({"shapes"})).set_index("run")
    assert frame.loc["FedSC ε=∞, mu1", "health"].startswith("ok: rank 1 (1/3 seeds collapsed), counted as FedSC's")
    assert frame.loc["FedSC ε=∞, mu1", "vs FedAvg+SC"].startswith("FedAvg+SC: does not hold: -10.00")
