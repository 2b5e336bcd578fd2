"""`make bench-costs` (benchmarks/paper_scale.py --costs, DECIDING) on the CPU: the rows today's planner has no
measurement of that decide the hours, each listed with the command that fills it, within ten minutes by the
planner's own model; a row timed with a lever on stays out of today's fit; without a GPU nothing is written."""

from __future__ import annotations

import dataclasses
import math
import shutil
import sys
from pathlib import Path

import pytest

from fedrepro import plan

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import paper_scale  # noqa: E402


@pytest.fixture(scope="module")
def deciding(tmp_path_factory):
    """DECIDING as a GPU run would time it, priced at the staged sizes, untrimmed, and its estimate."""
    return paper_scale.plan_bench(True, tmp_path_factory.mktemp("bench"), paper_scale.DECIDING, math.inf)


def test_the_deciding_rows_are_a_stacked_fedal_pool_amazon_and_a_fedsc_bf16_round(deciding):
    timed, _ = deciding
    assert [t.kind for t in timed] == paper_scale.DECIDING
    by_paper = {t.kind.paper: t for t in timed if not t.kind.precision}
    fedal = by_paper["fedal"]
    assert fedal.run.spec.get("batched", True) and fedal.job.work.graphed_launches > 0  # today's stacked step
    assert {t.job.key[0] for t in timed if t.kind.paper == "dpzv"} == {"amazon_polarity"}
    bf16 = [t for t in timed if t.kind.precision == "bf16"]
    assert len(bf16) == 1 and bf16[0].run.spec["precision"] == "bf16" and bf16[0].run.spec["channels_last"]
    partner = next(t for t in timed if t.kind == dataclasses.replace(bf16[0].kind, precision=""))
    assert partner.job.work == bf16[0].job.work  # the same unit in fp32, timed in the same session


def test_the_deciding_command_fits_ten_minutes_by_the_planners_own_model(deciding):
    timed, estimate = deciding
    assert estimate == paper_scale.planned_seconds(timed) <= paper_scale.DECIDING_BUDGET_S <= 600
    assert all(t.job.seconds_per_unit > 0 and math.isfinite(t.job.seconds_per_unit) for t in timed)


def test_every_row_is_listed_with_the_command_that_fills_it(deciding):
    timed, _ = deciding
    lines = paper_scale.row_lines(timed)
    assert len(lines) == len(timed)
    for t, line in zip(timed, lines):
        label = line.split("--kinds ")[1].rstrip("`")
        assert paper_scale.chosen_kinds(False, None, [label]) == [t.kind]  # the command resolves to this kind
        assert line.startswith(f"  {t.job.paper} {t.job.unit} {t.job.key[0]} {t.job.model} {t.job.key[1]} ")
    assert "+bf16:" in "\n".join(lines)
    with pytest.raises(ValueError, match="unknown"):
        paper_scale.chosen_kinds(False, None, ["fedsc/nowhere"])
    assert paper_scale.chosen_kinds(True, None, None)[: len(paper_scale.KINDS)] == paper_scale.KINDS


def test_a_row_timed_with_a_lever_on_stays_out_of_todays_fit_and_prices(deciding):
    timed, _ = deciding
    bf16 = next(t for t in timed if t.kind.precision)
    row = paper_scale.cost_row(bf16, 1.0, "H200", "test")  # bf16 ten times faster than any fp32 row
    assert row["setting"].endswith("+bf16")
    keys = ("paper", "unit", "dataset", "model", "method", "device", "source", "setting")
    cost = plan.Cost(
        **{k: row[k] for k in keys}, seconds=1.0, flops=float(row["flops"]), launches=float(row["launches"])
    )
    assert plan.is_lever_row(cost)
    config = plan.load_config([str(REPO / "config.yaml"), str(REPO / "configs" / "paper.yaml")])
    costs = plan.load_costs()
    before, constants = plan.plan_and_constants(config, costs)
    after, same = plan.plan_and_constants(config, [*costs, cost])
    assert same == constants
    hours = {p: sum(j.gpu_hours for j in per["all runs"]) for p, per in after.items()}
    assert hours == {p: sum(j.gpu_hours for j in per["all runs"]) for p, per in before.items()}
    assert "timed with a lever on: not in today's fit" in plan.report(after, [*costs, cost], same)


def test_without_a_gpu_make_bench_costs_lists_its_rows_and_writes_nothing(deciding, monkeypatch, capsys, tmp_path):
    table = tmp_path / "unit_costs.csv"
    shutil.copy(plan.COSTS, table)
    before = table.read_bytes()
    monkeypatch.setattr(plan, "COSTS", table)
    monkeypatch.setattr(paper_scale.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(paper_scale, "plan_bench", lambda gpu, scratch, kinds, budget: (deciding[0], deciding[1]))
    assert paper_scale.bench_costs() == []
    out = capsys.readouterr().out
    assert f"{len(paper_scale.DECIDING)} rows to fill" in out and "(budget 10)" in out
    assert out.count("--costs --kinds ") == len(paper_scale.DECIDING) and "nothing timed" in out
    assert table.read_bytes() == before
