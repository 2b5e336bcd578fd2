"""The shared round loop: checkpoint, exact resume after a kill, seeds, outputs."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from fedrepro.algorithms.fedavg.fedavg import FedAvg
from fedrepro.fl import loop, seeding
from fedrepro.fl.loop import Checkpoint, run_rounds
from fedrepro.fl.runner import run_seeds, seed_slot
from fedrepro.pipeline import claim_scratch, make_job
from tests.foundation.conftest import FEDAVG_SPEC, Killed, killed_at, saved_rounds


def build(blobs, clients, seed, kill_at=None):
    seeding.seed_everything(seed)
    algo = FedAvg(FEDAVG_SPEC, blobs, clients, seed, torch.device("cpu"))
    return algo if kill_at is None else killed_at(algo, kill_at)


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


def test_an_unreadable_checkpoint_is_dropped_and_the_run_starts_over(tmp_path, blobs, clients, caplog):
    uninterrupted = run_rounds(build(blobs, clients, 4), 3)
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=1)
    checkpoint.path.write_bytes(b"not a checkpoint")
    with caplog.at_level("WARNING"):
        pd.testing.assert_frame_equal(run_rounds(build(blobs, clients, 4), 3, checkpoint), uninterrupted)
    assert "ckpt.pt is unreadable" in caplog.text
    assert torch.load(checkpoint.path, weights_only=False)["rounds_done"] == 3


def test_same_seed_same_numbers_different_seed_different(blobs, clients):
    a = run_rounds(build(blobs, clients, 7), 4)
    b = run_rounds(build(blobs, clients, 7), 4)
    c = run_rounds(build(blobs, clients, 8), 4)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["train_loss"], c["train_loss"])


def test_run_seeds_writes_outputs_and_reuses_finished_seeds(tmp_path, blobs, clients):
    job = make_job(
        FEDAVG_SPEC,
        {"metrics": str(tmp_path / "run/metrics.parquet"), "summary": str(tmp_path / "run/summary.json")},
        seeds=[0, 1],
    )
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
    store, slot, state = seed_slot(job, 0)
    assert (store.entry(slot, state) / "metrics.parquet").exists()
    again = run_seeds(job, counting_build, num_rounds=3)
    assert calls == [0, 1], "finished seeds must not be recomputed"
    pd.testing.assert_frame_equal(again, metrics)


def fedavg_job(tmp_path, spec, inputs=None):
    folder = tmp_path / "run"
    return make_job(
        spec,
        {"metrics": str(folder / "metrics.parquet"), "summary": str(folder / "summary.json")},
        input=inputs,
        seeds=[0],
    )


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


class FakeClock:
    """Wall time that advances by `step` minutes per training round (see `timed`)."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, 60.0 * step

    def __call__(self) -> float:
        return self.now


def timed(algo, clock):
    original = algo.round

    def round_and_tick(t):
        clock.now += clock.step
        return original(t)

    algo.round = round_and_tick
    return algo


def test_wall_time_policy_saves_at_most_every_minutes_and_always_the_last_round(tmp_path, blobs, clients, monkeypatch):
    clock = FakeClock(step=4)  # 4 minutes per round, checkpoint at most every 10 minutes
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=1, minutes=10, clock=clock)
    rounds = saved_rounds(monkeypatch)
    run_rounds(timed(build(blobs, clients, 2), clock), 7, checkpoint)
    assert rounds == [3, 6, 7]  # 12 and 24 minutes after the last write, then the last round
    assert checkpoint.saves == 3 and checkpoint.bytes_written > 3 * 1000
    assert list(tmp_path.iterdir()) == [checkpoint.path], "no temporary file may be left behind"


def test_wall_time_checkpoint_resumes_bit_identically_after_a_kill(tmp_path, blobs, clients):
    uninterrupted = run_rounds(build(blobs, clients, 4), 7)
    clock = FakeClock(step=4)
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", minutes=10, clock=clock)
    with pytest.raises(Killed):
        run_rounds(timed(build(blobs, clients, 4, kill_at=5), clock), 7, checkpoint)
    assert torch.load(checkpoint.path, weights_only=False)["rounds_done"] == 3
    resumed = run_rounds(build(blobs, clients, 99), 7, Checkpoint(checkpoint.path, minutes=10, clock=clock))
    pd.testing.assert_frame_equal(resumed, uninterrupted)


