"""The one store of finished work (fedrepro.store), used by the seed runner, DPZV's variants and
SteFFLe's (eps, lambda) cells: keyed by the spec, the seeds and the inputs (code included),
written state-last, unreadable entries dropped with a warning, older keys of a slot dropped."""

import json
import logging

import pandas as pd
import pytest

import fedrepro.store
from fedrepro.fl.runner import run_seeds, seed_slot
from fedrepro.pipeline import Job, scratch_for
from fedrepro.store import Store, state_of
from tests.foundation.test_scratch import Counter, pipeline_job


def write_json(value):
    return lambda tmp: tmp.write_text(json.dumps(value))


def read_json(folder):
    return json.loads((folder / "value.json").read_text())


def test_an_entry_is_served_only_under_the_state_it_was_written_for(tmp_path):
    store = Store(tmp_path)
    assert store.load("seed0", "a", read_json) is None
    store.save("seed0", "a", {"value.json": write_json(1)})
    assert store.load("seed0", "a", read_json) == 1
    assert store.load("seed0", "b", read_json) is None
    assert store.load("seed1", "a", read_json) is None
    (store.entry("seed0", "a") / "state.json").write_text("b")  # the folder's hash is short; its state is whole
    assert store.load("seed0", "a", read_json) is None


def test_saving_drops_the_older_keys_of_the_slot_only(tmp_path):
    store = Store(tmp_path)
    store.save("seed0", "old settings", {"value.json": write_json(1)})
    store.save("seed1", "old settings", {"value.json": write_json(2)})
    store.save("seed0", "new settings", {"value.json": write_json(3)})
    assert [p.name for p in (tmp_path / "seed0").iterdir()] == [store.entry("seed0", "new settings").name]
    assert store.load("seed1", "old settings", read_json) == 2


def test_an_unreadable_entry_is_named_removed_and_not_served(tmp_path, caplog):
    store = Store(tmp_path)
    folder = store.save("cell", "a", {"value.json": write_json([1, 2])})
    (folder / "value.json").write_text("[1, ")  # torn
    with caplog.at_level(logging.WARNING, logger="fedrepro.store"):
        assert store.load("cell", "a", read_json) is None
    assert str(folder) in caplog.text and "unreadable" in caplog.text
    assert not folder.exists()


def test_a_half_rewritten_entry_does_not_count_as_finished(tmp_path, monkeypatch):
    store = Store(tmp_path)
    store.save("cell", "a", {"first.json": write_json(1), "value.json": write_json(2)})
    calls = []
    original = fedrepro.store.atomic_write

    def crash_on_second_file(path, write):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        return original(path, write)

    monkeypatch.setattr(fedrepro.store, "atomic_write", crash_on_second_file)
    with pytest.raises(OSError):
        store.save("cell", "a", {"first.json": write_json(10), "value.json": write_json(20)})
    assert store.load("cell", "a", read_json) is None


def test_a_path_is_linked_into_the_entry_and_a_missing_one_skipped(tmp_path):
    source = tmp_path / "seed0.pt"
    source.write_bytes(b"weights")
    store = Store(tmp_path / "store")
    folder = store.save("seed0", "a", {"checkpoint.pt": source, "gone.pt": tmp_path / "missing.pt"})
    assert (folder / "checkpoint.pt").read_bytes() == b"weights" and not (folder / "gone.pt").exists()
    assert (folder / "checkpoint.pt").stat().st_ino == source.stat().st_ino


def test_the_state_holds_the_spec_the_seeds_and_the_inputs_content_not_the_outputs(tmp_path):
    code = tmp_path / "fedrepro.fl.runner.sha256"
    code.write_text("hash of the code")
    job = Job(spec={"lr": 1}, output={"metrics": "a/metrics.parquet"}, input={"code": [str(code)]}, seeds=[0, 1])
    state = state_of(job, job.spec, [0])
    assert state_of(Job(spec={"lr": 1}, output={"m": "elsewhere"}, input=job.input), {"lr": 1}, [0]) == state
    assert state_of(job, {"lr": 2}, [0]) != state
    assert state_of(job, job.spec, [1]) != state
    code.write_text("hash of edited code")
    assert state_of(job, job.spec, [0]) != state


def test_a_seed_finished_under_other_code_is_not_served(tmp_path):
    """The seed store keys on the code fingerprints' content: an edit of the job's code trains again."""
    code = tmp_path / "code" / "fedrepro.fl.runner.sha256"
    code.parent.mkdir()
    code.write_text("code before")

    def job(seeds):
        base = pipeline_job(tmp_path, seeds)
        return Job(**{**base.__dict__, "input": {"code": [str(code)]}, "scratch": scratch_for(base.output["metrics"])})

    Counter.built = []
    first = run_seeds(job([0]), lambda seed: Counter(seed, 1.0), num_rounds=3)
    run_seeds(job([0, 1]), lambda seed: Counter(seed, 1.0), num_rounds=3)
    assert Counter.built == [0, 1]  # seed 0 from the store
    code.write_text("code after")
    again = run_seeds(job([0, 1]), lambda seed: Counter(seed, 1.0), num_rounds=3)
    assert Counter.built == [0, 1, 0, 1]
    pd.testing.assert_frame_equal(again[again.seed == 0].reset_index(drop=True), first)
    store, slot, state = seed_slot(job([0]), 0)
    assert [p.name for p in (store.root / slot).iterdir()] == [store.entry(slot, state).name]
