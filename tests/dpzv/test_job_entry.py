"""The VFL job entry: which data split, device and variant columns a job's outputs come from."""

import json
import math

import numpy as np
import pandas as pd
import torch

from fedrepro.algorithms.dpzv.base import build_vfl_data
from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.jobs import load_job_data, run_vfl_job
from fedrepro.algorithms.dpzv.vafl import VAFL
from fedrepro.data.partition import load_partition
from fedrepro.pipeline import make_job
from tests.dpzv.test_jobs import prepared, spec  # noqa: F401  (fixture and spec of the job tests)


def job_for(prepared, tmp_path, method="dpzv", variants=({"eps": "inf"},), **changes):  # noqa: F811
    out = tmp_path / f"dpzv/runs/tiny/{method}/x/s0"
    return make_job(
        {**spec(method, list(variants)), **changes},
        {"metrics": str(out / "metrics.parquet"), "summary": str(out / "summary.json")},
        input=prepared,
        seeds=[0],
    )


def reference_data(prepared, **split):  # noqa: F811
    arrays = np.load(prepared["data"])
    part = load_partition(prepared["partition"])
    return build_vfl_data(
        arrays["x_train"],
        arrays["y_train"],
        arrays["x_test"],
        arrays["y_test"],
        part.features,
        part.feature_shapes,
        3,
        "image",
        **split,
    )


def same(a, b):
    return (
        all(torch.equal(x, y) for x, y in zip(a.train + a.val, b.train + b.val))
        and torch.equal(a.y_train, b.y_train)
        and torch.equal(a.y_val, b.y_val)
    )


def test_job_data_follow_the_specs_split_seed_and_fraction(prepared, tmp_path):  # noqa: F811
    data = load_job_data(job_for(prepared, tmp_path, val_fraction=0.25, split_seed=7), torch.device("cpu"))
    assert same(data, reference_data(prepared, val_fraction=0.25, split_seed=7))
    assert not same(data, reference_data(prepared, val_fraction=0.25, split_seed=0))
    assert data.y_val.shape[0] == 20 and data.num_train == 60  # 25 % of the 80 training samples


def test_job_data_validate_on_the_test_set_when_asked(prepared, tmp_path):  # noqa: F811
    data = load_job_data(job_for(prepared, tmp_path, val="test"), torch.device("cpu"))
    assert data.num_train == 80 and torch.equal(data.y_val, data.y_test)
    assert all(torch.equal(v, t) for v, t in zip(data.val, data.test))


def test_job_data_default_split_is_a_seed_0_holdout_of_ten_percent(prepared, tmp_path):  # noqa: F811
    job = job_for(prepared, tmp_path)
    for key in ("val", "val_fraction"):
        job.spec.pop(key)
    assert same(load_job_data(job, torch.device("cpu")), reference_data(prepared))


def test_job_outputs_carry_each_variants_eps_clip_and_the_spec(prepared, tmp_path):  # noqa: F811
    job = job_for(prepared, tmp_path, variants=[{"eps": 1.0, "clip": 10}, {"eps": "inf", "clip": "inf"}])
    run_vfl_job(job, DPZV)
    metrics = pd.read_parquet(job.out("metrics"))
    by_variant = metrics.groupby("variant")[["eps", "clip"]].first()
    assert by_variant.loc["eps1-C10"].tolist() == [1.0, 10.0]
    assert np.isinf(by_variant.loc["epsinf-Cinf"]).all()
    summary = json.loads(job.out("summary").read_text())
    assert summary["spec"] == job.spec
    assert summary["variants"]["eps1-C10"]["eps"] == 1.0 and summary["variants"]["eps1-C10"]["clip"] == 10.0
    assert math.isinf(summary["variants"]["epsinf-Cinf"]["eps"]) and math.isinf(
        summary["variants"]["epsinf-Cinf"]["clip"]
    )


def test_baseline_variants_have_no_clip(prepared, tmp_path):  # noqa: F811
    job = job_for(prepared, tmp_path, method="vafl", variants=[{"eps": 2.0}], epochs=1, evals_per_epoch=1)
    run_vfl_job(job, VAFL)
    metrics = pd.read_parquet(job.out("metrics"))
    assert set(metrics["variant"]) == {"eps2"} and (metrics["eps"] == 2.0).all() and metrics["clip"].isna().all()
    assert math.isnan(json.loads(job.out("summary").read_text())["variants"]["eps2"]["clip"])


def test_job_builds_every_run_on_the_device_it_picked(prepared, tmp_path, monkeypatch):  # noqa: F811
    import fedrepro.algorithms.dpzv.jobs as jobs

    picked = torch.device("cpu")
    monkeypatch.setattr(jobs, "pick_device", lambda name: picked if name == "cpu" else None)
    devices = []

    class Recorded(DPZV):
        def __init__(self, data, settings, seed, device="not given"):
            devices.append(device)
            super().__init__(data, settings, seed, "cpu")

    run_vfl_job(job_for(prepared, tmp_path, epochs=1, evals_per_epoch=1), Recorded)
    assert devices and all(d is picked for d in devices)
