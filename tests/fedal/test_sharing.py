"""Work not done twice (issue 30): FedAL's first LF anchor forward of each stage is the live forward."""

from __future__ import annotations

import pytest
import torch

from fedrepro.algorithms.fedal.base import FedData
from fedrepro.algorithms.fedal.fedal import FedAL
from fedrepro.fl.loop import run_rounds

from .helpers import config

torch.set_num_threads(1)
POOL = [{"name": "wrn10_1", "options": {"in_channels": 3}}]  # BatchNorm: the anchor runs in train mode


def _images(num_clients=3, k=4, per_client=24, public=32, seed=0) -> FedData:
    gen = torch.Generator().manual_seed(seed)

    def draw(n):
        return torch.randn(n, 3, 8, 8, generator=gen), torch.randint(0, k, (n,), generator=gen)

    xs, ys = zip(*(draw(per_client) for _ in range(num_clients)))
    px, _ = draw(public)
    tx, ty = draw(40)
    return FedData(list(xs), list(ys), px, tx, ty, k)


def _run(share: bool, use_al: bool, monkeypatch):
    monkeypatch.setattr(FedAL, "share_first_anchor", share)
    torch.manual_seed(0)
    algo = FedAL(_images(), POOL, config(tau=3), seed=0, use_al=use_al, use_lf=True)
    algo.enable_diagnostics(every_rounds=1, batches=2)  # Figure 6's variances read the stage anchors
    return algo, run_rounds(algo, 2)


@pytest.mark.parametrize("use_al", [True, False], ids=["fedal", "fedmd_lf"])
def test_the_first_anchor_forward_shared_with_the_live_one_changes_no_number(use_al, monkeypatch):
    shared, rows_shared = _run(True, use_al, monkeypatch)
    plain, rows_plain = _run(False, use_al, monkeypatch)
    assert rows_shared.columns.tolist() == rows_plain.columns.tolist()
    assert rows_shared.equals(rows_plain), (rows_shared - rows_plain).abs().max()
    for a, b in zip(shared.clients, plain.clients):
        for (name, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
            assert torch.equal(x, y), name


def test_the_shared_path_skips_one_anchor_forward_per_stage_and_client(monkeypatch):
    calls = {"n": 0}
    import fedrepro.algorithms.fedal.fedal as module

    original = module.frozen_logits

    def counting(model, x):
        calls["n"] += 1
        return original(model, x)

    monkeypatch.setattr(module, "frozen_logits", counting)
    for share in (False, True):
        monkeypatch.setattr(FedAL, "share_first_anchor", share)
        torch.manual_seed(0)
        algo = FedAL(_images(), POOL, config(tau=3), seed=0, use_al=True, use_lf=True)
        calls["n"] = 0
        algo.round(1)
        # 3 clients x 2 stages x tau 3 anchor forwards, less the first of each stage when shared
        assert calls["n"] == 3 * 2 * (3 - share)


def test_gradient_diagnostics_change_no_number_of_the_run(monkeypatch):
    """Figure 6's diagnostics (fedal.FedAL.enable_diagnostics) only add their columns: every other metric
    and the final weights equal the run without them, so Figure 6 reads the SVHN alpha = 2 FedAL run."""
    monkeypatch.setattr(FedAL, "share_first_anchor", True)

    def run(diagnostics: bool):
        torch.manual_seed(0)
        algo = FedAL(_images(), POOL, config(tau=3), seed=0)
        if diagnostics:
            algo.enable_diagnostics(every_rounds=1, batches=2)
        return algo, run_rounds(algo, 3)

    with_diag, rows_diag = run(True)
    without, rows = run(False)
    assert {c for c in rows_diag.columns if c not in rows.columns} == {
        "var_sigma_k",
        "var_sigma_l",
        "var_sigma_n",
        "var_sigma_rg",
        "var_sigma_rl",
        "var_sigma_u",
    }
    assert rows_diag[rows.columns].equals(rows)
    for a, b in zip(with_diag.clients, without.clients):
        for (name, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
            assert torch.equal(x, y), name


def test_figure_6_reads_the_svhn_alpha_2_fedal_run_of_tables_6_and_8():
    from pathlib import Path

    from fedrepro.experiments import fedal
    from fedrepro.plan import load_config

    repo = Path(__file__).resolve().parents[2]
    config = load_config([str(repo / "config.yaml"), str(repo / "configs" / "paper.yaml")])
    (fig6,) = fedal.output_runs(config, "fig6")
    table8 = next(r for r in fedal.output_runs(config, "table8") if r.method == "fedal")
    assert fig6.key == table8.key == ("svhn", "fedal", "svhn_wrn-a2-c20-p1000-i5000")
    assert fig6.spec == table8.spec and fig6.spec["diagnostics"] == {"every_rounds": 50, "batches": 32}
    assert not any(r.setting.endswith("-gv") for r in fedal.runs(config))  # no second run
