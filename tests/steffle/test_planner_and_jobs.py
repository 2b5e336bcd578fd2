"""Planner (pure Python), one tiny end-to-end job per method family, and the report helpers."""

import copy
import json

import numpy as np
import pandas as pd
import pytest

from fedrepro.experiments import steffle as plan
from fedrepro.report import steffle as report
from tests.foundation.conftest import Killed

from .helpers import pipeline_config, prepared_synthetic


def _config():
    return pipeline_config("quick")


def test_plan_families_and_specs():
    cfg = _config()
    runs = plan.runs(cfg)
    keys = [r.key for r in runs]
    assert len(keys) == len(set(keys))
    by_key = {r.key: r for r in runs}
    st = by_key[("adult", "steffle", "dp_N3_h0")]
    assert st.spec["epsilons"] == [1, 3, 9] and st.partition == "age-c3-h0-s100"
    assert by_key[("credit", "fermi", "dp_central")].spec["epsilons"] == ["inf"]
    assert by_key[("credit", "erm", "central")].spec["lambdas"] == [0.0]
    assert "clip_primal" in by_key[("credit", "tran2021", "dp_central")].spec["train"]
    assert "clip_primal" not in st.spec["train"]
    # the paper-eta_w variant differs only in eta_w (a fixed step, as the paper's)
    paper = by_key[("credit", "steffle", "dp_N3_h0_wpaper")]
    tuned = by_key[("credit", "steffle", "dp_N3_h0")]
    assert paper.spec["train"]["eta_w"] == 1e-5 and paper.spec["train"]["w_step"] == "fixed"
    assert tuned.spec["train"]["w_step"] == "capped"
    assert {k: v for k, v in paper.spec["train"].items() if k not in ("eta_w", "w_step")} == {
        k: v for k, v in tuned.spec["train"].items() if k not in ("eta_w", "w_step")
    }
    # the authors' grid under compat_refcode: planned, but outside the default report
    refcode = [r for r in runs if r.setting.endswith("_refcode")]
    assert {r.setting for r in refcode} == {"dp_N3_h0_refcode", "dp_N3_h0.75_refcode"}
    for r in refcode:
        assert r.spec["epsilons"] == [1, 3, "inf"] and r.spec["lambdas"] == [0.0, 0.5, 1.0, 2.0]
        assert r.spec["train"]["compat_refcode"] and r.spec["train"]["epochs"] == 60
        # the authors' lipschitz_theta = C = 1, not the quick grid's 2.0 / 2.0 (4x their theta noise)
        assert r.spec["train"]["clip"] == r.spec["train"]["radius"] == 1.0
    assert not any(r.setting.endswith("_refcode") for r in plan.main_runs(cfg))
    assert not any(r.setting.endswith("_refcode") for fig in plan.figure_runs(cfg).values() for r in fig)
    # N = 1 runs share one family whatever h is (fig 2 panels c, d)
    assert ("credit", "steffle", "dp_N1_h0") in by_key and ("credit", "steffle", "dp_N1_h0.75") not in by_key


def test_changing_a_baseline_setting_touches_only_its_runs():
    cfg = _config()
    before = {r.key: r.spec for r in plan.runs(cfg)}
    cfg2 = copy.deepcopy(cfg)
    cfg2["steffle"]["baselines"]["ling2024"]["dp_norm"] = 3.0
    after = {r.key: r.spec for r in plan.runs(cfg2)}
    changed = {k for k in before if before[k] != after[k]}
    assert changed and all(k[1] == "ling2024" for k in changed)


def test_figures_and_checks():
    cfg = _config()
    assert plan.figures(cfg) == ["fig1", "fig2", "fig3", "fig5"]  # fig4 disabled offline
    assert "fig4" in plan.report_spec(cfg)["disabled_figures"]
    assert plan.check(cfg) == []
    bad = copy.deepcopy(cfg)
    bad["steffle"]["figures"]["fig1"]["methods"] = ["steffle", "nope"]
    assert any("nope" in e for e in plan.check(bad))
    by_figure = plan.figure_runs(cfg)
    assert plan.runs_of_figure(by_figure, "fig2") == by_figure["fig2"]
    with pytest.raises(ValueError, match="steffle.figures.fig4.enabled: true"):
        plan.runs_of_figure(by_figure, "fig4")


