"""The measured rows of benchmarks/unit_costs.csv counted as they ran (issue 42): FedSC's DP-CalR whenever
sharing is on (eps = inf included), FedX's three trained and three frozen views, and the FedAL rows with the
per-tensor Adam they timed. Expected values come from per-image counts of the networks (FLOPs are linear in
the batch) and from the optimisers' closed-form launch counts, not from the planner's composition."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from fedrepro import plan
from fedrepro.experiments import cost
from fedrepro.experiments.cost import Constants, Step, Work

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def paper_config():
    return plan.load_config([str(REPO / "config.yaml"), str(REPO / "configs" / "paper.yaml")])


@pytest.fixture(scope="module")
def counts():
    return plan.load_default_counts()


def _run(config, paper: str, dataset: str, method: str, setting: str):
    import importlib

    runs = importlib.import_module(f"fedrepro.experiments.{paper}").runs(config)
    return next(r for r in runs if (r.dataset, r.method, r.setting) == (dataset, method, setting))


def _per_image(run, mode: str) -> float:
    """FLOPs per image of the run's encoder and projector (forward, or a training step), counted at batch 2."""
    encoder = run.spec["encoder"]
    head = (run.spec["projector"]["hidden"], run.spec["projector"]["out"])
    options = {**encoder.get("kwargs", {}), "num_classes": 0}
    step = Step.of(encoder["name"], options, (3, 32, 32), 2, mode, "sgd", head)
    return cost.count_step(step).flops / 2


def _quiet(run, **changes):
    """The run without its kNN monitor (and with `changes` to its spec)."""
    return dataclasses.replace(run, spec={**run.spec, "knn": {**run.spec["knn"], "every": 0}, **changes})


def test_dpcalr_is_charged_whenever_sharing_is_on_eps_inf_included(paper_config, counts):
    """CIFAR-10 eps = inf, full participation: every round each of the 10 clients forwards 5 passes x 2 views
    of its data (fedsc.py FedSC.before_training with sigma 0), 10 x 50,000 images a round."""
    run = _run(paper_config, "fedsc", "cifar10", "fedsc", "full_epsinf")
    assert (run.spec["privacy"]["eps"], run.spec["sharing"]) == ("inf", {"after": 0.0, "every": 1})
    sharing = plan.fedsc_work(paper_config, _quiet(run), counts)[0]
    without = plan.fedsc_work(paper_config, _quiet(run, sharing=None), counts)[0]
    assert sharing.flops - without.flops == pytest.approx(10 * 50_000 * _per_image(run, "forward"), rel=1e-5)
    # in chunks of 1024 (FedSC.dpcalr's batch_size): the chunk's forward launches per 1024 images
    chunk = counts(
        Step.of("fixup_resnet20", {"widen_factor": 8, "num_classes": 0}, (3, 32, 32), 1024, "forward", head=(1024, 512))
    )
    assert sharing.launches - without.launches == pytest.approx(chunk.launches * 10 * 50_000 / 1024)


def test_fedx_trains_three_views_and_forwards_them_through_the_frozen_model(paper_config, counts):
    """fedx.py FedX.client_update: two views and an anchor view through the trained network and the frozen
    global one: 3 training-step images and 3 forward images per sample (12 F), not FedAvg+SC's 2 (6 F)."""
    fedx, fedavg_sc = (_run(paper_config, "fedsc", "cifar10", m, "full") for m in ("fedx", "fedavg_sc"))
    train, forward = _per_image(fedx, "train"), _per_image(fedx, "forward")
    samples = 5 * 50_000  # 5 local epochs of every client's data
    got = plan.fedsc_work(paper_config, _quiet(fedx), counts)[0].flops
    assert got == pytest.approx(samples * 3 * (train + forward), rel=1e-5)
    assert plan.fedsc_work(paper_config, _quiet(fedavg_sc), counts)[0].flops == pytest.approx(
        samples * 2 * train, rel=1e-5
    )


def test_a_per_tensor_adam_launches_seven_kernels_per_tensor():
    """The `adam_loop` step (fl/optim.py before its foreach ops: 7 ops per tensor) launches 7 per parameter
    tensor where today's foreach Adam launches 17 for all of them (8 foreach ops, and 9 on its device step count and
    bias corrections: add_, pow, rsub, div, pow, rsub, sqrt, two casts); the same FLOPs."""
    step = Step.of("resnet18", {"in_channels": 3, "num_classes": 10}, (3, 32, 32), 8, "train")
    tensors = len(cost.parameter_numels(step)[0])
    foreach, loop = cost.count_step(step), cost.count_step(dataclasses.replace(step, optimizer="adam_loop"))
    assert loop.launches - foreach.launches == 7 * tensors - 17 and tensors > 50
    assert loop.flops == foreach.flops
    with pytest.raises(ValueError, match="adam_loop"):
        cost.count_step(dataclasses.replace(step, optimizer="adamw"))


def _rows() -> list[dict]:
    with open(plan.COSTS, newline="") as f:
        return list(csv.DictReader(f))


