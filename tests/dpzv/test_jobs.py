"""End to end: a DPZV job built by hand (make_job), its outputs, and the report reading them."""

import json

import numpy as np
import pandas as pd
import pytest

from fedrepro.algorithms import methods
from fedrepro.data.partition import make_partition, save_partition
from fedrepro.pipeline import make_job
from fedrepro.registry import resolve
from tests.dpzv.conftest import tiny_images

ENTRIES = methods("dpzv")


@pytest.fixture()
def prepared(tmp_path):
    x_tr, y_tr, x_te, y_te = tiny_images(n_train=80, n_test=24)
    folder = tmp_path / "data"
    folder.mkdir()
    np.savez(folder / "arrays.npz", x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te)
    (folder / "meta.json").write_text(json.dumps({"kind": "image", "num_classes": 3}))
    part = make_partition("vertical", {"x_train": x_tr}, split="rows", clients=2)
    save_partition(part, tmp_path / "part.npz")
    return {"data": str(folder / "arrays.npz"), "partition": str(tmp_path / "part.npz")}


def spec(method, variants):
    return {
        "dataset": "tiny",
        "method": method,
        "batch_size": 8,
        "epochs": 1,
        "evals_per_epoch": 2,
        "client_model": "vfl_mnist_cnn",
        "client_kwargs": {"pool": [2, 2], "width": 4},
        "embed_dim": 4,
        "server_hidden": 8,
        "lr_server": 0.05,
        "lr_client": 5e-4,
        "delta": 1e-3,
        "device": "cpu",
        "val": "holdout",
        "val_fraction": 0.2,
        "zo_momentum": 0.9,
        "server_update": "sgd",
        "embed_clip": 10.0,
        "momentum": 0.9,
        "variants": variants,
    }


def test_dpzv_job_writes_metrics_and_summary_per_variant(prepared, tmp_path):
    out = tmp_path / "dpzv/runs/tiny/dpzv/x/s0_1"
    job = make_job(
        spec("dpzv", [{"eps": 1.0, "clip": 10}, {"eps": "inf", "clip": "inf"}]),
        {"metrics": str(out / "metrics.parquet"), "summary": str(out / "summary.json")},
        input=prepared,
        seeds=[0, 1],
    )
    resolve(ENTRIES["dpzv"])(job)
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert set(metrics["variant"]) == {"eps1-C10", "epsinf-Cinf"}
    assert set(metrics["seed"]) == {0, 1} and len(metrics) == 2 * 2 * 2  # variants x seeds x evals
    assert {"test_acc", "val_acc", "test_loss", "server_round", "clip_fraction"} <= set(metrics.columns)
    summary = json.loads((out / "summary.json").read_text())
    private = summary["variants"]["eps1-C10"]["seeds"]["0"]
    assert private["privacy"]["sigma"] > 0 and private["best"]["test_acc"] >= 0
    assert summary["variants"]["epsinf-Cinf"]["seeds"]["1"]["privacy"]["sigma"] == 0

    from fedrepro.report.dpzv import load_best

    best = load_best([str(out / "summary.json")])
    assert len(best) == 4 and best["eps_library"].notna().all()


def test_all_four_methods_run_as_jobs(prepared, tmp_path):
    for method in ENTRIES:
        out = tmp_path / f"dpzv/runs/tiny/{method}/x/s0"
        job = make_job(
            spec(method, [{"eps": 1.0}]),
            {"metrics": str(out / "m.parquet"), "summary": str(out / "s.json")},
            input=prepared,
            seeds=[0],
        )
        resolve(ENTRIES[method])(job)
        assert pd.read_parquet(out / "m.parquet")["test_acc"].notna().all()


def test_adding_one_eps_runs_only_the_new_variant(prepared, tmp_path, monkeypatch):
    """Issue 15 item 4: quick scale batches variants, so a new eps renames the job; the finished
    variants come from the (data set, method) cells and only the new one trains."""
    import fedrepro.algorithms.dpzv.jobs as jobs

    trained = []
    real = jobs.run_seeds
    monkeypatch.setattr(jobs, "run_seeds", lambda sub, *a, **k: trained.append(sub.scratch.name) or real(sub, *a, **k))

    def run(setting, variants, **changes):
        out = tmp_path / f"dpzv/runs/tiny/dpzv/{setting}/s0"
        job = make_job(
            {**spec("dpzv", variants), **changes},
            {"metrics": str(out / "metrics.parquet"), "summary": str(out / "summary.json")},
            input=prepared,
            seeds=[0],
        )
        resolve(ENTRIES["dpzv"])(job)
        return json.loads((out / "summary.json").read_text())

    first = run("a", [{"eps": 1.0, "clip": 10}, {"eps": "inf", "clip": 10}])
    assert trained == ["eps1-C10", "epsinf-C10"]
    second = run("b", [{"eps": 0.5, "clip": 10}, {"eps": 1.0, "clip": 10}, {"eps": "inf", "clip": 10}])
    assert trained[2:] == ["eps0.5-C10"]
    assert second["variants"]["eps1-C10"] == first["variants"]["eps1-C10"]
    run("c", [{"eps": 1.0, "clip": 10}], lr_client=1e-3)  # a changed setting retrains
    assert trained[3:] == ["eps1-C10"]


def test_checkpoint_every_counts_loop_rounds(prepared, tmp_path, monkeypatch):
    """`checkpoint_every` counts rounds of the shared loop (here an evaluation period: half an epoch),
    as for every paper; it is not scaled by evals_per_epoch."""
    from fedrepro.fl.loop import Checkpoint
    from fedrepro.options import EVERY_ENV

    seen = []
    real = Checkpoint.save
    monkeypatch.setattr(Checkpoint, "save", lambda self, *a: seen.append(self.every) or real(self, *a))
    monkeypatch.setenv(EVERY_ENV, "3")  # the config's checkpoint_every, handed to the job's process
    out = tmp_path / "dpzv/runs/tiny/vafl/x/s0"
    job = make_job(
        spec("vafl", [{"eps": "inf"}]),
        {"metrics": str(out / "metrics.parquet"), "summary": str(out / "summary.json")},
        input=prepared,
        seeds=[0],
    )
    resolve(ENTRIES["vafl"])(job)
    assert job.spec["evals_per_epoch"] == 2 and set(seen) == {3}


def test_each_table_entry_runs_the_algorithm_of_its_method():
    """Figure 6's memory job builds the class the training entry runs (`ALGORITHM` of the entry's module)."""
    from fedrepro.algorithms.dpzv.memory import algorithm_class

    for method in ENTRIES:
        assert algorithm_class(method).method == method
