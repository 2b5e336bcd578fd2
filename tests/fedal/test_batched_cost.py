"""The planner charges FedAL's batched clients what they run (issue 30): one stacked step per
architecture, every client's FLOPs, the step's launches once whatever the number of clients."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fedrepro.experiments.cost import Step, count_step, stacked_launches
from fedrepro.plan import fedal_work

WRN = {"name": "wrn10_1", "options": {"in_channels": 3}}
LENET = {"name": "lenet5", "options": {"in_channels": 3, "input_size": 32}}


def _step(arch: dict, mode: str) -> Step:
    return Step.of(arch["name"], {**arch["options"], "num_classes": 10}, (3, 32, 32), 8, mode)


@pytest.mark.parametrize("mode", ["train", "forward"])
def test_a_stacked_step_has_one_clients_flops_and_launches_independent_of_the_group(mode):
    alone, stacked = count_step(_step(WRN, mode)), count_step(_step(WRN, f"{mode}_stacked"))
    assert stacked.flops == alone.flops
    assert stacked.launches == stacked_launches(_step(WRN, mode), clients=5)
    assert stacked.launches > alone.launches  # vmap's BatchNorm and grouped convolutions add copies


def _work(clients: int, method: str = "fedmd", **spec):
    spec = {"batch_size": 8, "tau": 5, "iterations": 100, "evals": 0, "pool": [WRN, LENET], **spec}
    run = SimpleNamespace(spec=spec, dataset="svhn", method=method)
    return fedal_work({}, run, count_step, clients)


def test_batched_fedal_work_charges_launches_per_architecture_and_flops_per_client():
    few, many = _work(4), _work(12)
    assert many.launches == pytest.approx(few.launches)
    assert many.flops == pytest.approx(3 * few.flops)
    stacked = sum(count_step(_step(a, "train_stacked")).launches for a in (WRN, LENET))
    assert few.launches == pytest.approx(2 * stacked)  # FedMD: a local and a global step, no anchor


def test_the_per_client_loop_is_charged_per_client():
    for method in ("fedmd", "fedproto"):
        unbatched = _work(4, method=method, batched=False)
        assert _work(12, method=method, batched=False).launches == pytest.approx(3 * unbatched.launches)
    assert _work(4, batched=False).flops == pytest.approx(_work(4).flops)


def test_fewer_clients_than_architectures_launch_at_most_one_step_per_client():
    assert _work(1).launches == pytest.approx(_work(2).launches / 2)
