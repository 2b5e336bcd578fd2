"""`make bench-costs` (benchmarks/paper_scale.py --costs) without a GPU: which runs it times, the rows it
writes with injected measurements, its 20-minute budget by the planner's own model, and its round clock."""

from __future__ import annotations

import csv
import math
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fedrepro import plan
from fedrepro.data import sources
from fedrepro.fl.loop import run_rounds
from fedrepro.options import DETERMINISTIC_ENV, EVERY_ENV, MINUTES_ENV

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import cost_counts  # noqa: E402
import paper_scale  # noqa: E402


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """Every kind a GPU run would time (none trimmed), priced by the planner at the staged sizes, and the
    estimate."""
    return paper_scale.plan_bench(True, tmp_path_factory.mktemp("bench"), budget=math.inf)


@pytest.fixture(scope="module")
def paper_plan():
    """The paper configuration, its counts (steps missing from the table counted) and its priced jobs."""
    config = plan.load_config([str(REPO / "config.yaml"), str(REPO / "configs" / "paper.yaml")])
    counts = plan.load_default_counts()
    return config, counts, plan.plan_and_constants(config, counts=counts)[0]


@pytest.fixture(scope="module")
def paper_pools(paper_plan):
    return paper_scale.pools(paper_plan[2])


def test_every_pool_the_paper_configuration_plans_has_a_kind(bench, paper_pools):
    """A new pool (data set, model or unit) without a kind in KINDS would keep the planner's guess."""
    timed, _ = bench
    covered = {(t.job.paper, t.job.unit, t.job.key[0], t.job.model) for t in timed}
    assert paper_pools, "the paper configuration plans no GPU pool"
    assert paper_pools <= covered, f"pools without a bench kind: {sorted(paper_pools - covered)}"
    pool_kinds = paper_scale.KINDS[: paper_scale.POOL_KINDS]
    assert len({(k.paper, k.the_unit, k.dataset) for k in pool_kinds}) <= len(pool_kinds)
    # the pool kinds alone cover every pool: trimming second methods never leaves a pool unmeasured
    first = {(t.job.paper, t.job.unit, t.job.key[0], t.job.model) for t in timed[: paper_scale.POOL_KINDS]}
    assert paper_pools <= first


def test_the_bench_fits_twenty_minutes_by_the_planners_own_model(bench):
    timed, estimate = bench
    assert estimate == paper_scale.planned_seconds(timed) and len(timed) == len(paper_scale.KINDS)
    assert estimate <= paper_scale.BUDGET_S, f"the planner expects {estimate / 60:.1f} min"
    for t in timed:  # every kind priced (a kind the planner cannot price would read as free)
        assert t.job.seconds_per_unit > 0 and math.isfinite(t.job.seconds_per_unit), t.kind


def test_over_budget_the_second_methods_go_first_and_the_pools_refuse(bench):
    timed, estimate = bench
    pools_only = paper_scale.planned_seconds(timed[: paper_scale.POOL_KINDS])
    kept = paper_scale.fit_budget(timed, budget=(pools_only + estimate) / 2)
    assert paper_scale.POOL_KINDS <= len(kept) < len(timed) and kept == timed[: len(kept)]
    assert paper_scale.fit_budget(timed, budget=pools_only) == timed[: paper_scale.POOL_KINDS]
    with pytest.raises(RuntimeError, match="pool kinds alone"):
        paper_scale.fit_budget(timed, budget=pools_only - 1)


def test_a_row_carries_the_work_of_the_unit_timed_on_the_staged_data(bench, paper_plan):
    """A FedSC round on 10,240 staged CIFAR-10 images is about a fifth of the paper's 50,000-image round
    (the kNN monitor reads the test images too); a FedAL iteration does not depend on the data size, and
    the median round has no evaluation: its work is the planner's with `evals: 0`."""
    timed, _ = bench
    config, counts, planned = paper_plan
    paper_jobs = {(j.key[:3], j.unit): j for per in planned.values() for j in per["all runs"]}
    for t in timed:
        paper = paper_jobs[(t.job.key[:3], t.job.unit)]
        ratio = t.job.work.flops / paper.work.flops
        if (t.job.paper, t.job.unit, t.job.key[0]) == ("fedsc", "round", "cifar10"):
            assert 0.15 < ratio < 0.3, ratio
        if t.job.paper == "fedal":
            run = next(r for r in paper_scale._runs(config, "fedal") if r.key == t.job.key[:3])
            spec = {**run.spec, "evals": 0}
            clients = int(t.job.key[2].split("-c")[1].split("-")[0])
            expected = plan.fedal_work(config, replace(run, spec=spec), counts, clients)
            assert t.job.work == expected and ratio < 0.95, t.kind  # the paper's unit has 30 evaluations


