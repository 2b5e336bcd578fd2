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

    row = {"dataset": "cifar10", "eps": 3, "delta": 1e-5, "shares": 10, "mu": 1.0, "sigma": 0.05, "n": 5000}
    report.table6(SimpleNamespace(spec={"rows": [row], "decimals": 2}, output={"md": "x.md"}))
    claims = pd.DataFrame({"claim": ["FedSC (ε=3, δ=0.01) > FedAvg+SC (Table 3)"], "column": ["digits"]})
    monkeypatch.setattr(report, "claims_frame", lambda claims_spec: claims)
    report.claims_table(SimpleNamespace(spec={"claims": [], "scale": "quick", "decimals": 2}, output={"md": "x.md"}))
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
    tiny = pd.DataFrame({"eps": [1.0]})
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