def test_checkpoint_minutes_comes_from_the_job_environment_and_is_validated(monkeypatch, tmp_path):
    monkeypatch.delenv(loop.MINUTES_ENV, raising=False)
    assert Checkpoint(tmp_path / "a.pt").minutes is None  # quick scale: every `every` rounds
    monkeypatch.setenv(loop.MINUTES_ENV, "10")
    assert Checkpoint(tmp_path / "a.pt").minutes == 10.0
    monkeypatch.setenv(loop.MINUTES_ENV, "0")
    assert Checkpoint(tmp_path / "a.pt").minutes is None
    monkeypatch.setenv(loop.MINUTES_ENV, "often")
    with pytest.raises(ValueError, match="checkpoint_minutes"):
        Checkpoint(tmp_path / "a.pt")


def test_a_failed_save_keeps_the_previous_checkpoint_and_leaves_no_temporary_file(
    tmp_path, blobs, clients, monkeypatch
):
    checkpoint = Checkpoint(tmp_path / "ckpt.pt")
    algo = build(blobs, clients, 1)
    run_rounds(algo, 2, checkpoint)
    before = checkpoint.path.read_bytes()
    real_save = torch.save

    def torn_save(obj, stream, *args, **kwargs):
        real_save(obj, stream, *args, **kwargs)
        stream.seek(len(before) // 2)
        stream.truncate()
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(algo, 3, [])
    assert checkpoint.path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [checkpoint.path]


def test_restore_maps_every_tensor_to_the_cpu(tmp_path, blobs, clients, monkeypatch):
    """A checkpoint written on a GPU node must load on a CPU-only node: torch.load gets
    map_location="cpu" (nn.Module and optimiser load_state_dict then copy to the run's device)."""
    checkpoint = Checkpoint(tmp_path / "ckpt.pt")
    run_rounds(build(blobs, clients, 1), 2, checkpoint)
    seen = []
    real_load = torch.load

    def recording_load(*args, **kwargs):
        seen.append(kwargs.get("map_location"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording_load)
    assert checkpoint.restore(build(blobs, clients, 1))[0] == 2
    assert seen == ["cpu"]


def test_a_wall_time_checkpoint_is_fsynced_file_and_folder_and_a_per_round_one_is_not(
    tmp_path, blobs, clients, monkeypatch
):
    """Paper scale (minutes set) writes rarely, so each write survives a node crash: the file's bytes and
    the rename into its folder are both forced to disk. Quick scale (every round) skips the cost."""
    synced = []
    real_fsync = loop.os.fsync

    def recording_fsync(fd):
        synced.append(loop.os.path.isdir(f"/proc/self/fd/{fd}"))  # Linux: the folder or the file
        real_fsync(fd)

    monkeypatch.setattr(loop.os, "fsync", recording_fsync)
    algo = build(blobs, clients, 1)
    Checkpoint(tmp_path / "quick.pt", minutes=None).save(algo, 1, [])
    assert synced == []
    Checkpoint(tmp_path / "paper.pt", minutes=10).save(algo, 1, [])
    assert sorted(synced) == [False, True], "one fsync of the file, one of the folder"


def test_a_resume_deletes_the_temporary_files_of_a_save_killed_mid_write(tmp_path, blobs, clients):
    checkpoint = Checkpoint(tmp_path / "ckpt.pt", every=1)
    run_rounds(build(blobs, clients, 2), 2, checkpoint)
    stray = tmp_path / ".ckpt.k3j9x_a.tmp.pt"  # the name atomic_write's killed writer leaves
    stray.write_bytes(b"half a checkpoint")
    other = tmp_path / ".metrics.abc.tmp.parquet"  # another file's temporary is not ours to delete
    other.write_bytes(b"x")
    checkpoint.restore(build(blobs, clients, 2))
    assert not stray.exists() and other.exists() and checkpoint.path.exists()
