"""Figure 6's memory job: what it measures, on which data, and what each row records."""

import json

import pandas as pd
import pytest
import torch

from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.memory import _subset, measure_rounds, memory_job
from fedrepro.pipeline import make_job
from fedrepro.report.dpzv import load_memory
from tests.dpzv.conftest import tiny_settings
from tests.dpzv.test_jobs import prepared  # noqa: F401  (fixture: tiny prepared arrays and partition)

SETTINGS = {
    "batch_size": 8,
    "client_model": "vfl_mnist_cnn",
    "client_kwargs": {"pool": [2, 2], "width": 4},
    "embed_dim": 4,
    "server_hidden": 8,
    "server_update": "sgd",
    "embed_clip": 10.0,
}


def run_memory_job(prepared, tmp_path, entries, **changes):  # noqa: F811
    spec = {
        "dataset": "tiny",
        "entries": entries,
        "settings": SETTINGS,
        "rounds": 2,
        "num_samples": 8,
        "warmup_rounds": 1,
        "device": "cpu",
        "eps": "inf",
        **changes,
    }
    job = make_job(spec, {"table": str(tmp_path / "memory.csv"), "json": str(tmp_path / "memory.json")}, input=prepared)
    memory_job(job)
    table = pd.read_csv(tmp_path / "memory.csv")
    rows = pd.DataFrame(json.loads((tmp_path / "memory.json").read_text())["rows"])
    pd.testing.assert_frame_equal(rows, table, check_dtype=False)
    return table


def test_memory_rows_name_each_method_and_measure_the_momentum_buffer(prepared, tmp_path):  # noqa: F811
    """ZO momentum 0.9 keeps one model-sized buffer: its ratio is about 1 above momentum 0 (the entry's
    options reach the settings); VAFL's gradients and momentum put it above both."""
    entries = [
        {"method": "dpzv", "options": {"zo_momentum": 0.0}},
        {"method": "dpzv", "options": {"zo_momentum": 0.9}},
        {"method": "vafl"},
    ]
    table = run_memory_job(prepared, tmp_path, entries)
    assert table["method"].tolist() == ["dpzv", "dpzv", "vafl"]
    assert "label" not in table  # the report's (fedrepro.report.dpzv.memory_label)
    table["label"] = load_memory([str(tmp_path / "memory.csv")])["label"]
    assert table["label"].tolist() == ["DPZV (ZO momentum 0)", "DPZV (ZO momentum 0.9)", "VAFL"]
    table["label"] = ["DPZV (no momentum)", "DPZV", "VAFL"]
    assert (table["device"] == "cpu").all() and (table["rounds"] == 2).all() and (table["batch_size"] == 8).all()
    assert (table["warmup_rounds"] == 1).all() and (table["measure"] == "live_tensor_bytes").all()
    ratio = dict(zip(table["label"], table["ratio"]))
    assert ratio["DPZV"] - ratio["DPZV (no momentum)"] == pytest.approx(1.0, abs=0.05)
    assert ratio["VAFL"] > ratio["DPZV"]


def test_vafls_momentum_buffers_count_though_made_with_its_optimiser(prepared, tmp_path):  # noqa: F811
    """SGD makes its momentum buffers at construction, before the measured rounds: they are training memory
    all the same, one model's worth at momentum 0.9 and none without momentum."""
    entries = [{"method": "vafl", "options": {"momentum": 0.0}}, {"method": "vafl", "options": {"momentum": 0.9}}]
    ratio = run_memory_job(prepared, tmp_path, entries)["ratio"].tolist()
    assert ratio[1] - ratio[0] == pytest.approx(1.0, abs=0.05)


def test_memory_row_equals_a_direct_measure_of_the_same_run(prepared, tmp_path):  # noqa: F811
    from fedrepro.algorithms.dpzv.jobs import load_job_data, settings_for
    from fedrepro.fl.seeding import seed_everything

    table = run_memory_job(prepared, tmp_path, [{"method": "dpzv", "options": {"zo_lambda": 0.01}}])
    job = make_job({"val": "holdout"}, {"x": str(tmp_path / "x")}, input=prepared)
    settings = settings_for({**SETTINGS, "zo_lambda": 0.01}, {"eps": "inf"})
    data = _subset(load_job_data(job, torch.device("cpu")), 8 * 3)
    seed_everything(0)
    direct = measure_rounds(DPZV(data, settings, 0, torch.device("cpu")), 2, 1)
    row = table.iloc[0]
    assert (row["model_bytes"], row["peak_extra_bytes"]) == (direct["model_bytes"], direct["peak_extra_bytes"])
    assert row["ratio"] == pytest.approx(direct["ratio"])


