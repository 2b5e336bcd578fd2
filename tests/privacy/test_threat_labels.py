"""Every table and figure that shows an epsilon names its adversary and privacy unit (issue 27).

`privacy.threat.missing` is the check; here it runs on what the report functions write (captions through
`tables.write_table`, figures through `figures.save_figure`, both captured), so removing a threat note
from a caption or a figure fails a test."""

import math
from types import SimpleNamespace

import matplotlib
import pandas as pd
import pytest

from fedrepro.privacy import dpzv, fedsc, steffle, threat

matplotlib.use("Agg")


def test_the_check_sees_an_epsilon_and_its_threat_model():
    assert threat.missing(["accuracy at ε = 1"]) and threat.missing(["eps=3, h=0"]) and threat.missing(["eps_pld"])
    assert not threat.missing(["ε = ∞ (non-private)", "epoch", "steps"])  # nothing private shown
    assert not threat.missing(["accuracy at ε = 1", fedsc.THREAT_NOTE])
    assert not threat.missing(["eps=1", f"Equal eps: SteFFLe: {steffle.THREAT_MODELS['steffle'].short}"])
    assert not threat.missing(["ε = 1 (PLD 1.02)", dpzv.THREAT_SHORT])


def test_figure_texts_reads_titles_ticks_legends_and_figure_text():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="DPZV")
    ax.legend()
    ax.set(title="digits, ε = 1", xticks=[0, 1], xticklabels=["0.1", "eps 1"])
    assert threat.missing(threat.figure_texts(fig))
    fig.text(0.5, 0.0, dpzv.THREAT_SHORT)
    texts = threat.figure_texts(fig)
    assert {"DPZV", "digits, ε = 1", "eps 1"} <= set(texts) and not threat.missing(texts)
    plt.close(fig)


@pytest.fixture
def captured(monkeypatch):
    """The texts of every table (caption, columns, cells) and every figure the report functions write."""
    from fedrepro.report import figures, tables

    seen = []

    def table_texts(table, stem, caption, *args, **kwargs):
        seen.append([caption, *map(str, table.columns), *map(str, table.to_numpy().ravel())])

    monkeypatch.setattr(tables, "write_table", table_texts)
    monkeypatch.setattr(figures, "save_figure", lambda fig, *a, **k: seen.append(threat.figure_texts(fig)))
    return seen


def test_fedsc_table6_and_claims_name_what_their_epsilon_covers(captured, monkeypatch):
    from fedrepro.report import fedsc as report
    from fedrepro.report import fedsc_claims

    row = {"dataset": "cifar10", "eps": 3, "delta": 1e-5, "shares": 10, "mu": 1.0, "sigma": 0.05, "n": 5000}
    report.table6(SimpleNamespace(spec={"rows": [row], "decimals": 2}, output={"md": "x.md"}))
    claims = pd.DataFrame(
        {"claim": ["FedSC (ε=3, δ=0.01) > FedAvg+SC (Table 3)"], "column": ["digits"], "verdict": ["holds"]}
    )
    monkeypatch.setattr(fedsc_claims, "claims_frame", lambda claims_spec, resolution, counted=frozenset(): (claims, []))
    monkeypatch.setattr(fedsc_claims, "resolutions", lambda paths: {})
    job = SimpleNamespace(
        spec={"claims": [], "scale": "quick", "decimals": 2}, input={"meta": []}, output={"md": "x.md"}
    )
    fedsc_claims.claims_table(job)
    assert len(captured) == 2 and all(threat.shows_epsilon(" ".join(t)) and not threat.missing(t) for t in captured)


def test_dpzv_figures_with_an_epsilon_name_its_adversary(captured, monkeypatch):
    from fedrepro.report import dpzv as report

    rows = [
        {"dataset": "digits", "method": m, "eps": e, "clip": c, "seed": s, "epoch": ep, "test_acc": 0.5}
        for m in ("dpzv", "vafl")
        for e in (1.0, math.inf)
        for c in (10.0, 500.0)
        for s in (0, 1)
        for ep in (1, 2)
    ]
    frame = pd.DataFrame(rows).assign(label=lambda d: d["method"].map(report.LABELS), server_round=1, test_loss=1.0)
    monkeypatch.setattr(report, "_metrics", lambda paths: frame)
    spec = {
        "clip": 10,
        "delta": 1e-3,
        "scale": "quick",
        "figures": {"fig2": {"digits": 1}, "fig5": {"datasets": ["digits"], "eps": 1, "clips": [10, 500]}},
    }
    job = SimpleNamespace(spec=spec, input={"metrics": []}, output={"png": "x.png"})
    report.figure2(job)
    report.figure5(job)
    assert len(captured) == 2
    for texts in captured:
        assert any(threat.shows_epsilon(t) for t in texts) and not threat.missing(texts)


