"""The planner charges FCCL and FCCL+ what fccl.py runs (issue 30): per iteration one collaborative
step and `local_steps` / tau local steps, each local step with its frozen teachers' forwards (FCCL: the
inter- and intra-domain teachers, FCCL+: the inter-domain one) and FCCL's teacher pretraining; batched,
one stacked program per architecture (every client's FLOPs, the launches once)."""

from __future__ import annotations

import pytest

from fedrepro.experiments.cost import count_step

from .test_batched_cost import LENET, WRN, _step, _work

CLIENTS = 4  # two per architecture of test_batched_cost's pool
ITERATIONS = 100  # test_batched_cost._work's budget


def _expected(trains: float, frozen: float, batched: bool):
    """Work of one iteration of all clients, summed from the counted steps of each architecture."""
    share = CLIENTS / 2
    flops = launches = 0.0
    for arch in (WRN, LENET):
        suffix = "_stacked" if batched else ""
        train, forward = count_step(_step(arch, "train" + suffix)), count_step(_step(arch, "forward" + suffix))
        flops += (train.flops * trains + forward.flops * frozen) * share
        launches += (train.launches * trains + forward.launches * frozen) * (1 if batched else share)
    return flops, launches


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize(
    ("method", "spec", "trains", "frozen"),
    [
        ("fccl", {}, 2, 2),  # local_steps = tau: one local step per iteration, inter + intra forwards
        ("fccl", {"local_steps": 10}, 3, 4),
        ("fccl_plus", {"local_steps": 30}, 7, 6),  # the configs' FCCL+: six local steps, the inter teacher
        ("fccl_plus", {}, 2, 1),
    ],
)
def test_fccl_iteration_counts_its_collaborative_and_local_steps_and_teachers(method, spec, trains, frozen, batched):
    work = _work(CLIENTS, method=method, batched=batched, **spec)
    flops, launches = _expected(trains, frozen, batched)
    assert work.flops == pytest.approx(flops)
    assert work.launches == pytest.approx(launches)


@pytest.mark.parametrize("batched", [True, False])
def test_fccl_teacher_pretraining_is_a_stacked_step_when_batched(batched):
    """50 pretraining steps in a 100-iteration run: half a training step per iteration."""
    work = _work(CLIENTS, method="fccl", batched=batched, pretrain_iters=ITERATIONS // 2)
    flops, launches = _expected(2.5, 2, batched)
    assert work.flops == pytest.approx(flops) and work.launches == pytest.approx(launches)


def test_fccl_plus_generic_pretraining_stays_per_client():
    """FCCL+ has no teacher: a `pretrain_iters` is base.Federation's per-client pretraining."""
    work = _work(CLIENTS, method="fccl_plus", pretrain_iters=ITERATIONS // 2)
    _, launches = _expected(2, 1, batched=True)
    per_client = sum(count_step(_step(arch, "train")).launches for arch in (WRN, LENET)) * CLIENTS / 2
    assert work.launches == pytest.approx(launches + per_client / 2)


def test_batched_fccl_launches_do_not_grow_with_the_clients():
    few, many = _work(4, method="fccl_plus", local_steps=30), _work(12, method="fccl_plus", local_steps=30)
    assert many.launches == pytest.approx(few.launches)
    assert many.flops == pytest.approx(3 * few.flops)
