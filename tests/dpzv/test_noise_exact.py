"""The exact noise each party adds, recomputed in float64 from a copy of that party's generator.

Every draw must come from the right party's own generator, in the dtype of what it is added to, with
the right scale, and be added to the right clipped quantity. The references below redo each
mechanism by hand (explicit clipping, explicit sums, torch.randn on a copied generator state).
"""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.vafl import VAFL
from fedrepro.algorithms.dpzv.zo import Direction
from fedrepro.algorithms.dpzv.zoo_vfl import ZOOVFL
from tests.dpzv.conftest import tiny_settings


def to_double(algo):
    """Every model, feature slice and the server's table in float64 (rounding far below any draw)."""
    for client in algo.clients:
        client.model.double()
        client.x = client.x.double()
    algo.server.head.double()
    algo.server.table = algo.server.table.double()
    return algo


def copy_of(generator: torch.Generator) -> torch.Generator:
    twin = torch.Generator(device=generator.device)
    twin.set_state(generator.get_state())
    return twin


def per_sample_loss(algo, idx, m, h_m):
    rows = algo.server.table[idx].clone()
    rows[:, m] = h_m
    logits = algo.server.head(algo.server.input_scale * rows.reshape(len(idx), -1))
    return F.cross_entropy(logits, algo.server.y[idx], reduction="none")


def clip_rows(h, c):
    return h * (c / h.norm(dim=1, keepdim=True)).clamp(max=1.0)


@pytest.mark.parametrize("clip_mode", ["symmetric", "one_sided"])
def test_dpzv_answer_is_the_clipped_mean_plus_one_float64_draw_of_the_server(clip_mode, tiny_data):
    """eq. (8) at finite eps, float64: Delta = (1/B) sum_i clip_C(delta_i) + sigma z, z from the
    server's generator in float64; the table gets the midpoint and the stats describe this batch."""
    clip = 0.05
    algo = to_double(
        DPZV(
            tiny_data,
            tiny_settings(eps=1.0, extra={"server_update": "sgd", "clip": clip, "clip_mode": clip_mode}),
            seed=0,
        )
    )
    client, m = algo.clients[1], 1
    ids = client.next_batch()
    msg, _ = algo.client_query(client, ids)
    idx = torch.as_tensor(ids)
    with torch.no_grad():
        plus, minus = per_sample_loss(algo, idx, m, msg["h_plus"]), per_sample_loss(algo, idx, m, msg["h_minus"])
    delta = (plus - minus) / algo.zo_lambda
    low = -clip if clip_mode == "symmetric" else -math.inf
    clipped = delta.clamp(min=low, max=clip)
    z = torch.randn((), generator=copy_of(algo.server.noise), dtype=torch.float64)
    sigma = algo.noise["sigma"]
    expected = clipped.sum() / len(ids) + sigma * z
    answer, stats = algo.server_answer(m, msg)
    assert sigma > 0 and (delta.abs() > clip).any() and (delta < -clip).any()
    assert answer.dtype == torch.float64
    assert float(answer) == pytest.approx(float(expected), rel=0, abs=1e-12)
    assert stats["delta_abs"] == pytest.approx(abs(float(expected)), rel=0, abs=1e-12)
    assert stats["train_loss"] == pytest.approx(float(0.5 * (plus + minus).mean()), rel=1e-12)
    assert stats["clip_fraction"] == pytest.approx(float((delta.abs() > clip).double().mean()))
    assert torch.equal(algo.server.table[idx, m], 0.5 * (msg["h_plus"] + msg["h_minus"]))


def test_dpzv_table_update_plus_stores_h_plus(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(extra={"server_update": "sgd", "table_update": "plus"}), seed=0)
    client = algo.clients[0]
    ids = client.next_batch()
    msg, _ = algo.client_query(client, ids)
    algo.server_answer(0, msg)
    assert torch.equal(algo.server.table[torch.as_tensor(ids), 0], msg["h_plus"])


