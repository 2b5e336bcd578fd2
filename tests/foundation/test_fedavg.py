"""Supervised FedAvg: batched and per-client training agree, it learns, and the server sees only weights."""

import numpy as np
import torch

from fedrepro.algorithms.fedavg.fedavg import FedAvg
from fedrepro.fl import seeding
from tests.foundation.conftest import FEDAVG_SPEC


def one_round(spec, blobs, clients, seed=0):
    seeding.seed_everything(seed)
    algo = FedAvg(spec, blobs, clients, seed, torch.device("cpu"))
    algo.wire.record = True
    algo.round(1)
    return algo


def test_batched_and_per_client_loop_compute_the_same_update(blobs, clients):
    spec = {**FEDAVG_SPEC, "momentum": 0.9, "weight_decay": 1e-3}
    batched = one_round({**spec, "batched": True}, blobs, clients)
    looped = one_round({**spec, "batched": False}, blobs, clients)
    for (name, a), (_, b) in zip(batched.model.state_dict().items(), looped.model.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_aggregate_is_size_weighted_average_of_client_weights(blobs, clients):
    spec = {**FEDAVG_SPEC, "participation": 1.0}
    algo = one_round(spec, blobs, clients)
    up = [m for m in algo.wire.messages if m.receiver == "server"]
    assert len(up) == len(clients)
    uniform = one_round({**spec, "weighting": "uniform"}, blobs, clients)
    assert not torch.allclose(algo.model.head.weight, uniform.model.head.weight)


def test_server_receives_only_weights_and_clients_only_weights(blobs, clients):
    algo = one_round(FEDAVG_SPEC, blobs, clients)
    assert algo.wire.kinds("server") == {"weights"}
    senders = {m.sender for m in algo.wire.messages if m.receiver == "server"}
    assert len(senders) == algo.per_round == 3  # participation 0.5 of 6 clients
    n_params = sum(p.numel() for p in algo.model.parameters())
    assert all(m.numel == n_params for m in algo.wire.messages)


def test_fedavg_learns_separable_blobs(blobs, clients):
    seeding.seed_everything(0)
    algo = FedAvg({**FEDAVG_SPEC, "participation": 1.0}, blobs, clients, 0, torch.device("cpu"))
    before = algo.evaluate(0)["test_acc"]
    for t in range(1, 11):
        algo.round(t)
    after = algo.evaluate(10)
    assert after["test_acc"] > max(0.9, before)
    assert np.isfinite(after["test_loss"])
