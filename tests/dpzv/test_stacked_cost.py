"""The planner's price of DPZV's stacked segments (`stack_clients`, plan.dpzv_work): the expected segment length
against the schedule the code draws, the per-client launches against a count of the code, and an epoch's
work composed from its parts."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from fedrepro import plan
from fedrepro.algorithms.dpzv.base import build_vfl_data
from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.stacked import ClientStack
from fedrepro.data.partition import vertical_partition
from fedrepro.experiments.cost import Work, count
from fedrepro.fl import optim
from fedrepro.models import build_model

from .conftest import tiny_images, tiny_settings


def test_expected_segment_length_closed_form():
    """By hand: 1 + 2/3 + 2/9 for three clients; one client's segments are one round. Two clients at q = (3/4, 1/4):
    a segment is one round, or two when its first client is followed by the other; its first client is the
    previous segment's repeat, a chain whose stationary law gives client 0 with probability 9/10 (pi_0 =
    pi_1 / pi_0 = T_01 / T_10 = (1/16) / (9/16)), so
    E = 0.9 (1 + 1/4) + 0.1 (1 + 3/4)."""
    assert plan.expected_segment_length(3) == pytest.approx(1 + 2 / 3 + 2 / 9)
    assert plan.expected_segment_length(1) == 1.0
    assert plan.expected_segment_length(3, [2, 2, 2]) == pytest.approx(1 + 2 / 3 + 2 / 9)
    assert plan.expected_segment_length(12) == pytest.approx(sum(math.perm(12, k) / 12**k for k in range(1, 13)))
    assert plan.expected_segment_length(2, [3, 1]) == pytest.approx(0.9 * 1.25 + 0.1 * 1.75)


def _mean_segment(clients: int, schedule: str, weights=None, rounds=30000) -> float:
    """Mean length of the segments `VFLAlgorithm.segment` cuts from the schedule the code draws."""
    x_tr, y_tr, x_te, y_te = tiny_images(n_train=800)
    p = vertical_partition((1, 8, 8), "rows", clients)
    data = build_vfl_data(x_tr, y_tr, x_te, y_te, p.features, p.feature_shapes, 3, "image", val="test")
    settings = tiny_settings(schedule=schedule, client_weights=weights, extra={"stack_clients": True})
    algo = DPZV(data, settings, seed=1)
    lengths = []
    while algo.server_round < rounds:
        turns = algo.segment(rounds)
        algo.server_round += len(turns)
        lengths.append(len(turns))
    return float(np.mean(lengths[:-1]))  # the last one is cut by the end


@pytest.mark.parametrize(
    ("clients", "schedule", "weights", "tolerance"),
    [
        (3, "random", None, 0.03),
        (8, "random", None, 0.03),
        (8, "permutation", None, 0.05),
        (3, "random", [4, 1, 1], 0.03),
    ],
)
def test_expected_segment_length_is_what_the_schedule_cuts(clients, schedule, weights, tolerance):
    want = plan.expected_segment_length(clients, weights)
    assert _mean_segment(clients, schedule, weights) == pytest.approx(want, rel=tolerance)


def test_a_snapshot_is_one_launch_and_an_sgd_step_three():
    """What STACKED_SNAPSHOTS / STACKED_SGD_STEP charge per client, counted on the meta device (one foreach
    group, as on a GPU)."""
    with torch.device("meta"):
        model = build_model("vfl_resnet18", embed_dim=8, in_channels=3)
    stack = ClientStack(model, 2)
    assert count(lambda: stack.snapshot(model, 1)).launches == plan.STACKED_SNAPSHOTS / 2
    params = list(model.parameters())
    sgd = optim.SGD(params, lr=0.1, momentum=0.9)
    for p in params:
        p.grad = torch.zeros_like(p)
    saved, optim.CPU_GROUP_ELEMENTS = optim.CPU_GROUP_ELEMENTS, math.inf
    try:
        sgd.step()  # the first step allocates the momentum buffers
        assert count(sgd.step).launches == plan.STACKED_SGD_STEP
    finally:
        optim.CPU_GROUP_ELEMENTS = saved


class ModeCounts:
    """Each step mode its own work (the planner's counts table stubbed)."""

    WORK = {
        "forward": Work(3e8, 100),
        "train": Work(1e9, 300),
        "forward_stacked": Work(3e8, 130),
        "train_stacked": Work(1e9, 380),
        "direction": Work(0.0, 57),  # a zeroth-order direction (cost.direction_step): the same stacked or not
    }

    def __call__(self, step):
        return self.WORK[step.mode]


@pytest.fixture(scope="module")
def paper_config():
    return plan.load_config(["config.yaml", "configs/paper.yaml"])


def _run(config, dataset, method, **spec):
    from fedrepro.experiments import dpzv as planner

    run = next(r for r in planner.runs(config) if (r.dataset, r.method) == (dataset, method))
    return dataclasses.replace(run, spec={**run.spec, **spec})


@pytest.mark.parametrize("method", ["dpzv", "zoo_vfl", "vafl"])
def test_a_stacked_modelnet40_epoch(paper_config, method):
    """Stacked: the same FLOPs; each client's forwards (ZO) or training step (first order) replaced by its own
    launches (direction and two snapshots; snapshot and SGD step) plus the stacked program once per segment."""
    counts = ModeCounts()
    alone = plan.dpzv_work(paper_config, _run(paper_config, "modelnet40", method, stack_clients=False), counts)
    stacked = plan.dpzv_work(paper_config, _run(paper_config, "modelnet40", method), counts)
    assert stacked.flops == pytest.approx(alone.flops)
    rounds = 12 * (int(9843 * 0.9) // 32)  # 3,312 per epoch
    w = ModeCounts.WORK
    if method in plan.ZO_METHODS:
        saved = 2 * w["forward"].launches - plan.STACKED_SNAPSHOTS
        program = w["forward_stacked"].launches
    else:
        saved = w["train"].launches - plan.STACKED_SGD_STEP - 1
        program = w["train_stacked"].launches
    segments = rounds / plan.expected_segment_length(12)
    assert stacked.launches == pytest.approx(alone.launches - saved * rounds + program * segments)


def test_bert_clients_are_priced_per_client(paper_config):
    """Amazon's pre-trained BERT cannot run under vmap (algorithms/dpzv/stacked.py): no stacking is priced."""
    counts = ModeCounts()
    run = _run(paper_config, "amazon_polarity", "dpzv")
    assert plan.dpzv_work(paper_config, run, counts) == plan.dpzv_work(
        paper_config, _run(paper_config, "amazon_polarity", "dpzv", stack_clients=False), counts
    )
