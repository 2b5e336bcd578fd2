"""The one store of finished work (fedrepro.store), used by the seed runner, DPZV's variants and
SteFFLe's (eps, lambda) cells: keyed by the spec, the seeds and the inputs (code as the job started, paths
relative to the results folder), written state-last, unreadable entries dropped with a warning, other keys of
a slot kept up to a size limit, most recently used first."""

import json
import logging
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import fedrepro.codedeps
import fedrepro.store
from fedrepro.codedeps import code_inputs
from fedrepro.fl.runner import run_seeds, seed_slot
from fedrepro.pipeline import CodeMoved, Job, record_code, scratch_for
from fedrepro.store import KEEP_OTHERS, Store, state_of
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


def test_a_slot_keeps_other_keys_and_drops_the_least_recently_used_beyond_its_size_limit(tmp_path):
    """Two checkouts alternating on one folder (two keys of one slot) keep each other's work; the entries of
    other keys beyond KEEP_OTHERS times the new entry's size go, the least recently used first."""
    store = Store(tmp_path)
    store.save("seed0", "checkout A", {"value.json": write_json(1)})
    store.save("seed1", "checkout A", {"value.json": write_json(2)})
    store.save("seed0", "checkout B", {"value.json": write_json(3)})
    assert store.load("seed0", "checkout A", read_json) == 1 and store.load("seed0", "checkout B", read_json) == 3
    old = store.entry("seed0", "checkout A")
    for path in (old / "state.json", old):
        os.utime(path, ns=(1, 1))  # A's entry unused for long

    def kept():
        return {p.name for p in (tmp_path / "seed0").iterdir()}

    for n in range(KEEP_OTHERS + 1):  # entries of one size (state and value of equal lengths)
        store.save("seed0", f"settings {n}", {"value.json": write_json(n)})
    assert len(kept()) == KEEP_OTHERS + 1 and old.name not in kept()  # the least recently used went first
    assert store.load("seed1", "checkout A", read_json) == 2  # other slots untouched
    assert store.load("seed0", "settings 0", read_json) == 0  # serving an entry makes it recently used ...
    store.save("seed0", "settings 9", {"value.json": write_json(9)})
    assert store.entry("seed0", "settings 0").name in kept()  # ... so it outlives an older one
    assert store.entry("seed0", "checkout B").name not in kept()


def test_a_large_new_entry_drops_what_exceeds_the_limit(tmp_path):
    store = Store(tmp_path)
    store.save("seed0", "old", {"value.json": write_json("x" * 4000)})
    store.save("seed0", "new", {"value.json": write_json(1)})
    assert [p.name for p in (tmp_path / "seed0").iterdir()] == [store.entry("seed0", "new").name]


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
    code = tmp_path / "fedrepro.fl.runner-run.code"
    code.write_text("fedrepro.fl.runner 1\n")
    job = Job(spec={"lr": 1}, output={"metrics": "a/metrics.parquet"}, input={"code": [str(code)]}, seeds=[0, 1])
    state = state_of(job, job.spec, [0])
    assert state_of(Job(spec={"lr": 1}, output={"m": "elsewhere"}, input=job.input), {"lr": 1}, [0]) == state
    assert state_of(job, {"lr": 2}, [0]) != state
    assert state_of(job, job.spec, [1]) != state
    code.write_text("fedrepro.fl.runner 2\n")
    assert state_of(job, job.spec, [0]) != state


def test_the_state_takes_the_code_as_the_job_started_not_as_a_later_parse_rewrote_it(tmp_path):
    """A parse of the workflow by another checkout rewrites the shared fingerprint files while the job runs:
    the job's store keys stay those of the code it started with (Job.code, recorded by run_job)."""
    code = Path(code_inputs("fedrepro.registry:resolve", tmp_path / "code"))
    job = Job(spec={}, output={"m": str(tmp_path / "m")}, input={"code": str(code)}, seeds=[0])
    job.code = record_code(job)
    started = state_of(job, {}, [0])
    code.write_text(code.read_text().replace("fedrepro.registry ", "fedrepro.registry 0"))  # another checkout's
    assert state_of(job, {}, [0]) == started
    assert state_of(Job(spec={}, output={}, input=job.input), {}, [0]) != started  # read now: the other code