def test_the_fedal_rows_are_counted_with_the_code_they_timed(paper_config, counts):
    """The FedAL rows (timed at 72f0df1): the per-client loop, the per-tensor Adam and an anchor forward at
    every step. Per client and iteration FedAL runs 2 training steps and 2 anchor forwards, FedMD 2 steps; the
    per-tensor Adam launches 7 x tensors where today's launches 17 (test above)."""
    rows = [r for r in _rows() if r["paper"] == "fedal"]
    assert {r["method"] for r in rows} == {"fedal", "fedmd"}
    for row in rows:
        run = next(r for r in _fedal_runs(paper_config, row["method"]) if r.setting.startswith(row["setting"]))
        clients = plan._fedal_clients(run.setting)
        per_client = dataclasses.replace(run, spec={**run.spec, "batched": False})
        today = plan.fedal_work(paper_config, per_client, counts, clients, live_first_anchor=False)
        extra = 0.0  # two Adam steps per client and iteration; the clients share the pool's architectures
        for arch in run.spec["pool"]:
            step = Step.of(arch["name"], {**arch["options"], "num_classes": 10}, (3, 32, 32), 8, "train")
            extra += (7 * len(cost.parameter_numels(step)[0]) - 17) * 2 * clients / len(run.spec["pool"])
        assert float(row["launches"]) == pytest.approx(today.launches + extra, rel=1e-5)
        assert float(row["flops"]) == pytest.approx(today.flops, rel=1e-5)
        assert row["counted"] == "as measured"


def _fedal_runs(config, method: str):
    from fedrepro.experiments import fedal

    return [r for r in fedal.runs(config) if (r.dataset, r.method) == ("cifar10", method)]


def test_the_fedsc_row_is_its_eps_inf_runs_count(paper_config, counts):
    """The 77 s row timed CIFAR-10 FedSC at eps = inf, full participation: its counted FLOPs include DP-CalR
    on every round (about 10.6e15, not the 8.0e15 counted without it)."""
    row = next(r for r in _rows() if r["paper"] == "fedsc")
    run = _run(paper_config, "fedsc", row["dataset"], row["method"], row["setting"])
    work = plan.fedsc_work(paper_config, run, counts)[0]
    assert float(row["flops"]) == pytest.approx(work.flops, rel=1e-5)
    assert float(row["launches"]) == pytest.approx(work.launches, rel=1e-5)
    assert 10.5e15 < float(row["flops"]) < 10.7e15


# ------------------------------------------------------------------------------------ the overlap model
def test_the_overlap_model_takes_the_longer_of_flop_and_launch_time():
    additive, overlap = Constants(1 / 100e12, 20e-6), Constants(1 / 100e12, 20e-6, overlap=True)
    flop_bound, launch_bound = Work(1e15, 1e4), Work(1e12, 1e5)  # 10 s vs 0.2 s; 0.01 s vs 2 s
    assert overlap.seconds(flop_bound) == pytest.approx(10.0) and overlap.seconds(launch_bound) == pytest.approx(2.0)
    assert additive.seconds(flop_bound) == pytest.approx(10.2) and additive.seconds(launch_bound) == pytest.approx(2.01)


def test_the_overlap_fit_recovers_the_constants_of_its_points():
    """Points made by the overlap model, FLOP-bound and launch-bound ones, give back its constants; the
    additive fit of the same points does not."""
    truth = Constants(1 / 140e12, 35e-6, overlap=True)
    works = [Work(1e16, 2e5), Work(3e15, 5e4), Work(1e13, 2e5), Work(5e12, 3e4)]
    points = [(w, truth.seconds(w)) for w in works]
    got = cost.fit(points, overlap=True)
    assert got.overlap
    assert got.seconds_per_flop == pytest.approx(truth.seconds_per_flop, rel=1e-3)
    assert got.seconds_per_launch == pytest.approx(truth.seconds_per_launch, rel=1e-3)
    assert cost.relative_error(got, points) < 1e-8 < cost.relative_error(cost.fit(points), points)


def test_the_planner_prices_with_the_overlap_model_when_asked(paper_config):
    """`python -m fedrepro.plan --overlap`: the constants fitted and every job priced with max(); DPZV (Amazon's
    BERT: large kernels whose time hides the launches) costs clearly less than under the additive model."""
    costs = plan.load_costs()
    planned, additive = plan.plan_and_constants(paper_config, costs)
    sums = {p: sum(j.gpu_hours for j in per["all runs"]) for p, per in planned.items()}
    planned, overlap = plan.plan_and_constants(paper_config, costs, overlap=True)
    maxes = {p: sum(j.gpu_hours for j in per["all runs"]) for p, per in planned.items()}
    assert overlap.overlap and not additive.overlap
    assert "the longer of FLOP and launch time" in plan.report(planned, costs, overlap)
    assert maxes["dpzv"] < 0.9 * sums["dpzv"]  # Amazon's BERT: large kernels, launches hidden