def _table(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, cost_counts.COLUMNS)
        writer.writeheader()
        writer.writerows([{c: r.get(c, "") for c in cost_counts.COLUMNS} for r in rows])


def test_measurements_replace_their_rows_and_keep_every_other(bench, tmp_path):
    """Injected GPU seconds for every kind: each kind's older H200 row of the same setting is replaced,
    another device's and another setting's rows stay, each new row has its counted work, and the
    planner prices from the new rows (the newest)."""
    timed, _ = bench
    first = timed[0].job  # FedSC CIFAR-10 round, full_epsinf
    same = {
        "paper": first.paper,
        "unit": first.unit,
        "dataset": first.key[0],
        "model": first.model,
        "method": first.key[1],
        "setting": first.key[2],
        "flops": "1",
        "launches": "1",
    }
    table = tmp_path / "unit_costs.csv"
    _table(
        table,
        [
            {**same, "device": "H200", "seconds": "99", "source": "old, same kind"},
            {**same, "device": "H100", "seconds": "98", "source": "other device"},
            {**same, "device": "H200", "setting": "full_eps", "seconds": "77", "source": "other setting"},
            {
                "paper": "dpzv",
                "unit": "epoch",
                "dataset": "cifar10",
                "model": "vfl_cifar_cnn",
                "method": "dpzv",
                "device": "H200",
                "seconds": "6",
                "source": "legacy, no setting",
            },
        ],
    )
    injected = {t.kind: 1.0 + i for i, t in enumerate(timed)}
    rows = [paper_scale.cost_row(t, injected[t.kind], "H200", "injected") for t in timed]
    replaced = paper_scale.replace_costs(table, rows)
    with open(table, newline="") as f:
        written = list(csv.DictReader(f))
    assert replaced == 1  # the legacy DPZV row (no setting) is not the bench's eps0.1-C10 kind
    assert [r["source"] for r in written[:3]] == ["other device", "other setting", "legacy, no setting"]
    assert len(written) == 3 + len(timed)
    for row, t in zip(written[3:], timed):
        assert float(row["seconds"]) == injected[t.kind]
        assert float(row["flops"]) == pytest.approx(t.job.work.flops, rel=1e-5) and float(row["flops"]) > 0
        assert float(row["launches"]) == pytest.approx(t.job.work.launches, rel=1e-5) and float(row["launches"]) > 0
        assert row["counted"] == cost_counts.TIMED and row["device"] == "H200"
    costs = plan.load_costs(table)
    chosen = plan._row(costs, first.paper, first.unit, first.key[0], first.model, first.key[1])
    assert (chosen.seconds, chosen.source) == (injected[timed[0].kind], "injected")
    # a second run of the command replaces its own rows again: nothing is appended
    assert paper_scale.replace_costs(table, rows) == len(rows)
    assert len(plan.load_costs(table)) == 3 + len(timed)


def test_the_counts_script_keeps_a_timed_rows_work(tmp_path):
    """benchmarks/cost_counts.py re-derives a legacy row's work from the paper configuration, leaves the work
    the bench counted for the unit it timed and an older row's as-measured work, but re-counts an older row
    whose kind plan.AS_RAN describes with the code it ran (issue 42)."""
    table = tmp_path / "unit_costs.csv"
    shutil.copy(plan.COSTS, table)
    with open(table, newline="") as f:
        legacy = list(csv.DictReader(f))
    fedsc_row, dpzv_row = legacy[0], next(r for r in legacy if r["paper"] == "dpzv")
    timed = {**fedsc_row, "flops": "123", "launches": "4", "counted": cost_counts.TIMED}
    as_measured = {**dpzv_row, "flops": "7", "launches": "8", "counted": cost_counts.AS_MEASURED}
    as_ran = {**fedsc_row, "flops": "9", "launches": "10", "counted": cost_counts.AS_MEASURED}
    stale = {**fedsc_row, "flops": "5", "launches": "6", "counted": ""}
    _table(table, [stale, timed, as_measured, as_ran])
    cost_counts.fill_costs(table)
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    assert (rows[1]["flops"], rows[1]["launches"]) == ("123", "4")
    assert (rows[2]["flops"], rows[2]["launches"]) == ("7", "8")
    assert float(rows[0]["flops"]) > 1e12 and float(rows[0]["launches"]) > 1e3  # re-derived: a FedSC paper round
    assert (rows[3]["flops"], rows[3]["launches"]) == (fedsc_row["flops"], fedsc_row["launches"])  # as it ran