def test_envelope_reduction_by_hand():
    ours = (np.array([0.2, 0.3]), np.array([0.05, 0.01]))
    base = (np.array([0.2, 0.3]), np.array([0.10, 0.04]))
    grid = report.common_grid(ours, base)
    assert grid[0] == pytest.approx(0.2) and grid[-1] == pytest.approx(0.3)
    # envelope: 0.05 until error 0.3, then 0.01 (same shape for the baseline)
    expected = 1 - (49 * 0.05 + 0.01) / (49 * 0.10 + 0.04)
    assert report.reduction(ours, base) == pytest.approx(expected)
    assert report.reduction(base, base) == pytest.approx(0.0)


@pytest.mark.parametrize("method", ["steffle", "tran2021", "ling2024", "fedavg"])
def test_job_end_to_end(tmp_path, method):
    from fedrepro.algorithms.steffle import jobs
    from fedrepro.pipeline import make_job

    data, part = prepared_synthetic(tmp_path)
    train = {"batch": 64, "epochs": 2, "eval_every": 1}
    if method in ("steffle", "fedavg"):
        train.update({"eta_w": 1.0, "clip": 2.0, "radius": 2.0})
    epsilons = [3] if method == "ling2024" else [1, 3]  # each calibration costs library calls
    spec = {
        "method": method,
        "fairness": "dp",
        "num_silos": 3,
        "h": 0.75,
        "epsilons": epsilons,
        "lambdas": [0.0, 1.0],
        "train": train,
        "checkpoint_every": 1,
    }
    out = tmp_path / "steffle" / "runs" / "synthetic_tabular" / method / "dp_N3_h0.75" / "s0_1"
    job = make_job(
        spec,
        {"metrics": str(out / "metrics.parquet"), "summary": str(out / "summary.json")},
        {"data": str(data), "partition": str(part)},
        seeds=[0, 1],
    )
    jobs.run_job(job)
    metrics = pd.read_parquet(out / "metrics.parquet")
    final = metrics[metrics["kind"] == "final"]
    settings = 1 if method == "fedavg" else 2 * len(epsilons)
    assert len(final) == 2 * settings and final["error"].between(0, 1).all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] > 0 and summary["spec"] == spec
    per_eps = summary["privacy"]["per_eps"]
    if method == "fedavg":
        assert list(per_eps) == ["inf"]
    else:
        assert set(per_eps) == {str(e) for e in epsilons}
        assert 0 < per_eps["3"]["library_epsilon"] <= 3.0 + 1e-6 or method == "steffle"
    assert (out / ".checkpoint" / "state.pt").exists()
    # the report reads it back
    points = report.load_points([str(out / "metrics.parquet")])
    assert set(points["method"]) == {method} and len(points) == len(final)
    assert (points["num_silos"] == 3).all() and np.isclose(points["h"], 0.75).all()


def test_registry_rejects_an_unknown_method():
    from fedrepro.algorithms.steffle import jobs

    with pytest.raises(KeyError, match="allowed values"):
        jobs.build({"method": "bogus"}, None, [0])


def test_checkpoint_every_is_in_no_spec():
    """The top-level key reaches the job's process, not its spec: changing it re-runs nothing."""
    cfg = _config()
    before = [r.spec for r in plan.runs(cfg)]
    cfg["checkpoint_every"] = 7
    assert [r.spec for r in plan.runs(cfg)] == before
    assert not [spec for spec in before if "checkpoint_every" in spec]
    assert "checkpoint_every" not in cfg["steffle"]


