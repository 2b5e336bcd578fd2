"""DPZV planner: runs, per-method specs, figure inputs, config checks (pure Python)."""

import copy
from pathlib import Path

import pytest
import yaml

from fedrepro.experiments import dpzv as plan

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def config():
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    part = yaml.safe_load((ROOT / "configs/parts/dpzv.quick.yaml").read_text())
    cfg["dpzv"] = part["dpzv"]
    return cfg


def test_every_figure_variant_is_planned(config):
    runs = plan.runs(config)
    digits_dpzv = [r for r in runs if r.dataset == "digits" and r.method == "dpzv"]
    variants = {(v["eps"], v["clip"]) for r in digits_dpzv for v in r.spec["variants"]}
    assert ("inf", "inf") in variants and ("inf", 10) in variants          # Figure 4
    assert {(1.0, c) for c in (10, 50, 100, 500)} <= variants               # Figure 5
    assert {(e, 10) for e in (0.1, 0.5, 1.0, 5.0, 10.0)} <= variants        # Figure 3
    vafl = [v for r in runs if r.dataset == "digits" and r.method == "vafl" for v in r.spec["variants"]]
    assert all("clip" not in v for v in vafl) and len(vafl) == 6


def test_spec_holds_only_the_methods_keys(config):
    runs = {(r.dataset, r.method): r for r in plan.runs(config)}
    assert "clip_mode" in runs[("digits", "dpzv")].spec and "clip_mode" not in runs[("digits", "vafl")].spec
    assert "zoo_pair_release" in runs[("digits", "zoo_vfl")].spec
    assert "zoo_pair_release" not in runs[("digits", "vfl_czofo")].spec
    changed = copy.deepcopy(config)
    changed["dpzv"]["shared"]["zoo_pair_release"] = "separate"
    before = {r.key: r.spec for r in plan.runs(config)}
    after = {r.key: r.spec for r in plan.runs(changed)}
    differs = {key[1] for key in before if before[key] != after[key]}
    assert differs == {"zoo_vfl"}


def test_variants_per_job_splits_runs(config):
    config["dpzv"]["variants_per_job"] = 1
    runs = plan.runs(config)
    assert all(len(r.spec["variants"]) == 1 for r in runs)
    assert len({r.key for r in runs}) == len(runs)
    assert any(r.setting == "epsinf-Cinf" for r in runs)


def test_figure_inputs(config):
    runs = plan.runs(config)
    figs = plan.figure_runs(config, runs)
    assert {r.method for r in figs["fig4"]} == {"dpzv"}
    assert {r.dataset for r in figs["fig2"]} == {"digits", "synthetic_multiview"}
    assert {r.dataset for r in figs["fig3"]} == {"digits", "synthetic_multiview", "synthetic_text"}


def test_memory_spec_has_both_zo_momentum_settings(config):
    spec = plan.memory_spec(config, "synthetic_multiview")
    labels = [e["label"] for e in spec["entries"]]
    assert "DPZV (ZO momentum 0)" in labels and "DPZV (ZO momentum 0.9)" in labels and "VAFL" in labels
    assert all(e["options"]["client_model"] == "vfl_resnet18" for e in spec["entries"])


def test_check_reports_missing_learning_rates_and_datasets(config):
    assert plan.check(config) == []
    del config["dpzv"]["datasets"]["digits"]["lr"]["vafl"]
    config["dpzv"]["figures"]["fig3"].append("mnist")
    errors = plan.check(config)
    assert any("digits.lr lacks vafl" in e for e in errors)
    assert any("'mnist'" in e for e in errors)