def test_keys_name_inputs_relative_to_the_results_folder(tmp_path):
    """A results folder moved or copied (with its file times) keeps the keys of its stored work."""
    first = tmp_path / "a" / "results"
    (first / "data").mkdir(parents=True)
    (first / "data" / "arrays.npz").write_bytes(b"x" * 100_000)  # a large input: by size and time

    def state(results):
        job = Job(spec={}, output={}, input={"data": str(results / "data" / "arrays.npz")}, results=str(results))
        return state_of(job, {}, [0])

    before = state(first)
    moved = tmp_path / "b" / "elsewhere"
    shutil.copytree(first, moved)  # copies file times, as cp -a or rsync -a do
    assert state(moved) == before


def test_a_jobs_store_saves_nothing_after_a_module_it_imported_changed(tmp_path, monkeypatch):
    """A module first imported inside a function is read when first called: if its code changed since the job
    started, what the job computes now is not what its key says, so its store refuses the entry."""
    src = tmp_path / "src" / "fedrepro"
    shutil.copytree(Path(fedrepro.store.__file__).parent, src, ignore=shutil.ignore_patterns("__pycache__"))
    code = Path(code_inputs("fedrepro.registry:resolve", tmp_path / "code", src))
    job = Job(spec={}, output={"m": str(tmp_path / "m")}, input={"code": str(code)}, seeds=[0])
    monkeypatch.setattr("fedrepro.pipeline.module_file", lambda name: fedrepro.codedeps.module_file(name, src))
    monkeypatch.setattr("fedrepro.pipeline.code_hash", lambda name: fedrepro.codedeps.code_hash(name, src))
    job.code = record_code(job)
    store = Store(tmp_path / "store", job)
    store.save("seed0", "a", {"value.json": write_json(1)})
    registry = src / "registry.py"
    registry.write_text("# a comment edit changes no code\n" + registry.read_text())
    store.save("seed1", "a", {"value.json": write_json(2)})
    registry.write_text(registry.read_text() + "\nEDITED = 1\n")
    with pytest.raises(CodeMoved, match="fedrepro.registry changed while this job ran"):
        store.save("seed2", "a", {"value.json": write_json(3)})
    assert not (tmp_path / "store" / "seed2").exists()


def test_a_seed_finished_under_other_code_is_not_served(tmp_path):
    """The seed store keys on the code fingerprints' content: an edit of the job's code trains again; the
    other code's seeds stay (a second checkout alternating on the folder finds its own)."""
    code = tmp_path / "code" / "fedrepro.fl.runner-run.code"
    code.parent.mkdir()
    code.write_text("code before")

    def job(seeds):
        base = pipeline_job(tmp_path, seeds)
        return Job(**{**base.__dict__, "input": {"code": [str(code)]}, "scratch": scratch_for(base.output["metrics"])})

    Counter.built = []
    first = run_seeds(job([0]), lambda seed: Counter(seed, 1.0), num_rounds=3)
    run_seeds(job([0, 1]), lambda seed: Counter(seed, 1.0), num_rounds=3)
    assert Counter.built == [0, 1]  # seed 0 from the store
    store, slot, before = seed_slot(job([0]), 0)
    code.write_text("code after")
    again = run_seeds(job([0, 1]), lambda seed: Counter(seed, 1.0), num_rounds=3)
    assert Counter.built == [0, 1, 0, 1]
    pd.testing.assert_frame_equal(again[again.seed == 0].reset_index(drop=True), first)
    _, _, after = seed_slot(job([0]), 0)
    assert {p.name for p in (store.root / slot).iterdir()} == {store.entry(slot, s).name for s in (before, after)}
