"""The cost planner's model (issue 30): counted FLOPs and launches, the fitted constants, which row
prices a run, and the units composed from the paper's structure (participation, kNN, DPZV rounds)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from fedrepro import plan
from fedrepro.experiments import cost
from fedrepro.experiments.cost import Constants, Counts, Step, Work

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def paper_config():
    return plan.load_config([str(REPO / "config.yaml"), str(REPO / "configs" / "paper.yaml")])


# ------------------------------------------------------------------------------------ counting
def test_a_linear_layer_counts_its_closed_form_flops_and_one_launch():
    """logreg = Flatten (a view: no kernel) + Linear (addmm: one kernel, 2 B I O FLOPs)."""
    b, i, o = 8, 20, 3
    forward = cost.count_step(Step.of("logreg", {"in_features": i, "num_classes": o}, (i,), b, "forward"))
    assert forward == Work(2 * b * i * o, 1)
    train = cost.count_step(Step.of("logreg", {"in_features": i, "num_classes": o}, (i,), b, "train"))
    # the input needs no gradient: the backward pass is the weight's gradient only (another 2 B I O)
    assert train.flops == 4 * b * i * o
    assert train.launches > forward.launches + 1  # backward and the optimiser's foreach ops launch too


def test_a_convolution_counts_its_closed_form_flops():
    """LeNet-5's first layer: a 5x5 convolution, 6 channels; the counter's FLOPs of the whole network
    exceed it by the rest of the network, and scale linearly with the batch."""
    one = cost.count_step(Step.of("lenet5", {"in_channels": 1, "num_classes": 10}, (1, 28, 28), 1, "forward"))
    four = cost.count_step(Step.of("lenet5", {"in_channels": 1, "num_classes": 10}, (1, 28, 28), 4, "forward"))
    assert four.flops == 4 * one.flops and four.launches == one.launches
    from torch import nn

    conv = next(
        m
        for m in __import__("fedrepro.models", fromlist=["x"]).build_model("lenet5").modules()
        if isinstance(m, nn.Conv2d)
    )
    out = 28 - conv.kernel_size[0] + 1 + 2 * conv.padding[0]
    first = 2 * conv.out_channels * out * out * conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1]
    assert one.flops > first


def test_the_stored_counts_are_the_code_s_counts_and_cover_the_paper_config(paper_config):
    """benchmarks/unit_counts.csv (benchmarks/cost_counts.py) holds every step the paper scale asks for,
    and a stored row is what counting today gives (a model change would leave it stale)."""
    counts = plan.load_default_counts()
    plan.jobs(paper_config, counts)
    assert not counts.missing
    key = next(k for k in counts.table if Step.from_key(k).model == "lenet5")
    fresh, stored = cost.count_step(Step.from_key(key)), counts.table[key]
    assert (fresh.flops, fresh.launches) == pytest.approx((stored.flops, stored.launches), rel=1e-5)


PLANS_WITHOUT_MODELS = """
import sys, yaml
from fedrepro.plan import duration_warnings
assert duration_warnings(yaml.safe_load(open(sys.argv[1]))) == []
print(sorted(m for m in ("torch", "scipy", "fedrepro.algorithms.dpzv.dpzv") if m in sys.modules))
"""


def test_planning_the_default_config_counts_nothing_and_builds_no_model():
    """Every Snakemake start prices the config (`print_duration_warnings`): at the default scale the stored
    counts hold every step, the zeroth-order directions included, so it imports neither torch nor a method."""
    import subprocess
    import sys

    counts = plan.load_default_counts()
    plan.jobs(plan.load_config([str(REPO / "config.yaml")]), counts)
    assert not counts.missing
    result = subprocess.run(
        [sys.executable, "-c", PLANS_WITHOUT_MODELS, str(REPO / "config.yaml")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["[]"]


def test_a_stored_direction_count_is_the_method_s_count():
    """A direction step (cost.direction_step) holds what the method's own client_direction_launches gives."""
    from fedrepro.algorithms.dpzv import dpzv

    counts = plan.load_default_counts()
    key = next(k for k in counts.table if Step.from_key(k).mode == cost.DIRECTION and ":sphere:" in k and "dpzv:" in k)
    step = Step.from_key(key)
    numels, buffers = cost.parameter_numels(step)
    assert counts.table[key].launches == dpzv.client_direction_launches(numels, buffers, "sphere", 0.9) > 0
    assert cost.count_step(step) == counts.table[key]