def test_every_steffle_table_names_each_methods_unit_and_adversary(captured, monkeypatch):
    from fedrepro.report import steffle as report

    points = pd.DataFrame({"method": ["steffle", "tran2021", "ling2024"], "eps": [1.0, 1.0, 1.0]})
    tiny = pd.DataFrame({"eps": [1.0], "verdict": ["holds"]})  # a claims table's verdict column feeds its caption
    monkeypatch.setattr(report, "load_points", lambda paths: points)
    for name in ("points_table", "headline_table", "claims_table", "privacy_table", "eta_w_table"):
        monkeypatch.setattr(report, name, lambda *a, **k: tiny)
    monkeypatch.setattr(report, "comparison_panels", lambda *a: [])
    monkeypatch.setattr(report, "headline_values", lambda *a: {})
    monkeypatch.setattr(report.table_io, "published", lambda name: tiny)
    outputs = {f"{n}_md": f"{n}.md" for n in ("points", "headline", "claims", "privacy", "eta_w")}
    job = SimpleNamespace(spec={"scale": "quick", "decimals": 2, "figures": {}}, input={"metrics": []}, output=outputs)
    report.tables(job)
    assert len(captured) == 5 and not any(threat.missing(t) for t in captured)
    # each private method's own short form, so equal eps is never read as equal protection
    assert all(steffle.THREAT_MODELS[m].short in captured[0][0] for m in points["method"])


def _assert_named(captured, count):
    assert len(captured) == count
    for texts in captured:
        assert threat.shows_epsilon(" ".join(texts)) and not threat.missing(texts)


@pytest.mark.parametrize("name", ["table3", "table4", "table5"])
def test_fedsc_dp_tables_name_what_their_epsilon_covers(captured, monkeypatch, name):
    from fedrepro.report import fedsc as report

    ours = pd.DataFrame(
        {
            "row": ["FedSC (ε=3)", "FedSC (ε=6)"],
            "column": ["cifar10"] * 2,
            "seed": [0, 0],
            "value": [50.0, 55.0],
            "status": ["ok", "ok"],
            "status_reason": ["", ""],
            "effective_rank": [3.0, 3.0],
        }
    )
    monkeypatch.setattr(report, "probe_frame", lambda cells: ours)
    monkeypatch.setattr(report, "realised_labels", lambda cells, delta: {"FedSC (ε=3)": "FedSC (ε=3) [PLD 3.1]"})
    spec = {"table": name, "cells": [], "delta": 1e-2, "scale": "quick", "decimals": 2}
    report.probe_table(SimpleNamespace(spec=spec, output={"md": "x.md"}))
    _assert_named(captured, 1)


def test_fedsc_privacy_table_names_what_its_epsilon_covers(captured, monkeypatch):
    from fedrepro.report import fedsc as report

    frame = pd.DataFrame({"dataset": ["cifar10"], "run": ["FedSC"], "label ε": [3.0], "eps_pld_max": [3.1]})
    monkeypatch.setattr(report, "privacy_frame", lambda cells: frame)
    report.privacy_table(SimpleNamespace(spec={"cells": [], "scale": "quick", "decimals": 2}, output={"md": "x.md"}))
    _assert_named(captured, 1)


def _dpzv_best():
    from fedrepro.report import dpzv as report

    rows = [
        {"dataset": "digits", "method": m, "eps": e, "clip": 10.0, "seed": s, "best_test_acc": 0.5, "status": "ok"}
        for m in ("dpzv", "vafl")
        for e in (1.0, math.inf)
        for s in (0, 1)
    ]
    return pd.DataFrame(rows).assign(label=lambda d: d["method"].map(report.LABELS), eps_pld=1.02, eps_known_pooled=6.3)