def test_adding_a_lambda_trains_only_the_new_cells(tmp_path, caplog):
    """The cell cache: a job whose grid grows by one lambda trains only the new (eps, lambda) cells,
    and the cached cells keep their numbers; a torn cell file is trained again."""
    from fedrepro.algorithms.steffle import jobs
    from fedrepro.pipeline import make_job

    data, part = prepared_synthetic(tmp_path)
    out = tmp_path / "steffle" / "runs" / "synthetic_tabular" / "steffle" / "dp_N3_h0.75" / "s0_1"
    outputs = {"metrics": str(out / "metrics.parquet"), "summary": str(out / "summary.json")}
    base = {
        "method": "steffle",
        "fairness": "dp",
        "num_silos": 3,
        "h": 0.75,
        "epsilons": [3],
        "train": {"batch": 64, "epochs": 2, "eval_every": 1, "eta_w": 1.0, "clip": 2.0, "radius": 2.0},
        "checkpoint_every": 1,
    }

    def run(lambdas):
        job = make_job({**base, "lambdas": lambdas}, outputs, {"data": str(data), "partition": str(part)}, seeds=[0, 1])
        jobs.run_job(job)
        summary = json.loads((out / "summary.json").read_text())
        return pd.read_parquet(out / "metrics.parquet"), summary

    first, s1 = run([0.0, 1.0])
    assert (s1["cells_trained"], s1["cells_cached"]) == (2, 0)
    grown, s2 = run([0.0, 1.0, 2.0])
    assert (s2["cells_trained"], s2["cells_cached"]) == (1, 2)
    assert set(grown["lam"]) == {0.0, 1.0, 2.0}
    old = grown[grown["lam"].isin([0.0, 1.0])].reset_index(drop=True)
    pd.testing.assert_frame_equal(old, first.reset_index(drop=True))
    alone, _ = run([2.0])  # cached: the same numbers as trained alone
    pd.testing.assert_frame_equal(alone.reset_index(drop=True), grown[grown["lam"] == 2.0].reset_index(drop=True))
    for path in (out / ".cells").rglob("metrics.parquet"):  # torn stored cells are trained again
        path.write_bytes(b"torn")
    again, s3 = run([0.0, 1.0, 2.0])
    assert (s3["cells_trained"], s3["cells_cached"]) == (3, 0)
    pd.testing.assert_frame_equal(again.reset_index(drop=True), grown.reset_index(drop=True), atol=1e-6)
    assert all(v["status"] == "ok" for v in s3["seeds"].values())


def test_a_job_checkpoints_every_checkpoint_every_epochs(tmp_path, monkeypatch):
    """The job's checkpoint_every (epochs; from the config: fedrepro.options.EVERY_ENV) reaches fl.loop's
    Checkpoint; the last epoch is always saved."""
    from fedrepro.algorithms.steffle import jobs
    from fedrepro.fl.loop import Checkpoint
    from fedrepro.options import EVERY_ENV
    from fedrepro.pipeline import make_job

    saved = []
    monkeypatch.setattr(Checkpoint, "save", lambda self, algorithm, done, rows: saved.append(done))
    monkeypatch.setenv(EVERY_ENV, "2")
    data, part = prepared_synthetic(tmp_path)
    spec = {
        "method": "fedavg",
        "fairness": "dp",
        "num_silos": 3,
        "h": 0.75,
        "epsilons": ["inf"],
        "lambdas": [0.0],
        "train": {"batch": 64, "epochs": 5, "eval_every": 5},
    }
    out = tmp_path / "steffle" / "runs" / "synthetic_tabular" / "fedavg" / "N3_h0.75" / "s0_1"
    job = make_job(
        spec,
        {"metrics": str(out / "metrics.parquet"), "summary": str(out / "summary.json")},
        {"data": str(data), "partition": str(part)},
        seeds=[0, 1],
    )
    jobs.run_job(job)
    assert saved == [2, 4, 5]


def test_a_killed_job_resumes_from_its_checkpoint_to_the_same_numbers(tmp_path, monkeypatch):
    from fedrepro.algorithms.steffle import jobs
    from fedrepro.algorithms.steffle.base import GridTrainer
    from fedrepro.pipeline import make_job

    data, part = prepared_synthetic(tmp_path)
    spec = {
        "method": "steffle",
        "fairness": "dp",
        "num_silos": 3,
        "h": 0.75,
        "epsilons": [3],
        "lambdas": [0.0, 1.0],
        "train": {"batch": 64, "epochs": 3, "eval_every": 1, "eta_w": 1.0, "clip": 2.0, "radius": 2.0},
        "checkpoint_every": 1,
    }

    def run(folder):
        out = tmp_path / folder / "steffle" / "runs" / "synthetic_tabular" / "steffle" / "dp_N3_h0.75" / "s0_1"
        job = make_job(
            spec,
            {"metrics": str(out / "metrics.parquet"), "summary": str(out / "summary.json")},
            {"data": str(data), "partition": str(part)},
            seeds=[0, 1],
        )
        jobs.run_job(job)
        return pd.read_parquet(out / "metrics.parquet")

    whole = run("whole")
    run_epoch, epochs_run = GridTrainer.round, []

    def round_or_die(self, t):
        if t == 3 and "restart" not in epochs_run:
            raise Killed
        epochs_run.append(t)
        return run_epoch(self, t)

    monkeypatch.setattr(GridTrainer, "round", round_or_die)
    with pytest.raises(Killed):
        run("killed")
    epochs_run.append("restart")
    pd.testing.assert_frame_equal(run("killed"), whole)
    assert epochs_run == [1, 2, "restart", 3]  # only the epoch after the last checkpoint ran again
