"""The cost planner counts the jobs the pipeline schedules and prices them from the cost table."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from fedrepro import plan

REPO = Path(__file__).resolve().parents[2]
PAPER = ["config.yaml", "configs/paper.yaml"]
TRAIN_RULES = {
    "fedsc": ("fedsc_pretrain", "fedsc_prefix"),  # the private runs' shared FedAvg+SC prefixes are jobs too
    "dpzv": "dpzv_train",
    "fedal": "fedal_train",
    "steffle": re.compile(r"steffle_train_\w+"),  # one rule per training job (steffle.train_jobs)
    "fedavg": "fedavg_train",
}


@pytest.fixture(scope="module")
def paper_config():
    return plan.load_config([str(REPO / p) for p in PAPER])


def test_training_jobs_per_paper_are_the_jobs_snakemake_schedules(paper_config, paper_dry_run):
    """Snakemake's job stats of the paper-scale dry run (tests/conftest.paper_dry_run, target all)."""
    assert paper_dry_run["rc"] == 0, (paper_dry_run["stdout"] + paper_dry_run["stderr"])[-3000:]
    table = paper_dry_run["stdout"].split("Job stats:")[-1]
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}
    planned = plan.plan(paper_config)
    for paper, rule in TRAIN_RULES.items():
        ours = len({j.key for j in planned[paper]["all runs"] if j.unit != "probe_epoch"})
        if isinstance(rule, re.Pattern):
            theirs = sum(n for name, n in counts.items() if rule.fullmatch(name))
        else:
            theirs = sum(counts.get(r, 0) for r in ((rule,) if isinstance(rule, str) else rule))
        assert ours == theirs, f"{paper}: planner {ours} jobs, snakemake {theirs} {rule} jobs"


def test_gpu_hours_are_units_times_measured_seconds(paper_config):
    costs = [
        plan.Cost("fedsc", "round", "cifar10", "fixup_resnet20", "*", "H200", 77.0, "test"),
        plan.Cost("fedsc", "probe_epoch", "cifar10", "fixup_resnet20", "*", "H200", 1.0, "test"),
        plan.Cost("fedal", "iteration", "cifar10", "cifar_resnet", "fedal", "H200", 1.7, "test"),
        plan.Cost("dpzv", "epoch", "cifar10", "vfl_cifar_cnn", "*", "H200", 6.0, "test"),
    ]
    planned, constants = plan.plan_and_constants(paper_config, costs)
    job = next(
        j
        for j in planned["fedsc"]["all runs"]
        if j.key[:3] == ("cifar10", "fedsc", "full_epsinf") and j.unit == "round"
    )
    assert job.measured and job.gpu_hours == pytest.approx(200 * 77.0 / 3600)  # 200 rounds, one seed per job
    probe = next(
        j
        for j in planned["fedsc"]["all runs"]
        if j.key[:3] == ("cifar10", "fedsc", "full_epsinf") and j.unit == "probe_epoch"
    )
    assert probe.gpu_hours == pytest.approx(200 * 1.0 / 3600)  # 200 probe epochs
    fedal = next(j for j in planned["fedal"]["table7"] if j.key[1] == "fedal" and j.key[0] == "cifar10")
    assert fedal.measured and fedal.gpu_hours == pytest.approx(fedal.units * 1.7 / 3600)
    dpzv = next(j for j in planned["dpzv"]["all runs"] if j.key[0] == "cifar10")
    assert dpzv.measured and dpzv.gpu_hours == pytest.approx(100 * 6.0 / 3600)  # 100 epochs, one variant per job
    unmeasured = next(j for j in planned["fedsc"]["all runs"] if j.key[0] == "svhn" and j.unit == "round")
    # no row on SVHN's pool: the cost model's seconds for its counted work times FedSC's measured/model factor
    model_seconds = constants.seconds(unmeasured.work) * constants.paper_factors["fedsc"]
    assert not unmeasured.measured and unmeasured.seconds_per_unit == pytest.approx(model_seconds)


def test_the_command_prints_every_paper_and_the_total(capsys):
    assert plan.main(["--configfile", *[str(REPO / p) for p in PAPER]]) == 0
    out = capsys.readouterr().out
    for name in ("fedsc table2", "fedal table7", "dpzv fig3", "steffle", "whole configuration"):
        assert name in out


def test_the_newest_row_wins_and_a_pool_row_prices_every_method_on_that_pool():
    costs = [
        plan.Cost("fedal", "iteration", "cifar10", "cifar_resnet", "fedmd", "H200", 4.4, "old"),
        plan.Cost("fedal", "iteration", "cifar10", "cifar_resnet", "fedmd", "H200", 1.9, "newer"),
        plan.Cost("fedal", "iteration", "cifar10", "cifar_resnet", "fedal", "H200", 1.7, "the scaling base"),
    ]
    assert plan._lookup(costs, "fedal", "iteration", "cifar10", "cifar_resnet", "fedmd") == (1.9, True)
    # FCCL has no row of its own: the newest row measured on the same pool prices it
    assert plan._lookup(costs, "fedal", "iteration", "cifar10", "cifar_resnet", "fccl") == (1.7, True)
    assert plan._lookup(costs, "fedal", "iteration", "svhn", "wrn", "fccl")[1] is False


def test_a_gpu_benchmark_replaces_the_rows_of_the_kinds_it_measured(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    from paper_scale import replace_costs

    table = tmp_path / "unit_costs.csv"
    table.write_text(
        "paper,unit,dataset,model,method,device,seconds,source\n"
        "fedal,iteration,cifar10,cifar_resnet,fedmd,H200,4.4,old\n"
        "dpzv,epoch,cifar10,vfl_cifar_cnn,*,H200,6.0,kept\n"
    )
    assert replace_costs(table, [["fedal", "iteration", "cifar10", "cifar_resnet", "fedmd", "H200", "1.9", "new"]]) == 1
    rows = plan.load_costs(table)
    assert [(r.method, r.seconds, r.source) for r in rows] == [("*", 6.0, "kept"), ("fedmd", 1.9, "new")]
