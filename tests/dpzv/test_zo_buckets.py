"""The direction's flat buckets (zo.Direction): grouping, one seeded draw per bucket, the properties the
estimator needs on a many-bucket model, one bucket alive at a time (MeZO memory), and ZOO-VFL's
refreshed copy giving the numbers of a fresh deep copy."""

import copy
import math

import pytest
import torch

from fedrepro.algorithms.dpzv.memory import LiveTensorTracker
from fedrepro.algorithms.dpzv.zo import Direction, ZOUpdater, bucket_sizes
from fedrepro.algorithms.dpzv.zoo_vfl import ZOOVFL
from tests.dpzv.conftest import tiny_settings
from tests.dpzv.test_zo import assert_zo_updater_is_torch_sgd


def test_buckets_fill_in_order_up_to_the_largest_tensor():
    assert bucket_sizes([3, 3, 3]) == [1, 1, 1]
    assert bucket_sizes([6, 1, 5, 7]) == [2, 1, 1]
    assert bucket_sizes([2, 2, 10, 1, 9]) == [2, 1, 2]
    assert bucket_sizes([35, 5, 15, 3, 21]) == [1, 3, 1]
    assert bucket_sizes([1]) == [1] and bucket_sizes([]) == []
    assert bucket_sizes([100] * 1000 + [65_536]) == [655, 345, 1]


def many_tensors(seed=0):
    """Tensors of 35, 5, 15, 3 and 21 elements: buckets [35], [5, 15, 3], [21]."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Linear(5, 3), torch.nn.Linear(3, 7, bias=False))
    return list(net.parameters())


@pytest.fixture
def small_buckets():
    params = many_tensors()
    assert bucket_sizes([p.numel() for p in params]) == [1, 3, 1]
    return params


@pytest.mark.parametrize("kind", ["sphere", "gaussian"])
def test_each_bucket_is_one_draw_of_the_seeded_generator(small_buckets, kind):
    params = small_buckets
    gen = torch.Generator().manual_seed(5)
    z = [torch.randn(n, generator=gen) for n in (35, 23, 21)]
    flat = torch.cat(z).double()
    scale = 1.0 if kind == "gaussian" else math.sqrt(79) / float(flat.norm())
    u = Direction(params, 5, kind)
    assert u.scale == pytest.approx(scale, rel=1e-6)
    expected = [z[0]] + list(z[1].split([5, 15, 3])) + [z[2]]
    for got, want, p in zip(u.tensors(), expected, params):
        assert got.shape == p.shape and torch.equal(got, u.scale * want.view(p.shape))
    if kind == "sphere":
        assert sum(float(t.double().square().sum()) for t in u.tensors()) == pytest.approx(79, rel=1e-6)


def test_many_buckets_regenerate_bit_identically_and_restore(small_buckets):
    params = small_buckets
    before = [p.detach().clone() for p in params]
    u = Direction(params, 11)
    first = u.tensors()
    u.add_(1e-3)
    u.add_(-2e-3)
    u.add_(1e-3)
    assert all(torch.equal(a, b) for a, b in zip(first, Direction(params, 11).tensors()))
    for p, q in zip(params, before):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-8)
    u.add_(0.5)
    for p, q, t in zip(params, before, first):
        assert torch.allclose(p, q + 0.5 * t, rtol=1e-6, atol=1e-6)


def test_many_bucket_momentum_step_is_torch_sgd(small_buckets):
    twin = [p.detach().clone().requires_grad_(True) for p in small_buckets]
    assert_zo_updater_is_torch_sgd(small_buckets, twin)


def test_direction_moments_over_buckets(small_buckets):
    """E[u u^T] = I over the concatenation of the buckets (the sphere's u, many seeds)."""
    params = small_buckets
    u = torch.stack([torch.cat([t.reshape(-1) for t in Direction(params, s).tensors()]) for s in range(4000)])
    u = u.double()
    assert u.mean(0).abs().max() < 0.1
    cov = u.T @ u / u.shape[0]
    assert (cov.diagonal() - 1).abs().mean() < 0.03
    assert (cov - torch.diag(cov.diagonal())).abs().max() < 0.12


def test_mixed_dtypes_are_refused():
    with pytest.raises(ValueError, match="same dtype and device"):
        Direction([torch.zeros(3), torch.zeros(3, dtype=torch.float64)], 0)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_one_bucket_is_alive_at_a_time(small_buckets, momentum):
    """MeZO memory: a pass's only temporary is one bucket (35 floats here), never two at once."""
    params = small_buckets
    updater = ZOUpdater(params, lr=0.1, momentum=momentum)
    updater.step(Direction(params, 0), 1.0)  # momentum buffers (parameter-sized) exist before the measure
    u = Direction(params, 1)
    with LiveTensorTracker() as tracker:
        u.add_(1e-3)
        updater.step(u, 1.0)
        Direction(params, 2)  # the norm pass
    assert 35 * 4 <= tracker.peak <= 35 * 4 + 3 * 4  # the largest bucket, plus the norm's scalars


def zoo_settings():
    return tiny_settings(extra={"server_update": "zo", "zo_momentum": 0.9})


def deep_copy_perturbed(algo, owner, model, seed):
    """ZOO-VFL's copy as it was: a fresh deep copy per use, moved to w + lambda u."""
    twin = copy.deepcopy(model)
    Direction([p for p in twin.parameters() if p.requires_grad], seed, algo.direction).add_(algo.zo_lambda)
    return twin


def test_zoo_vfl_refreshed_copy_gives_the_numbers_of_a_fresh_deep_copy(tiny_data, monkeypatch):
    runs = []
    for fresh in (False, True):
        torch.manual_seed(0)
        algo = ZOOVFL(tiny_data, zoo_settings(), seed=0)
        start = [p.detach().clone() for c in algo.clients for p in c.params] + [p.clone() for p in algo.server.params]
        if fresh:
            monkeypatch.setattr(algo, "_perturbed_copy", lambda *a, algo=algo: deep_copy_perturbed(algo, *a))
        for t in range(6):
            m = t % len(algo.clients)
            algo.exchange(m, algo.clients[m].next_batch())
        runs.append(
            [p.detach().clone() for c in algo.clients for p in c.params]
            + [p.detach().clone() for p in algo.server.params]
        )
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    assert not any(torch.equal(a, b) for a, b in zip(runs[0], start))  # every client and the head moved


def test_zoo_vfl_copy_is_refreshed_from_the_model_every_round(tiny_data):
    algo = ZOOVFL(tiny_data, zoo_settings(), seed=0)
    client = algo.clients[0]
    first = algo._perturbed_copy(client, client.model, 3)
    with torch.no_grad():
        for p in client.model.parameters():
            p.add_(1.0)
    again = algo._perturbed_copy(client, client.model, 3)
    assert again is first  # one copy per party, refreshed in place
    u = Direction(client.params, 3, algo.direction).tensors()
    for p, q, t in zip(again.parameters(), client.model.parameters(), u):
        assert torch.allclose(p, q + algo.zo_lambda * t, rtol=0, atol=1e-7)