# ------------------------------------------------------------------------------------ the model
def test_the_fit_recovers_the_constants_of_its_points():
    truth = Constants(1 / 100e12, 20e-6)
    works = [Work(1e15, 1e5), Work(1e12, 1e6), Work(5e13, 3e5)]
    fitted = cost.fit([(w, truth.seconds(w)) for w in works])
    assert fitted.seconds_per_flop == pytest.approx(truth.seconds_per_flop, rel=1e-9)
    assert fitted.seconds_per_launch == pytest.approx(truth.seconds_per_launch, rel=1e-9)
    assert fitted.achieved_fraction == pytest.approx(100e12 / cost.PEAK_FLOPS["H200"])
    assert fitted.floor(Work(989.5e12, 1e9)) == pytest.approx(1.0)  # FLOPs at the peak; launches free


def test_the_fit_keeps_both_constants_non_negative():
    # a FLOP-only point alone: the launch constant would be undetermined; the fit sets it to 0
    fitted = cost.fit([(Work(1e14, 0), 2.0)])
    assert fitted.seconds_per_launch == 0 and fitted.seconds(Work(1e14, 0)) == pytest.approx(2.0)
    # points that a negative launch constant would fit better still give constants >= 0
    fitted = cost.fit([(Work(1e14, 1e3), 1.0), (Work(2e14, 1e6), 1.0)])
    assert fitted.seconds_per_flop >= 0 and fitted.seconds_per_launch >= 0


# ------------------------------------------------------------------------------------ which row
def _c(method, seconds, dataset="cifar10", model="cifar_resnet"):
    return plan.Cost("fedal", "iteration", dataset, model, method, "H200", seconds, "test")


def test_the_most_specific_row_wins_then_the_newest():
    own_old, every_new, other_newest = _c("fedmd", 4.4), _c("*", 3.0), _c("fedal", 1.7)
    assert (
        plan._row([own_old, every_new, other_newest], "fedal", "iteration", "cifar10", "cifar_resnet", "fedmd")
        is own_old
    )
    # no row of its own: a row for every method, even an older one, beats another method's row
    assert plan._row([every_new, other_newest], "fedal", "iteration", "cifar10", "cifar_resnet", "fccl") is every_new
    # another method's row on the same pool prices it; among equals the newest (last) wins
    newer = _c("fedal", 1.5)
    assert plan._row([other_newest, newer], "fedal", "iteration", "cifar10", "cifar_resnet", "fccl") is newer
    assert plan._row([other_newest], "fedal", "iteration", "svhn", "cifar_resnet", "fccl") is None


def _job(method, work, dataset="cifar10", model="cifar_resnet", setting="cifar_resnet-a1-c15"):
    return plan.Job("fedal", (dataset, method, setting, "s0"), 100, "iteration", 0.0, 1, False, model, work)


def test_a_pool_row_prices_every_method_on_the_pool_scaled_by_its_work():
    fedal, fedmd = _job("fedal", Work(2e12, 4e4)), _job("fedmd", Work(1e12, 2e4))
    fccl = _job("fccl", Work(3e12, 5e4))
    elsewhere = _job("fedal", Work(1e10, 1e4), dataset="svhn", model="svhn_wrn", setting="svhn_wrn-a1-c20")
    planned = {"fedal": {"all runs": [fedal, fedmd, fccl, elsewhere]}}
    constants = plan.price(planned, [_c("fedal", 1.7), _c("fedmd", 1.9)])
    assert fedal.measured and fedal.seconds_per_unit == pytest.approx(1.7)
    assert fedmd.measured and fedmd.seconds_per_unit == pytest.approx(1.9)
    # FCCL has no row: the newest row on its pool (FedMD's), scaled by the model's work ratio
    assert fccl.measured
    assert fccl.seconds_per_unit == pytest.approx(1.9 * constants.seconds(fccl.work) / constants.seconds(fedmd.work))
    # another pool: the model, times the paper's measured / model factor (geometric mean over its rows);
    # FedAL's and FedMD's work are proportional, so no pair of constants fits both rows: the factor is not 1
    assert not elsewhere.measured
    factor = math.sqrt(1.7 / constants.seconds(fedal.work) * 1.9 / constants.seconds(fedmd.work))
    assert factor != pytest.approx(1.0) and constants.paper_factors["fedal"] == pytest.approx(factor)
    assert elsewhere.seconds_per_unit == pytest.approx(constants.seconds(elsewhere.work) * factor)
    assert elsewhere.floor_hours == pytest.approx(100 * 1e10 / cost.PEAK_FLOPS["H200"] / 3600)


def test_the_report_prints_the_floor_and_the_estimate_per_table():
    job = _job("fedal", Work(2e15, 4e4))
    planned = {"fedal": {"table7": [job], "all runs": [job]}}
    costs = [_c("fedal", 36.0)]
    text = plan.report(planned, costs, plan.price(planned, costs))
    floor = 100 * 2e15 / cost.PEAK_FLOPS["H200"] / 3600
    assert f"| fedal table7 | 1 | {floor:,.1f} | {100 * 36 / 3600:,.1f} | {100 * 36 / 3600:,.1f} |" in text