def test_dpzv_figure3_names_its_adversary(captured, monkeypatch):
    from fedrepro.report import dpzv as report

    monkeypatch.setattr(report, "load_best", lambda paths: _dpzv_best())
    spec = {"clip": 10, "delta": 1e-3, "scale": "quick", "figures": {"fig3": ["digits"]}}
    report.figure3(SimpleNamespace(spec=spec, input={"summaries": []}, output={"png": "x.png"}))
    _assert_named(captured, 1)


def test_dpzv_claims_and_privacy_tables_name_their_adversaries(captured, monkeypatch):
    from fedrepro.report import dpzv as report

    monkeypatch.setattr(report, "load_best", lambda paths: _dpzv_best())
    monkeypatch.setattr(report, "load_metrics", lambda paths: pd.DataFrame())
    monkeypatch.setattr(report, "load_memory", lambda paths: pd.DataFrame())
    monkeypatch.setattr(report, "_claim_rows", lambda *a: [{"claim": "DPZV > VAFL at ε = 1", "verdict": "holds"}])
    privacy = pd.DataFrame({"method": ["dpzv", "vafl"], "eps": [1.0, 1.0], "eps_pld": [1.02, 1.02]})
    monkeypatch.setattr(report, "privacy_table", lambda best: privacy)
    spec = {"scale": "quick", "decimals": 2, "clip": 10, "server_update": "sgd"}
    job = SimpleNamespace(
        spec=spec,
        input={"summaries": [], "metrics": [], "memory": []},
        output={"md": "c.md", "privacy_md": "p.md"},
    )
    report.claims(job)
    _assert_named(captured, 2)


def _steffle_points():
    rows = [
        {
            "dataset": "adult",
            "fairness": "dp",
            "method": m,
            "setting": "s",
            "num_silos": 3,
            "h": 0.0,
            "eps_value": e,
            "eps": e,
            "lam": lam,
            "seed": seed,
            "error": 0.2,
            "dp_violation": 0.1,
            "eo_violation": 0.1,
            "realised_eps": e,
            "sound_eps": 3 * e,
        }
        for m in ("steffle", "tran2021", "ling2024")
        for e in (1.0, math.inf)
        for lam in (0.0, 1.0)
        for seed in (0, 1)
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("figure", ["fig1", "fig2"])
def test_steffle_figures_name_each_methods_unit_and_adversary(captured, monkeypatch, figure):
    from fedrepro.report import steffle as report

    monkeypatch.setattr(report, "load_points", lambda paths: _steffle_points())
    if figure == "fig2":
        panel = {"num_silos": [3], "h": [0.0], "eps": 1.0}
        layout = {"dataset": "adult", "fairness": "dp", "panels": [panel, {**panel, "h": [0.0, 0.5]}]}
    else:
        layout = {
            "dataset": "adult",
            "fairness": "dp",
            "num_silos": 3,
            "epsilons": [1.0],
            "h": [0.0],
            "methods": ["steffle", "tran2021", "ling2024"],
        }
    spec = {"figure": figure, "layout": layout, "scale": "quick"}
    report.figure(SimpleNamespace(spec=spec, input={"metrics": []}, output={"png": "x.png"}))
    _assert_named(captured, 1)


def test_steffle_refcode_table_names_its_unit_and_adversary(captured, monkeypatch):
    from fedrepro.report import steffle as report

    monkeypatch.setattr(report, "load_points", lambda paths: _steffle_points())
    cells = pd.DataFrame({"h": [0.75], "eps": [1.0], "lam": [1.0], "realised_epsilon_pld": [1.01]})
    monkeypatch.setattr(report, "refcode_table", lambda points, summaries: cells)
    monkeypatch.setattr(report, "authors_refcode", lambda: None)
    monkeypatch.setattr(report, "run_conditions", lambda summaries: "Batches: shuffle_keep_last")
    spec = {"scale": "quick", "decimals": 2}
    report.refcode(SimpleNamespace(spec=spec, input={"metrics": ["m/metrics.csv"]}, output={"md": "x.md"}))
    _assert_named(captured, 1)