def test_memory_job_gives_one_batch_per_round_or_the_asked_samples(prepared, tmp_path, monkeypatch):  # noqa: F811
    sizes = []
    build = DPZV.__init__

    def recording(self, data, *args, **kwargs):
        sizes.append(data.num_train)
        build(self, data, *args, **kwargs)

    monkeypatch.setattr(DPZV, "__init__", recording)
    entries = [{"method": "dpzv"}]
    run_memory_job(prepared, tmp_path, entries)  # 8 asked, (2 + 1) rounds of 8 needed
    run_memory_job(prepared, tmp_path, entries, num_samples=40)
    run_memory_job(prepared, tmp_path, entries, num_samples=1000)  # capped at the 72 training samples
    table = run_memory_job(prepared, tmp_path, entries, warmup_rounds=2)  # (2 + 2) rounds of 8
    assert sizes == [24, 40, 72, 32] and table["warmup_rounds"].tolist() == [2]


def test_subset_keeps_the_first_training_samples_of_every_client(tiny_data):
    part = _subset(tiny_data, 10)
    assert part.num_train == 10 and part.num_clients == tiny_data.num_clients
    assert all(torch.equal(a, b[:10]) for a, b in zip(part.train, tiny_data.train))
    assert torch.equal(part.y_train, tiny_data.y_train[:10])
    assert part.val is tiny_data.val and part.y_val is tiny_data.y_val
    assert part.test is tiny_data.test and part.y_test is tiny_data.y_test
    assert part.num_classes == tiny_data.num_classes
    assert _subset(tiny_data, 10**6).num_train == tiny_data.num_train


def test_measured_rounds_train_client_0_only(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(extra={"server_update": "sgd"}), seed=0)
    before = [[p.detach().clone() for p in c.params] for c in algo.clients]
    record = measure_rounds(algo, rounds=2, warmup=1)
    moved = [not all(torch.equal(a, b) for a, b in zip(old, c.params)) for old, c in zip(before, algo.clients)]
    assert moved == [True, False]
    assert record["model_bytes"] == sum(p.numel() * 4 for p in algo.clients[0].model.parameters())


class FakeAllocator:
    """The CUDA caching allocator's counters, driven by hand (the test machine may have no GPU)."""

    def __init__(self, allocated: int, reserved: int):
        self.synchronized = []
        self.allocated, self.reserved = allocated, reserved
        self.peak, self.peak_reserved = allocated, reserved

    def use(self, nbytes: int) -> None:
        self.allocated += nbytes
        self.reserved = max(self.reserved, self.allocated + 1024)
        self.peak = max(self.peak, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def reset_peak_memory_stats(self, device) -> None:
        self.peak, self.peak_reserved = self.allocated, self.reserved

    def install(self, monkeypatch) -> None:
        for name, value in {
            "synchronize": lambda device=None: self.synchronized.append(device),
            "memory_allocated": lambda device=None: self.synchronized.append(device) or self.allocated,
            "memory_reserved": lambda device=None: self.synchronized.append(device) or self.reserved,
            "max_memory_allocated": lambda device=None: self.peak,
            "max_memory_reserved": lambda device=None: self.peak_reserved,
            "reset_peak_memory_stats": self.reset_peak_memory_stats,
        }.items():
            monkeypatch.setattr(torch.cuda, name, value)


class ScriptedRounds:
    """An algorithm whose rounds allocate known bytes: the warm-up keeps 500 and passes through 2000
    more; each measured round passes through 300."""

    def __init__(self, allocator: FakeAllocator):
        self.device = torch.device("cuda", 1)  # not the current device: every call must name it
        self.clients = [type("C", (), {"model": torch.nn.Linear(10, 10), "next_batch": lambda self: [0]})()]
        self.allocator, self.calls = allocator, []

    def exchange(self, m, ids):
        transient = 2000 if not self.calls else 300
        self.calls.append(m)
        if len(self.calls) == 1:
            self.allocator.use(500)
        self.allocator.use(transient)
        self.allocator.use(-transient)


def test_gpu_measure_is_the_allocators_peak_after_the_warmup_over_the_start(monkeypatch):
    """cuda_allocator: peak extra = max allocated during the measured rounds (peak reset after the
    warm-up) minus what was allocated before the warm-up; the warm-up's lasting 500 bytes count."""
    allocator = FakeAllocator(allocated=10_000, reserved=11_000)
    allocator.install(monkeypatch)
    algo = ScriptedRounds(allocator)
    record = measure_rounds(algo, rounds=2, warmup=1)
    model_bytes = 110 * 4
    assert algo.calls == [0, 0, 0]
    assert allocator.synchronized and all(d == algo.device for d in allocator.synchronized)
    assert record["measure"] == "cuda_allocator" and record["model_bytes"] == model_bytes
    assert record["peak_extra_bytes"] == 500 + 300
    assert record["ratio"] == (model_bytes + 800) / model_bytes
    reserved = 10_000 + 500 + 2000 + 1024 - 11_000  # the warm-up's reservation stays: the allocator keeps it
    assert record["peak_reserved_extra_bytes"] == reserved
    assert record["reserved_ratio"] == (model_bytes + reserved) / model_bytes
