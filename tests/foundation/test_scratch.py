"""Scratch and logs (issue 15, item 5) and seeds reused across seed lists (item 4)."""

import json
import logging
import zipfile

import numpy as np
import pandas as pd
import pytest

from fedrepro.atomic import atomic_write, atomic_write_text
from fedrepro.fl.runner import run_seeds, seed_slot
from fedrepro.pipeline import Job, run_job, scratch_for


def test_atomic_write_keeps_the_old_file_when_the_writer_dies(tmp_path):
    path = tmp_path / "seed0.json"
    atomic_write_text(path, '{"old": 1}')

    def dies_halfway(tmp):
        tmp.write_text('{"new": ')
        raise KeyboardInterrupt  # a kill in the middle of the write

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, dies_halfway)
    assert json.loads(path.read_text()) == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed0.json"]  # no temp file left


def test_atomic_write_serves_writers_that_care_about_the_suffix(tmp_path):
    path = atomic_write(tmp_path / "clients.npz", lambda tmp: np.savez(tmp, clients=np.arange(3)))
    assert np.load(path)["clients"].tolist() == [0, 1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clients.npz"]


def test_atomic_write_gives_the_mode_a_plain_open_gives(tmp_path):
    # mkstemp makes 0600 files; a result on a shared cluster folder must follow the umask
    import os

    mask = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "summary.json", "{}")
        (tmp_path / "plain.json").write_text("{}")
    finally:
        os.umask(mask)
    assert path.stat().st_mode & 0o777 == (tmp_path / "plain.json").stat().st_mode & 0o777 == 0o644


def failing_entry(job):
    raise ValueError("the reason this job failed")


def reading_entry(job):
    np.load(job.input["partition"])["clients"]


def make(tmp_path, name="job", **kwargs):
    output = {"metrics": str(tmp_path / name / "metrics.parquet")}
    return Job(
        spec={}, output=output, log=str(tmp_path / f"{name}.log"), scratch=scratch_for(output["metrics"]), **kwargs
    )


def test_a_failed_jobs_traceback_goes_to_its_log(tmp_path):
    job = make(tmp_path)
    with pytest.raises(ValueError):
        run_job(job, f"{__name__}:failing_entry")
    text = (tmp_path / "job.log").read_text()
    assert "Traceback" in text and "the reason this job failed" in text and "failing_entry" in text


def test_a_corrupt_input_is_named_and_removed_so_snakemake_rebuilds_it(tmp_path):
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(good, clients=np.arange(1000))
    np.savez(bad, clients=np.arange(1000))
    bad.write_bytes(bad.read_bytes()[:300])  # a write cut short
    job = make(tmp_path, input={"partition": str(bad), "other": [str(good)]})
    with pytest.raises(zipfile.BadZipFile):
        run_job(job, f"{__name__}:reading_entry")
    text = (tmp_path / "job.log").read_text()
    assert f"input {bad} is corrupt" in text and "rebuild" in text
    assert not bad.exists() and good.exists()


class Counter:
    """A federated algorithm in miniature: one seeded random number per round."""

    built = []

    def __init__(self, seed, scale):
        Counter.built.append(seed)
        self.rng, self.value, self.scale = np.random.default_rng(seed), 0.0, scale

    def round(self, t):
        self.value += self.scale * self.rng.normal()
        return {"loss": self.value}

    def evaluate(self, t):
        return {"acc": self.value}

    def state_dict(self):
        return {"value": self.value, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state):
        self.value = state["value"]
        self.rng.bit_generator.state = state["rng"]


def pipeline_job(tmp_path, seeds, spec=None):
    """A job laid out as the pipeline lays it out: <setting>/<seeds>/metrics.parquet."""
    tag = "s" + "_".join(map(str, seeds))
    folder = tmp_path / "runs" / "digits" / "counter" / "a1" / tag
    output = {"metrics": str(folder / "metrics.parquet"), "summary": str(folder / "summary.json")}
    return Job(
        spec=spec or {"scale": 1.0},
        output=output,
        seeds=list(seeds),
        wildcards={"seeds": tag},
        scratch=scratch_for(output["metrics"]),
    )


def run(job):
    Counter.built = []
    return run_seeds(job, lambda seed: Counter(seed, job.spec["scale"]), num_rounds=3)


def test_adding_a_seed_runs_only_the_new_seed_with_identical_results(tmp_path):
    first = run(pipeline_job(tmp_path, [0]))
    assert Counter.built == [0]
    both = run(pipeline_job(tmp_path, [0, 1]))
    assert Counter.built == [1]  # seed 0 came from the seed store
    pd.testing.assert_frame_equal(both[both.seed == 0].reset_index(drop=True), first)
    Counter.built = []
    alone = run_seeds(pipeline_job(tmp_path / "fresh", [1]), lambda seed: Counter(seed, 1.0), num_rounds=3)
    pd.testing.assert_frame_equal(both[both.seed == 1].reset_index(drop=True), alone)


def test_other_settings_do_not_reuse_seeds(tmp_path):
    run(pipeline_job(tmp_path, [0]))
    run(pipeline_job(tmp_path, [0, 1], spec={"scale": 2.0}))
    assert Counter.built == [0, 1]


def test_a_corrupt_finished_seed_is_named_and_recomputed(tmp_path, caplog):
    job = pipeline_job(tmp_path, [0])
    first = run(job)
    store, slot, state = seed_slot(job, 0)
    summary = store.entry(slot, state) / "summary.json"
    summary.write_text(summary.read_text()[:20])  # cut short
    with caplog.at_level(logging.WARNING):
        again = run(pipeline_job(tmp_path, [0, 1]))
    assert Counter.built == [0, 1]
    assert "unreadable entry" in caplog.text and "seed0" in caplog.text
    pd.testing.assert_frame_equal(again[again.seed == 0].reset_index(drop=True), first)
