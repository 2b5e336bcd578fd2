"""Like for like: the local work each FedAL-paper run plans, does and its tables print.

- every method draws exactly the private batches its spec plans (`schedule.local_work`), per client
  and batched, so a table's budget note (from the summaries) is the work done;
- every table of the quick and the paper-scale config names, for each row, its schedule, and the
  rows whose local work differs from FedAL's, and compares runs on one partition per panel;
- FCCL and FCCL+ run one local schedule, with their 30-local-step variants beside them at quick scale.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedrepro.algorithms import method_table
from fedrepro.algorithms.fedal.jobs import train_config
from fedrepro.algorithms.fedal.schedule import local_steps_per_round, local_work
from fedrepro.experiments import fedal as plan
from fedrepro.plan import load_config
from fedrepro.report.fedal import NAMES, notes, with_setting

from .helpers import POOL, make_data

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {"quick": ["config.yaml"], "paper": ["config.yaml", "configs/paper.yaml"]}


def configs(scale: str) -> dict:
    return load_config([str(ROOT / f) for f in CONFIGS[scale]])


def _tiny_spec(run) -> dict:
    """A planned run's spec on the tests' tiny data: its schedule keys kept, a shorter budget."""
    spec = {**run.spec, "iterations": 3 * int(run.spec["tau"]), "device": "cpu"}
    spec["pool"] = POOL[:1] if "one_architecture" in method_table("fedal")[run.method].traits else POOL
    spec["pretrain_iters"] = min(int(spec.get("pretrain_iters", 0)), 4)
    return spec


def _one_run_per_schedule() -> list:
    """One quick blackbox/homogeneous run of every method and local-steps variant."""
    config = configs("quick")
    seen = {}
    for name in ("blackbox", "homogeneous"):
        for run in plan.experiment_runs(config, name):
            seen.setdefault((run.method, run.spec.get("local_steps")), run)
    return list(seen.values())


@pytest.mark.parametrize("batched", [False, True], ids=["per_client", "batched"])
@pytest.mark.parametrize("run", _one_run_per_schedule(), ids=lambda r: r.setting.split("-")[-1] + "-" + r.method)
def test_every_method_draws_the_private_batches_its_spec_plans(run, batched):
    spec = {**_tiny_spec(run), "batched": batched}
    module = importlib.import_module(method_table("fedal")[run.method].entry.split(":")[0])
    torch.manual_seed(0)
    algo = module.build(make_data(), list(spec["pool"]), train_config(spec), 0, spec)
    planned = local_work(spec)
    for t in range(1, planned["rounds"] + 1):
        algo.round(t)
    summary = algo.summary()
    assert summary["local_steps_total"] == planned["local_steps_total"]
    for key in ("local_steps_per_round", "pretrain_steps"):
        assert summary[key] == planned[key], key
    assert summary["iterations_done"] == spec["iterations"]


def _planned_finals(config: dict, name: str) -> pd.DataFrame:
    """What a table job would read: one line per (run, seed) with the work the run plans."""
    rows = []
    for run in plan.output_runs(config, name):
        work = local_work(run.spec)
        for seed in (0, 1):
            rows.append(
                {
                    "dataset": run.dataset,
                    "method": run.method,
                    "setting": run.setting,
                    "partition": run.partition,
                    "seed": seed,
                    "acc": 0.5,
                    "round": work["rounds"],
                    **{k: v for k, v in work.items() if k != "rounds"},
                }
            )
    finals = with_setting(pd.DataFrame(rows))
    finals["panel"] = finals["panel_setting"]
    return finals


def _schedule_text(work: pd.Series) -> str:
    pretrain = f" + {int(work['pretrain_steps'])}" if work["pretrain_steps"] else ""
    return f"{int(work['round'])} x {int(work['local_steps_per_round'])}{pretrain}"


def _schedules(budget: str) -> dict[str, str]:
    """row -> the schedule the budget note gives it ('FedAL, FD 6 x 5; FCCL 6 x 5 + 30' -> ...)."""
    groups = budget.split(": ", 1)[1].split(". Not at")[0].rstrip(".").split("; ")
    out = {}
    for group in groups:
        match = re.fullmatch(r"(?P<rows>.+) (?P<schedule>\d+ x \d+(?: \+ \d+)?)", group)
        out |= {row: match["schedule"] for row in match["rows"].split(", ")}
    return out


@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_tables_name_every_row_whose_local_work_differs(scale):
    """Two methods compared in one table at different local steps per round, rounds or steps in all
    are named with their schedule; rows whose steps in all differ from FedAL's are called unequal; and
    one panel's runs read one partition (the same private and public data)."""
    config = configs(scale)
    for name in plan.TABLES:
        finals = _planned_finals(config, name)
        assert (finals.groupby("panel")["partition"].nunique() == 1).all(), name
        notes_ = notes(finals, where=name)
        budget = next((n for n in notes_ if n.startswith("Budget per client")), "")
        schedules = _schedules(budget) if budget else {}
        work = finals.groupby("row")[["round", "local_steps_per_round", "pretrain_steps", "local_steps_total"]].max()
        for row, w in work.iterrows():
            assert schedules.get(row) == _schedule_text(w), (name, row, budget)
        unequal = work[work["local_steps_total"] != work.loc[NAMES["fedal"], "local_steps_total"]]
        named = budget.split("Not at equal local work")[1] if "Not at equal" in budget else ""
        for row, w in unequal.iterrows():
            assert f"{row} {w['local_steps_total']:g}" in named, (name, row, budget)
        assert unequal.empty == (not named), name


def test_a_table_without_its_budget_note_fails_the_check(monkeypatch):
    """The mutation the check above guards against: rows at unequal local work and no note naming them."""
    import fedrepro.report.fedal as report

    monkeypatch.setattr(report, "budget_note", lambda finals: None)
    with pytest.raises(AssertionError):
        test_tables_name_every_row_whose_local_work_differs("quick")


@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_fccl_and_fccl_plus_run_one_local_schedule(scale):
    """FCCL and FCCL+ take the same local steps per round at every setting they both run (their
    authors run both on one schedule): tau on their own rows, at quick scale also 30 on rows of their own."""
    config = configs(scale)
    methods = config["fedal"]["methods"]
    assert local_steps_per_round(methods["fccl"]) == local_steps_per_round(methods["fccl_plus"])
    for name in config["fedal"]["experiments"]:
        by_panel: dict[str, dict[str, set]] = {}
        for run in plan.experiment_runs(config, name):
            if run.method in ("fccl", "fccl_plus"):
                steps = by_panel.setdefault(plan.panel_setting(run.setting), {}).setdefault(run.method, set())
                steps.add(local_steps_per_round(run.spec))
        for panel, steps in by_panel.items():
            assert len(steps) < 2 or steps["fccl"] == steps["fccl_plus"], (name, panel, steps)
    blackbox = plan.experiment_runs(configs("quick"), "blackbox")
    variants = {(r.method, r.spec["local_steps"]) for r in blackbox if "local_steps" in r.spec}
    assert variants == {("fccl", 30), ("fccl_plus", 30)}