# ------------------------------------------------------------------------------------ units
class FixedCounts(Counts):
    """Every training step costs TRAIN, every forward FORWARD."""

    TRAIN, FORWARD = Work(1e9, 300), Work(3e8, 100)

    def __call__(self, step):
        return self.TRAIN if step.mode.startswith("train") else self.FORWARD


def _run(paper_config, planner, dataset, method, setting):
    return next(r for r in planner.runs(paper_config) if (r.dataset, r.method, r.setting) == (dataset, method, setting))


def test_a_fedsc_round_charges_the_participating_clients_and_the_knn_monitor(paper_config):
    from fedrepro.experiments import fedsc

    counts, b, n, n_test = FixedCounts(), 512, 73257, 26032
    full = plan.fedsc_work(paper_config, _run(paper_config, fedsc, "svhn", "fedsc", "full_epsinf"), counts)[0]
    partial = plan.fedsc_work(paper_config, _run(paper_config, fedsc, "svhn", "fedsc", "partial_epsinf"), counts)[0]
    knn = counts.FORWARD * ((n + n_test) / b)  # training and test images, every round for Figure 2's runs
    # eps = inf shares every round (sigma 0): DP-CalR forwards 5 passes x 2 views of the syncing clients' data
    # in chunks of 1024; fully participating, every client every round
    dpcalr = counts.FORWARD * (n * 10 / 1024)
    assert full.flops == pytest.approx((counts.TRAIN * (5 * n / b) + knn + dpcalr).flops)
    # 2 of 5 clients train; Figure 2 does not draw this run: the monitor runs at the last of 200 rounds only;
    # all 5 clients share at the first sharing round, then the 2 participants
    dpcalr = counts.FORWARD * ((5 + 199 * 2) / 200 * (n / 5) * 10 / 1024)
    assert partial.flops == pytest.approx((counts.TRAIN * (5 * n * 2 / 5 / b) + knn * (1 / 200) + dpcalr).flops)
    run = _run(paper_config, fedsc, "svhn", "fedsc", "full_epsinf")
    quiet = dataclasses.replace(run, spec={**run.spec, "knn": {**run.spec["knn"], "every": 0}, "sharing": None})
    assert plan.fedsc_work(paper_config, quiet, counts)[0].flops == pytest.approx((counts.TRAIN * (5 * n / b)).flops)


def test_a_dpzv_modelnet40_epoch_is_3312_server_rounds(paper_config):
    """12 views, 9,843 objects less the 10 % validation holdout, batch 32: 12 x 276 rounds (issue 30)."""
    from fedrepro.experiments import dpzv

    run = next(r for r in dpzv.runs(paper_config) if (r.dataset, r.method) == ("modelnet40", "dpzv"))
    counts = FixedCounts()
    epoch = plan.dpzv_work(paper_config, run, counts)
    rows = int(9843 * 0.9)
    # two ZO forwards of the client and two of the head (server_update: zo); the directions' launches are
    # counted against the code in tests/dpzv/test_zo_cost.py
    per_round = counts.FORWARD * 4
    evaluation = counts.FORWARD * (12 * (9843 - rows + 2468) / 32)
    assert 12 * (rows // 32) == 3312
    assert epoch.flops == pytest.approx((per_round * 3312 + evaluation).flops)
    vafl = next(r for r in dpzv.runs(paper_config) if (r.dataset, r.method) == ("modelnet40", "vafl"))
    assert plan.dpzv_work(paper_config, vafl, counts).flops == pytest.approx(
        ((counts.TRAIN * 2) * 3312 + evaluation).flops
    )


def test_a_fedal_iteration_is_two_steps_per_client_and_the_lf_anchors_not_shared(paper_config):
    from fedrepro.experiments import fedal

    run = next(r for r in fedal.output_runs(paper_config, "table4") if r.method == "fedal" and "-c20-" in r.setting)
    counts = FixedCounts()
    evals = 30 / 10000 * 24700 / plan.EVAL_BATCH
    # tau 5: the first of each stage's 5 anchor forwards is the live forward (FedAL.share_first_anchor)
    expected = (counts.TRAIN * 2 + counts.FORWARD * (2 * 4 / 5 + evals)) * 20
    assert plan.fedal_work(paper_config, run, counts, 20).flops == pytest.approx(expected.flops)
    assert math.isclose(plan.FEDAL_STEPS["fedmd"][1], 0)  # FedMD keeps no anchor
