"""SteFFLe's training jobs: the runs of one data set and silo split in one process, each run exactly the job
it would be alone (its spec, inputs, outputs, scratch and cell store), so re-runs stay exact."""

import copy
import json

import pandas as pd
import pytest

from fedrepro.experiments import steffle as plan

from .helpers import pipeline_config, prepared_synthetic


def test_split_jobs_hold_every_run_once_and_only_runs_of_one_data_set_and_split():
    config = pipeline_config("quick")
    groups = plan.train_groups(config)
    runs = [r.key for group in groups.values() for r in group]
    assert sorted(runs) == sorted(r.key for r in plan.runs(config))  # each run in exactly one job
    for name, group in groups.items():
        assert len({(r.dataset, r.partition) for r in group}) == 1, name
        assert name.isidentifier()  # it names a Snakemake rule
    assert len(groups) < len(runs) / 4  # quick scale: 9 jobs for 43 runs (the refcode grid included)
    sound = next(g for g in groups.values() if any(r.method == "steffle_sound" for r in g))
    assert {r.method for r in sound} >= {"steffle", "steffle_sound", "steffle_nonprivate", "ling2024", "fedavg"}


def test_family_jobs_are_one_per_run_and_a_bad_value_names_the_key():
    config = pipeline_config("paper")  # paper scale: one job per run, so a cluster runs them side by side
    assert config["steffle"]["train_jobs"] == "family"
    groups = plan.train_groups(config)
    assert all(len(g) == 1 for g in groups.values()) and len(groups) == len(plan.runs(config))
    bad = copy.deepcopy(config)
    bad["steffle"]["train_jobs"] = "panel"
    with pytest.raises(ValueError, match="steffle.train_jobs.*allowed: split, family"):
        plan.train_groups(bad)


def test_group_spec_names_each_runs_own_code_input():
    group = plan.train_groups(pipeline_config("quick"))["credit_central"]
    spec = plan.group_spec(group)
    assert [r["method"] for r in spec["runs"]] == [r.method for r in group]
    codes = {r["method"]: r["code"] for r in spec["runs"]}
    assert codes["dp_fermi"] == codes["fermi"] == "code_sgda" and codes["tran2021"] == "code_tran2021"


def _group_job(tmp_path, data, part, specs, code):
    """A training job of `specs` (method -> run spec) on one split, its code inputs the files `code`."""
    from fedrepro.pipeline import make_job

    runs = [{"method": m, "setting": "dp_N3_h0.75", "spec": s, "code": f"code_{m}"} for m, s in specs.items()]
    outputs = {}
    for i, run in enumerate(runs):
        folder = tmp_path / "steffle" / "runs" / "synthetic_tabular" / run["method"] / run["setting"] / "s0_1"
        outputs |= {f"metrics_{i}": str(folder / "metrics.parquet"), f"summary_{i}": str(folder / "summary.json")}
    inputs = {"data": str(data), "partition": str(part), "code": sorted({p for v in code.values() for p in v})}
    inputs |= {f"code_{m}": code[m] for m in specs}
    return make_job({"runs": runs}, outputs, inputs, seeds=[0, 1])


def _spec(method, **train):
    return {
        "method": method,
        "fairness": "dp",
        "num_silos": 3,
        "h": 0.75,
        "epsilons": [3],
        "lambdas": [0.0, 1.0],
        "train": {"batch": 64, "epochs": 1, "eval_every": 1, **train},
    }


def _cells(job, i):
    summary = json.loads((job.out(f"summary_{i}")).read_text())
    return summary["cells_trained"], summary["cells_cached"]


def test_a_training_job_trains_each_run_as_alone_and_a_changed_setting_retrains_only_its_cells(tmp_path):
    from fedrepro.algorithms.steffle import jobs
    from fedrepro.pipeline import make_job

    data, part = prepared_synthetic(tmp_path)
    code = {m: [str(tmp_path / f"{m}.sha256")] for m in ("steffle", "fedavg")}
    for paths in code.values():
        (tmp_path / paths[0].rsplit("/", 1)[-1]).write_text("v1")
    sgda = {"eta_w": 1.0, "clip": 2.0, "radius": 2.0}
    specs = {"steffle": _spec("steffle", **sgda), "fedavg": {**_spec("fedavg", **sgda), "lambdas": [0.0]}}
    job = _group_job(tmp_path / "group", data, part, specs, code)
    jobs.run_group(job)
    assert [_cells(job, i) for i in (0, 1)] == [(2, 0), (1, 0)]
    # run 0 alone, in a folder of its own: the same numbers, and the same cell state as inside the job
    alone_out = tmp_path / "alone" / "metrics.parquet"
    alone = make_job(
        specs["steffle"],
        {"metrics": str(alone_out), "summary": str(alone_out.with_name("summary.json"))},
        {"data": str(data), "partition": str(part), "code": code["steffle"]},
        seeds=[0, 1],
    )
    jobs.run_job(alone)
    inside = jobs.run_job_of(job, 0)
    assert jobs.cell_state(inside, (3, 1.0)) == jobs.cell_state(alone, (3, 1.0))
    pd.testing.assert_frame_equal(pd.read_parquet(alone_out), pd.read_parquet(job.output["metrics_0"]))
    # a changed setting of fedavg (the job's spec changes, so Snakemake re-runs it): steffle's cells are reused
    specs["fedavg"]["train"]["eta_theta"] = 0.1
    again = _group_job(tmp_path / "group", data, part, specs, code)
    jobs.run_group(again)
    assert [_cells(again, i) for i in (0, 1)] == [(0, 2), (1, 0)]
    pd.testing.assert_frame_equal(pd.read_parquet(alone_out), pd.read_parquet(again.output["metrics_0"]))
    # changed code of steffle's module only: steffle retrains, fedavg is reused
    (tmp_path / "steffle.sha256").write_text("v2")
    jobs.run_group(_group_job(tmp_path / "group", data, part, specs, code))
    assert [_cells(again, i) for i in (0, 1)] == [(2, 0), (0, 1)]
