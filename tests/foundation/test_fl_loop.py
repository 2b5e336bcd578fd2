"""The shared round loop: checkpoint, exact resume after a kill, seeds, outputs."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from fedrepro.algorithms.baselines.fedavg import FedAvg
from fedrepro.fl import seeding
from fedrepro.fl.loop import Checkpoint, run_rounds
from fedrepro.fl.runner import run_seeds
from fedrepro.pipeline import claim_scratch, make_job
from tests.foundation.conftest import FEDAVG_SPEC


class Killed(Exception):
    pass


def build(blobs, clients, seed, kill_at=None):
    seeding.seed_everything(seed)
    algo = FedAvg(FEDAVG_SPEC, blobs, clients, seed, torch.device("cpu"))
    if kill_at is not None:
        original = algo.round

        def round_or_die(t):
            if t == kill_at:
                raise Killed
            return original(t)

        algo.round = round_or_die
    return algo


def test_resume_after_kill_gives_identical_metrics(tmp_path, blobs, clients):
    uninterrupted = run_rounds(build(blobs, clients, 3), 6)
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=1)
    with pytest.raises(Killed):
        run_rounds(build(blobs, clients, 3, kill_at=4), 6, checkpoint)
    assert torch.load(checkpoint.path, weights_only=False)["rounds_done"] == 3
    # a fresh process would re-seed and rebuild; the checkpoint must override all of it
    resumed = run_rounds(build(blobs, clients, 99), 6, checkpoint)
    pd.testing.assert_frame_equal(resumed, uninterrupted)


def test_checkpoint_every_k_rounds_resumes_from_last_saved(tmp_path, blobs, clients):
    uninterrupted = run_rounds(build(blobs, clients, 5), 6)
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=2)
    with pytest.raises(Killed):
        run_rounds(build(blobs, clients, 5, kill_at=6), 6, checkpoint)
    assert torch.load(checkpoint.path, weights_only=False)["rounds_done"] == 4
    pd.testing.assert_frame_equal(run_rounds(build(blobs, clients, 5), 6, checkpoint), uninterrupted)


def test_same_seed_same_numbers_different_seed_different(blobs, clients):
    a = run_rounds(build(blobs, clients, 7), 4)
    b = run_rounds(build(blobs, clients, 7), 4)
    c = run_rounds(build(blobs, clients, 8), 4)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["train_loss"], c["train_loss"])


def test_run_seeds_writes_outputs_and_reuses_finished_seeds(tmp_path, blobs, clients):
    job = make_job(FEDAVG_SPEC, {"metrics": str(tmp_path / "run/metrics.parquet"),
                                 "summary": str(tmp_path / "run/summary.json")},
                   seeds=[0, 1])
    calls = []

    def counting_build(seed):
        calls.append(seed)
        return FedAvg(FEDAVG_SPEC, blobs, clients, seed, torch.device("cpu"))

    metrics = run_seeds(job, counting_build, num_rounds=3)
    assert sorted(metrics["seed"].unique()) == [0, 1]
    assert list(metrics.columns[:2]) == ["seed", "round"] and len(metrics) == 6
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert set(summary["seeds"]) == {"0", "1"} and summary["spec"] == FEDAVG_SPEC
    assert summary["seeds"]["0"]["final"]["round"] == 3
    assert (tmp_path / "run/.checkpoint/seed0.parquet").exists()
    again = run_seeds(job, counting_build, num_rounds=3)
    assert calls == [0, 1], "finished seeds must not be recomputed"
    pd.testing.assert_frame_equal(again, metrics)


def fedavg_job(tmp_path, spec, inputs=None):
    folder = tmp_path / "run"
    return make_job(spec, {"metrics": str(folder / "metrics.parquet"), "summary": str(folder / "summary.json")},
                    input=inputs, seeds=[0])


def run_fedavg(job, blobs, clients):
    return run_seeds(job, lambda seed: FedAvg(job.spec, blobs, clients, seed, torch.device("cpu")), num_rounds=2)


def test_a_changed_setting_recomputes_instead_of_reusing_finished_seeds(tmp_path, blobs, clients):
    """Snakemake re-runs a job whose params changed but leaves its scratch folder: the seeds
    finished under the old setting must not be served as results of the new one."""
    run_fedavg(fedavg_job(tmp_path, FEDAVG_SPEC), blobs, clients)
    changed = {**FEDAVG_SPEC, "lr": 0.01}
    rerun = run_fedavg(fedavg_job(tmp_path, changed), blobs, clients)
    fresh = run_fedavg(fedavg_job(tmp_path / "fresh", changed), blobs, clients)
    pd.testing.assert_frame_equal(rerun, fresh)


def test_scratch_is_kept_for_the_same_job_and_emptied_when_an_input_changes(tmp_path):
    data = tmp_path / "arrays.npz"
    data.write_bytes(b"old")
    job = fedavg_job(tmp_path, FEDAVG_SPEC, inputs={"data": str(data), "code": [str(data)]})
    claim_scratch(job)
    (job.scratch / "seed0.pt").write_bytes(b"state")
    claim_scratch(job)
    assert (job.scratch / "seed0.pt").exists(), "a resumed job must keep its checkpoints"
    data.write_bytes(b"new content")
    claim_scratch(job)
    assert not (job.scratch / "seed0.pt").exists(), "an upstream change must not resume old state"
    assert (job.scratch / "fingerprint.json").exists()