def test_dpzv_2lambda_denominator_halves_the_answer(tiny_data):
    """fd_denominator 2lambda divides eq. (7)'s difference by 2 lambda (no clip, no noise)."""
    answers = {}
    for denominator in ("lambda", "2lambda"):
        algo = DPZV(
            tiny_data,
            tiny_settings(extra={"server_update": "sgd", "clip": "inf", "fd_denominator": denominator}),
            seed=0,
        )
        msg, _ = algo.client_query(algo.clients[0], algo.clients[0].next_batch())
        answers[denominator] = float(algo.server_answer(0, msg)[0])
    assert answers["lambda"] != 0
    assert answers["2lambda"] == pytest.approx(answers["lambda"] / 2, rel=1e-6)


def test_dp_head_gradient_is_exact_in_float64(tiny_data):
    """label_privacy dp_head at finite eps: grad = (sum_i clip(g_i) + s C_head z) / B with z drawn per
    parameter tensor, in order, from the server's generator, in float64."""
    head_clip = 1e-3
    algo = to_double(
        DPZV(
            tiny_data,
            tiny_settings(eps=1.0, extra={"server_update": "sgd", "label_privacy": "dp_head", "head_clip": head_clip}),
            seed=0,
        )
    )
    idx = torch.as_tensor(algo.clients[0].next_batch())
    params = algo.server.params
    total = [torch.zeros_like(p) for p in params]
    for i in idx:
        grads = torch.autograd.grad(algo.server.losses(i.view(1)).mean(), params)
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
        for t, g in zip(total, grads):
            t += g * min(1.0, head_clip / norm)
    generator = copy_of(algo.server.noise)
    sigma = algo.noise["noise_multiplier"] * head_clip
    expected = [(t + sigma * torch.randn(t.shape, generator=generator, dtype=torch.float64)) / len(idx) for t in total]
    algo.dp_head_grad(idx)
    assert sigma > 0
    for p, e in zip(params, expected):
        assert p.grad.dtype == torch.float64
        assert torch.allclose(p.grad, e, rtol=0, atol=1e-12)


def test_vafl_sends_the_clipped_embedding_plus_a_float64_draw_of_its_own_generator(tiny_data):
    clip = 0.05
    algo = to_double(VAFL(tiny_data, tiny_settings(eps=1.0, extra={"embed_clip": clip}), seed=0))
    client = algo.clients[1]
    ids = client.next_batch()
    with torch.no_grad():
        h = client.model(client.x[torch.as_tensor(ids)])
    z = torch.randn(h.shape, generator=copy_of(client.noise), dtype=torch.float64)
    payload, kept = algo.client_forward(client, ids)
    sigma = algo.noise["sigma"]
    assert sigma > 0 and h.norm(dim=1).min() > clip
    assert torch.equal(payload["ids"], torch.as_tensor(ids))
    assert torch.allclose(kept, clip_rows(h, clip), rtol=0, atol=1e-14)  # what the client backpropagates
    assert torch.allclose(payload["h"], clip_rows(h, clip) + sigma * z, rtol=0, atol=1e-12)


@pytest.mark.parametrize("mode, direction", [("shared", "sphere"), ("independent", "gaussian")])
def test_zoo_vfl_pair_carries_one_or_two_float64_draws(mode, direction, tiny_data):
    """ZOO-VFL: h from w, h' from w + lambda u (u from the returned seed), both clipped; `shared` adds the
    same draw z to both, `independent` draws z then z' in that order."""
    clip = 0.05
    algo = to_double(
        ZOOVFL(
            tiny_data,
            tiny_settings(eps=1.0, extra={"embed_clip": clip, "zoo_noise": mode, "direction": direction}),
            seed=0,
        )
    )
    client = algo.clients[0]
    ids = client.next_batch()
    x = client.x[torch.as_tensor(ids)]
    generator = copy_of(client.noise)
    payload, seed = algo.client_query(client, ids)
    twin = copy.deepcopy(client.model)
    Direction(list(twin.parameters()), seed, algo.direction).add_(algo.zo_lambda)
    with torch.no_grad():
        h, h_pert = client.model(x), twin(x)
    sigma = algo.noise["sigma"]
    z = sigma * torch.randn(h.shape, generator=generator, dtype=torch.float64)
    z_pert = z if mode == "shared" else sigma * torch.randn(h.shape, generator=generator, dtype=torch.float64)
    assert sigma > 0 and not torch.equal(h, h_pert)
    assert torch.allclose(payload["h"], clip_rows(h, clip) + z, rtol=0, atol=1e-12)
    assert torch.allclose(payload["h_perturbed"], clip_rows(h_pert, clip) + z_pert, rtol=0, atol=1e-12)


