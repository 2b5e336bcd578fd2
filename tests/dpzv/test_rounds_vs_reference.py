"""Each method's round against a hand-written reference of the same step (float64 where draws matter)."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.vafl import VAFL
from fedrepro.algorithms.dpzv.vfl_czofo import VFLCZOFO
from fedrepro.algorithms.dpzv.zo import Direction
from tests.dpzv.conftest import tiny_settings
from tests.dpzv.test_noise_exact import copy_of, per_sample_loss, to_double


def flat(tensors):
    return torch.cat([t.reshape(-1) for t in tensors])


def spy_wire(algo):
    sent = []
    original = algo.wire.log  # every message is logged (a round's after it: base.serve, Wire.log)
    algo.wire.log = lambda s, r, k, p: sent.append((s, r, k, p)) or original(s, r, k, p)
    return sent


# ------------------------------------------------------------------------------------ DPZV


def test_dpzv_query_embeds_at_w_plus_and_minus_lambda_u_and_restores_w(tiny_data):
    algo = to_double(DPZV(tiny_data, tiny_settings(extra={"server_update": "sgd", "zo_lambda": 0.01}), seed=0))
    client = algo.clients[1]
    ids = client.next_batch()
    before = [p.detach().clone() for p in client.params]
    msg, u = algo.client_query(client, ids)
    x = client.x[torch.as_tensor(ids)]
    plus, minus = copy.deepcopy(client.model), copy.deepcopy(client.model)
    with torch.no_grad():
        for p, q, t in zip(plus.parameters(), minus.parameters(), u.tensors()):
            p.add_(0.01 * t)
            q.sub_(0.01 * t)
        assert torch.allclose(msg["h_plus"], plus(x), rtol=0, atol=1e-12)
        assert torch.allclose(msg["h_minus"], minus(x), rtol=0, atol=1e-12)
    assert torch.equal(msg["ids"], torch.as_tensor(ids))
    assert all(torch.allclose(p, b, rtol=0, atol=1e-15) for p, b in zip(client.params, before))


def test_dpzv_client_applies_the_scalar_it_received_along_its_own_u(tiny_data):
    """eq. (9), momentum 0: w -> w - eta Delta u with the Delta that crossed the wire (noise included)."""
    lr = 1e-2
    algo = DPZV(
        tiny_data, tiny_settings(eps=1.0, lr_client=lr, extra={"server_update": "sgd", "zo_momentum": 0.0}), seed=0
    )
    client = algo.clients[0]
    seeds = []
    new_seed = client.new_seed
    client.new_seed = lambda: seeds.append(new_seed()) or seeds[-1]
    sent = spy_wire(algo)
    before = flat(client.params).detach().clone()
    stats = algo.exchange(0, client.next_batch())
    (sender, to, kind, up), (back_from, back_to, back_kind, delta) = sent
    assert (sender, to, kind) == ("client0", "server", "embeddings")
    assert (back_from, back_to, back_kind) == ("server", "client0", "zo_scalar")
    u = flat(Direction(client.params, seeds[0], algo.direction).tensors())
    assert torch.allclose(flat(client.params), before - lr * float(delta) * u, rtol=0, atol=1e-6)
    assert set(stats) == {"train_loss", "clip_fraction", "delta_abs"} and stats["delta_abs"] == abs(float(delta))


def test_dpzv_privacy_record_names_its_settings(tiny_data):
    algo = DPZV(
        tiny_data, tiny_settings(eps=1.0, extra={"server_update": "sgd", "clip": 2.5, "clip_mode": "one_sided"}), seed=0
    )
    record = algo.privacy()
    assert (record["clip"], record["clip_mode"], record["label_privacy"], record["head_clip"]) == (
        2.5,
        "one_sided",
        "none",
        1.0,
    )
    assert "does not hold" in record["note"]
    assert "note" not in DPZV(tiny_data, tiny_settings(eps=1.0, extra={"server_update": "sgd"}), seed=0).privacy()
    assert (
        "note"
        not in DPZV(
            tiny_data, tiny_settings(extra={"server_update": "sgd", "clip_mode": "one_sided"}), seed=0
        ).privacy()
    )  # no noise, no DP claim to qualify


def test_dp_head_needs_a_finite_head_clip_only_when_it_adds_noise(tiny_data):
    options = {"server_update": "sgd", "label_privacy": "dp_head", "head_clip": "inf"}
    with pytest.raises(ValueError, match="head_clip"):
        DPZV(tiny_data, tiny_settings(eps=1.0, extra=options), seed=0)
    assert math.isinf(DPZV(tiny_data, tiny_settings(extra=options), seed=0).head_clip)


def test_dpzv_sgd_server_step_is_one_momentum_sgd_step_on_the_table(tiny_data):
    lr = 0.05
    # label_privacy none: the head's gradient is the plain batch mean, head_clip plays no part
    algo = DPZV(
        tiny_data, tiny_settings(lr_server=lr, momentum=0.9, extra={"server_update": "sgd", "head_clip": 1e-4}), seed=0
    )
    ids = torch.as_tensor(algo.clients[0].next_batch())
    before = flat(algo.server.params).detach().clone()
    grad = flat(torch.autograd.grad(algo.server.losses(ids).mean(), algo.server.params))
    algo.server_step(ids)
    assert torch.allclose(flat(algo.server.params), before - lr * grad, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------------ VFL-CZOFO


def czofo_reference(algo, idx, m, h, generator):
    """(1/n) sum_k (e / lambda) [L(h + lambda V_k) - L(h)] V_k, rows of V_k unit, draws in order."""
    with torch.no_grad():
        base = per_sample_loss(algo, idx, m, h).mean()
        total = torch.zeros_like(h)
        for _ in range(algo.perturbations):
            v = torch.randn(h.shape, generator=generator, dtype=h.dtype)
            v = v / v.norm(dim=1, keepdim=True)
            diff = per_sample_loss(algo, idx, m, h + algo.zo_lambda * v).mean() - base
            total += h.shape[1] / algo.zo_lambda * diff * v
    return total / algo.perturbations


def test_czofo_answer_is_the_zo_embedding_gradient_of_the_head_before_its_step(tiny_data):
    """Server side of VFL-CZOFO in float64: the answer is the reference estimate with the server's
    generator and the pre-step head; the table then holds h and the head takes one SGD step."""
    lr = 0.05
    algo = to_double(
        VFLCZOFO(tiny_data, tiny_settings(lr_server=lr, extra={"perturbations": 3, "zo_lambda": 1e-3}), seed=0)
    )
    client, m = algo.clients[1], 1
    ids = client.next_batch()
    idx = torch.as_tensor(ids)
    msg, _ = algo.client_forward(client, ids)
    expected = czofo_reference(algo, idx, m, msg["h"], copy_of(algo.server.noise))
    rows = algo.server.table.clone()
    rows[idx, m] = msg["h"]
    before = flat(algo.server.params).detach().clone()
    logits = algo.server.head(rows[idx].reshape(len(idx), -1))
    loss = F.cross_entropy(logits, algo.server.y[idx])
    grad = flat(torch.autograd.grad(loss, algo.server.params))
    answer, stats = algo.server_answer(m, msg)
    assert expected.abs().max() > 0
    assert torch.allclose(answer, expected, rtol=0, atol=1e-9 * float(expected.abs().max()))
    assert torch.equal(algo.server.table[idx, m], msg["h"])
    assert stats["train_loss"] == pytest.approx(float(loss), rel=1e-12)
    assert torch.allclose(flat(algo.server.params), before - lr * grad, rtol=0, atol=1e-12)


def test_czofo_needs_at_least_one_perturbation(tiny_data):
    with pytest.raises(ValueError, match="perturbations"):
        VFLCZOFO(tiny_data, tiny_settings(extra={"perturbations": 0}), seed=0)
    assert VFLCZOFO(tiny_data, tiny_settings(extra={"perturbations": 1}), seed=0).perturbations == 1


# ------------------------------------------------------------------------------------ VAFL


def test_vafl_server_stores_h_answers_its_gradient_and_steps_its_head(tiny_data):
    lr = 0.05
    algo = to_double(VAFL(tiny_data, tiny_settings(lr_server=lr), seed=0))
    client, m = algo.clients[0], 0
    ids = client.next_batch()
    idx = torch.as_tensor(ids)
    msg, _ = algo.client_forward(client, ids)
    h = msg["h"].clone().requires_grad_(True)
    loss = per_sample_loss(algo, idx, m, h).mean()
    grad_h, *grad_w = torch.autograd.grad(loss, [h, *algo.server.params])
    before = flat(algo.server.params).detach().clone()
    answer, stats = algo.server_answer(m, msg)
    assert torch.equal(algo.server.table[idx, m], msg["h"])
    assert torch.allclose(answer, grad_h, rtol=0, atol=1e-14)
    assert stats["train_loss"] == pytest.approx(float(loss), rel=1e-12)
    assert torch.allclose(flat(algo.server.params), before - lr * flat(grad_w), rtol=0, atol=1e-12)


def test_baselines_record_their_clip(tiny_data):
    for cls in (VAFL, VFLCZOFO):
        record = cls(tiny_data, tiny_settings(eps=1.0, extra={"embed_clip": 0.7}), seed=0).privacy()
        assert record["embed_clip"] == 0.7 and record["sigma"] > 0