class _Rounds:
    """An algorithm whose rounds take 10, 1, 3, 2, 50, ... seconds of a fake clock."""

    def __init__(self, clock):
        self.clock, self.played = clock, []

    def round(self, t):
        self.played.append(t)
        self.clock.now += [10.0, 1.0, 3.0, 2.0][t - 1] if t <= 4 else 50.0
        return {}

    def evaluate(self, t):
        return {}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class _Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_the_round_clock_drops_the_warm_up_takes_the_median_and_stops_the_run(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(paper_scale.time, "perf_counter", clock)
    algorithm = _Rounds(clock)
    with paper_scale.round_clock(paper_scale.WARMUP + paper_scale.TIMED_ROUNDS) as stamps:
        with pytest.raises(paper_scale.Enough):
            run_rounds(algorithm, 1000, eval_every=1000)
    assert algorithm.played == [1, 2, 3, 4]  # one warm-up and three timed rounds of 1,000
    assert paper_scale.median_round(stamps) == 2.0  # median of 1, 3, 2; the 10-second warm-up dropped


def test_the_round_clock_caps_a_kind(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(paper_scale.time, "perf_counter", clock)
    algorithm = _Rounds(clock)
    with paper_scale.round_clock(1000, cap_s=3.5) as stamps:
        with pytest.raises(paper_scale.Enough):
            run_rounds(algorithm, 1000, eval_every=1000)
    assert algorithm.played == [1, 2, 3]  # rounds 2 and 3 took 4 s > 3.5 s after the warm-up
    assert paper_scale.median_round(stamps) == 2.0


def test_without_a_gpu_the_command_writes_nothing(bench, monkeypatch, tmp_path):
    """The CPU trial goes through every step but the GPU's (staging, preparing and timing faked here)
    and leaves the table as it was; the bare command without --trial times nothing."""
    timed, estimate = bench
    table = tmp_path / "unit_costs.csv"
    shutil.copy(plan.COSTS, table)
    before = table.read_bytes()
    monkeypatch.setattr(plan, "COSTS", table)
    for name in (EVERY_ENV, MINUTES_ENV, DETERMINISTIC_ENV, sources.CHECKSUM_OVERRIDES_ENV):
        monkeypatch.delenv(name, raising=False)  # the command sets them for its jobs: restored after the test
    monkeypatch.setattr(paper_scale.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(paper_scale, "plan_bench", lambda gpu, scratch, kinds, budget: (timed[:2], estimate))
    monkeypatch.setattr(paper_scale, "stage", lambda root, gpu, datasets: {})
    monkeypatch.setattr(paper_scale, "prepare_inputs", lambda *args, **kwargs: None)
    monkeypatch.setattr(paper_scale, "prepared_sizes", lambda config, datasets: {})
    monkeypatch.setattr(paper_scale, "timed_kinds", lambda *args, **kwargs: timed[:2])
    monkeypatch.setattr(paper_scale, "seconds_per_unit", lambda t, config, scratch: 1.0)
    rows = paper_scale.bench_costs(trial=True)
    assert [r["ours"] for r in rows] == [1.0, 1.0]  # both kinds went through
    assert paper_scale.bench_costs() == []
    assert table.read_bytes() == before
    assert paper_scale.device_name() == "CPU (no GPU present)"


def test_the_device_is_named_as_the_planner_names_it(monkeypatch):
    monkeypatch.setattr(paper_scale.torch.cuda, "is_available", lambda: True)
    for name, key in [("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA A100-SXM4-80GB", None)]:
        monkeypatch.setattr(paper_scale.torch.cuda, "get_device_name", lambda i, n=name: n)
        assert paper_scale.device_name() == (key or name)