def test_zoo_vfl_server_answers_the_loss_difference_and_stores_h(tiny_data):
    """The server returns L(h') - L(h) (batch means, stale table for the others) and keeps h."""
    algo = ZOOVFL(tiny_data, tiny_settings(extra={"server_update": "sgd"}), seed=0)
    algo.server.optimizer.step = lambda: None
    client, m = algo.clients[1], 1
    ids = client.next_batch()
    payload, _ = algo.client_query(client, ids)
    idx = torch.as_tensor(ids)
    with torch.no_grad():
        loss = per_sample_loss(algo, idx, m, payload["h"]).mean()
        loss_pert = per_sample_loss(algo, idx, m, payload["h_perturbed"]).mean()
    answer, stats = algo.server_answer(m, payload)
    assert float(loss_pert - loss) != 0
    assert float(answer) == pytest.approx(float(loss_pert - loss), rel=1e-4, abs=1e-9)
    assert stats["train_loss"] == pytest.approx(float(loss), rel=1e-6)
    assert torch.equal(algo.server.table[idx, m], payload["h"])


def test_zoo_vfl_zo_server_step_is_the_one_sided_difference_along_u0(tiny_data):
    """ZOO-VFL's server ZO step (momentum 0), float64: theta -> theta - lr [L(theta + lambda u0) - L(theta)]
    / lambda u0, whose coefficient approaches autograd's u0 . grad L."""
    lr = 0.1
    algo = to_double(
        ZOOVFL(
            tiny_data,
            tiny_settings(lr_server=lr, extra={"server_update": "zo", "zo_momentum": 0.0, "zo_lambda": 1e-6}),
            seed=0,
        )
    )
    seeds = []
    new_seed = algo.server.new_seed
    algo.server.new_seed = lambda: seeds.append(new_seed()) or seeds[-1]
    client, m = algo.clients[0], 0
    ids = client.next_batch()
    payload, _ = algo.client_query(client, ids)
    idx = torch.as_tensor(ids)
    algo.server.table[idx, m] = payload["h"]
    grad = torch.autograd.grad(algo.server.losses(idx).mean(), algo.server.params)
    before = [p.detach().clone() for p in algo.server.params]
    algo.server_answer(m, payload)
    u0 = Direction(algo.server.params, seeds[0], algo.direction).tensors()
    slope = sum(float((g * u).sum()) for g, u in zip(grad, u0))
    norm = math.sqrt(sum(float((g * g).sum()) for g in grad))
    assert abs(slope) > 0.05 * norm
    for p, b, u in zip(algo.server.params, before, u0):
        assert torch.allclose(p, b - lr * slope * u, rtol=0, atol=1e-4 * lr * norm)


def test_zoo_vfl_client_step_is_the_loss_difference_over_lambda_along_u(tiny_data):
    """Client side of ZOO-VFL (momentum 0): w -> w - lr (L' - L) / lambda u, u regenerated from the seed."""
    lr = 1e-2
    algo = ZOOVFL(tiny_data, tiny_settings(lr_client=lr, extra={"server_update": "sgd", "zo_momentum": 0.0}), seed=0)
    client = algo.clients[0]
    before = [p.detach().clone() for p in client.params]
    algo.client_apply(client, 1234, 0.5)
    u = Direction(client.params, 1234, algo.direction).tensors()
    for p, b, t in zip(client.params, before, u):
        assert torch.allclose(p, b - lr * 0.5 / algo.zo_lambda * t, rtol=1e-5, atol=1e-7)


def test_noise_free_baselines_send_the_raw_embedding(tiny_data):
    """eps = inf: nothing is drawn (the client's generator does not move) and nothing is clipped."""
    algo = VAFL(tiny_data, tiny_settings(extra={"embed_clip": 1e-3}), seed=0)
    client = algo.clients[0]
    state = client.noise.get_state()
    ids = np.arange(8)
    payload, h = algo.client_forward(client, ids)
    assert torch.equal(payload["h"], h.detach()) and h.norm(dim=1).min() > 1e-3
    assert torch.equal(client.noise.get_state(), state)
