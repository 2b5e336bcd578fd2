"""The planner charges the batched FedAL baselines what they run (issue 30): FedProto, FD and FedAvg one
stacked step per architecture (every client's FLOPs, the launches once); FedDF and FedDF-AL their
clients' steps and the server's teacher forwards stacked likewise, and one step of each group's server
model."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest

from fedrepro.experiments.cost import count_step
from fedrepro.plan import fedal_work

from .test_batched_cost import LENET, WRN, _step

POOL = (WRN, LENET)
count = functools.cache(count_step)  # each step counted once for the whole file (seconds, not minutes)


def _work(clients: int, method: str, **spec):
    """test_batched_cost's `_work` with the cached counter."""
    spec = {"batch_size": 8, "tau": 5, "iterations": 100, "evals": 0, "pool": list(POOL), **spec}
    return fedal_work({}, SimpleNamespace(spec=spec, dataset="svhn", method=method), count, clients)


def _launches(mode: str) -> float:
    return sum(count(_step(a, mode)).launches for a in POOL)


def _flops(mode: str) -> float:
    return sum(count(_step(a, mode)).flops for a in POOL)


@pytest.mark.parametrize(
    ("method", "spec", "trains"),
    [("fedproto", {}, 2), ("fedproto", {"variant": "prototypes"}, 1), ("fd", {}, 1), ("fedavg", {}, 1)],
)
def test_stacked_baselines_launch_once_per_architecture(method, spec, trains):
    few, many = _work(4, method, **spec), _work(12, method, **spec)
    assert few.launches == pytest.approx(trains * _launches("train_stacked"))
    assert many.launches == pytest.approx(few.launches)
    assert many.flops == pytest.approx(3 * few.flops) == pytest.approx(12 / 2 * trains * _flops("train"))
    per_client = _work(4, method, batched=False, **spec)
    assert per_client.flops == pytest.approx(few.flops)
    assert per_client.launches == pytest.approx(4 / 2 * trains * _launches("train"))


@pytest.mark.parametrize("method", ["feddf", "feddf_al"])
def test_feddf_stacks_its_clients_and_teachers_and_charges_one_server_step_per_group(method):
    few, many = _work(4, method), _work(12, method)
    server = _launches("train")  # one step of each group's model
    assert few.launches == pytest.approx(_launches("train_stacked") + _launches("forward_stacked") + server)
    assert many.launches == pytest.approx(few.launches)
    assert few.flops == pytest.approx(4 / 2 * (_flops("train") + _flops("forward")) + _flops("train"))
    per_client = _work(4, method, batched=False)
    assert per_client.flops == pytest.approx(few.flops)
    assert per_client.launches == pytest.approx(4 / 2 * (_launches("train") + _launches("forward")) + server)


def test_feddf_with_less_forgetting_adds_the_anchor_forward_per_local_step():
    plain, lf = _work(4, "feddf_al"), _work(4, "feddf_al", use_lf=True)
    assert lf.launches - plain.launches == pytest.approx(_launches("forward_stacked"))
    assert lf.flops - plain.flops == pytest.approx(4 / 2 * _flops("forward"))
