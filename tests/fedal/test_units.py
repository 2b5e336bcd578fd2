"""The small parts every FedAL-paper method rests on, against closed forms: default
temperatures, the instance-similarity logits, the client's frozen snapshots, the architecture
draw, evaluation and traffic numbers, who sends what to whom, the discriminator's `after_grad`
order, FedDF's r_glo, and the gradient-variance estimator of Fig. 6."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from fedrepro.algorithms.fedal.cfd import CFD
from fedrepro.algorithms.fedal.client import Client, arch_key, assign_architectures, build_client_model
from fedrepro.algorithms.fedal.diagnostics import chunks_of, gradient_variance
from fedrepro.algorithms.fedal.discriminator import payoff_grads
from fedrepro.algorithms.fedal.fccl import FCCL
from fedrepro.algorithms.fedal.fd import FD
from fedrepro.algorithms.fedal.fedal import FedAL
from fedrepro.algorithms.fedal.fedavg import FedAvg
from fedrepro.algorithms.fedal.feddf import FedDF
from fedrepro.algorithms.fedal.fedproto import FedProto
from fedrepro.algorithms.fedal.kd import (
    kl_to_logits,
    kl_to_probs,
    less_forgetting,
    non_target_kl,
    similarity_logits,
    surrogate_from_grad,
    tempered_softmax,
)
from fedrepro.algorithms.fedal.server import AdversarialHelper

from .helpers import POOL, config, make_data

pytestmark = pytest.mark.usefixtures("float64")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------- kd
def test_every_temperature_defaults_to_one():
    a, b = torch.randn(4, 5, generator=gen(0)) * 3, torch.randn(4, 5, generator=gen(1)) * 3
    torch.testing.assert_close(tempered_softmax(a), torch.softmax(a, -1))
    p = torch.softmax(a, -1)
    by_hand = (p * (p.log() - torch.log_softmax(b, -1))).sum(-1).mean()
    for value in (kl_to_probs(p, b), kl_to_logits(a, b), less_forgetting(a, b)):
        torch.testing.assert_close(value, by_hand)
    y = torch.tensor([0, 1, 2, 3])
    torch.testing.assert_close(non_target_kl(a, b, y), non_target_kl(a, b, y, 1.0))


def test_non_target_kl_works_over_the_last_axis_of_any_batch_shape():
    t, s = torch.randn(2, 3, 5, generator=gen(2)), torch.randn(2, 3, 5, generator=gen(3))
    y = torch.tensor([[0, 4, 2], [1, 1, 3]])
    per_slice = torch.stack([non_target_kl(t[i], s[i], y[i], 2.0) for i in range(2)]).mean()
    torch.testing.assert_close(non_target_kl(t, s, y, 2.0), per_slice)


def test_similarity_logits_are_cosines_over_temperature_without_the_diagonal():
    h = torch.randn(4, 3, generator=gen(4))
    unit = h.numpy() / np.linalg.norm(h.numpy(), axis=1, keepdims=True)
    cos = unit @ unit.T
    expected = np.stack([np.delete(cos[r], r) for r in range(4)])
    torch.testing.assert_close(similarity_logits(h), torch.as_tensor(expected / 0.02))
    torch.testing.assert_close(similarity_logits(h, 0.5), torch.as_tensor(expected / 0.5))


def test_surrogate_value_and_shape_check():
    f, g = torch.randn(3, 4, generator=gen(5)), torch.randn(3, 4, generator=gen(6))
    torch.testing.assert_close(surrogate_from_grad(f, g), (f * g).sum() / 3)
    with pytest.raises(ValueError, match="same shape"):
        surrogate_from_grad(f, g[:2])


# ---------------------------------------------------------------------- client
def test_arch_key_names_the_architecture_and_its_sorted_options():
    assert (
        arch_key({"name": "mlp", "options": {"in_features": 12, "hidden": [16]}}) == "mlp(hidden=[16],in_features=12)"
    )
    assert arch_key({"name": "small_cnn"}) == "small_cnn"
    assert build_client_model(POOL[1], 4).arch == "mlp(hidden=[24, 16],in_features=12)"


def test_architectures_are_drawn_at_random_by_default_from_their_own_generator():
    pool = [{"name": str(i)} for i in range(5)]
    expected = np.random.default_rng([7, 23]).integers(0, 5, size=20).tolist()
    assert assign_architectures(pool, 20, 7) == expected
    assert assign_architectures(pool, 20, 7, "round_robin") == [n % 5 for n in range(20)]
    with pytest.raises(ValueError, match="empty"):
        assign_architectures([], 3, 0)


def _client(public=True) -> Client:
    data = make_data()
    model = build_client_model(POOL[0], data.num_classes)
    return Client(
        0,
        model,
        data.clients_x[0],
        data.clients_y[0],
        data.public_x if public else None,
        lr=0.1,
        batch_size=4,
        seed=0,
        public_seed=1,
    )


def test_snapshot_is_frozen_and_a_named_slot_is_refreshed_in_place():
    client = _client()
    loose = client.snapshot()
    assert all(not p.requires_grad for p in loose.parameters())
    assert client.snapshot() is not loose
    slot = client.snapshot("glo")
    assert all(not p.requires_grad for p in slot.parameters())
    x, y = client.local_batch()
    client.step(torch.nn.functional.cross_entropy(client.model(x), y))
    client.model.eval()
    again = client.snapshot("glo")
    assert again is slot and not again.training
    for p, q in zip(again.parameters(), client.model.parameters()):
        torch.testing.assert_close(p, q.detach())
    assert any(not torch.equal(p, q) for p, q in zip(loose.parameters(), client.model.parameters()))


def test_client_refuses_empty_data_and_a_missing_public_set():
    client = _client(public=False)
    with pytest.raises(RuntimeError, match="no public data"):
        client.public_batch()
    with pytest.raises(ValueError, match="no training samples"):
        Client(1, client.model, client.x[:0], client.y[:0], None, 0.1, 4, 0, 1)


# ---------------------------------------------------------------------- federation
def test_evaluate_reports_mean_client_accuracy_spread_and_megabytes_per_client():
    torch.manual_seed(0)
    algo = FedAL(make_data(), POOL, config(), 0, use_al=False)
    algo.wire.bytes_by_direction = {"up": 3 * 2**20, "down": 6 * 2**20}
    metrics = algo.evaluate(1)
    with torch.no_grad():
        acc = np.array(
            [float((c.model(algo.data.test_x).argmax(-1) == algo.data.test_y).double().mean()) for c in algo.clients]
        )
    assert metrics["acc"] == pytest.approx(acc.mean())
    assert metrics["acc_std_clients"] == pytest.approx(acc.std())
    assert metrics["uplink_mb_per_client"] == pytest.approx(1.0)
    assert metrics["downlink_mb_per_client"] == pytest.approx(2.0)


METHODS = {  # name: (make, kinds sent up, kinds sent down)
    "fedal": (lambda d, c: FedAL(d, POOL, c, 0), {"logits"}, {"reply"}),
    "fedproto": (lambda d, c: FedProto(d, POOL, c, 0, variant="prototypes"), {"prototypes"}, {"global_prototypes"}),
    "fedproto_public": (
        lambda d, c: FedProto(d, POOL, c, 0, variant="public_features"),
        {"features"},
        {"mean_features"},
    ),
    "cfd": (lambda d, c: CFD(d, POOL, c, 0), {"logits"}, {"server_logits"}),
    "fccl": (lambda d, c: FCCL(d, POOL, c, 0, pretrain_iters=2), {"logits"}, {"mean_logits"}),
    "fccl_plus": (
        lambda d, c: FCCL(d, POOL, c, 0, plus=True),
        {"logits", "similarity"},
        {"mean_logits", "mean_similarity"},
    ),
    "fd": (lambda d, c: FD(d, POOL, c, 0), {"label_logits"}, {"global_label_logits"}),
    "fedavg": (lambda d, c: FedAvg(d, POOL[:1], c, 0), {"weights"}, {"weights"}),
    "feddf_al": (
        lambda d, c: FedDF(d, POOL, c, 0, use_al=True, use_lf=True, assignment=[0, 1, 0]),
        {"weights"},
        {"weights"},
    ),
}


@pytest.mark.parametrize("name", list(METHODS))
def test_every_message_goes_between_the_server_and_one_client_and_every_metric_is_finite(name):
    make, up, down = METHODS[name]
    torch.manual_seed(0)
    algo = make(make_data(), config(record_messages=True))
    algo.round(1)
    sent_in_round_1 = len(algo.wire.messages)
    metrics = algo.round(2)  # FedProto and FD have no global target before round 2
    clients = {c.name for c in algo.clients}
    assert algo.wire.messages
    for i, m in enumerate(algo.wire.messages):
        assert {m.sender, m.receiver} - {"server"} <= clients and "server" in (m.sender, m.receiver), m
        assert m.round == (1 if i < sent_in_round_1 else 2), m
    # every client hears from the server, and only the method's kinds travel
    assert {m.receiver for m in algo.wire.messages if m.sender == "server"} == clients
    assert algo.wire.kinds("server") == up
    assert set().union(*(algo.wire.kinds(c) for c in clients)) == down
    assert metrics and all(math.isfinite(v) for v in metrics.values()), metrics
    assert algo.iteration == 2 * algo.cfg.tau  # every method spends tau iterations per round


@pytest.mark.parametrize(
    "cls, kwargs, assignment",
    [  # seed 0 alone would draw [1, 1, 0]
        (FedAL, {}, [0, 1, 1]),
        (FedProto, {"variant": "prototypes"}, [0, 1, 1]),
        (FedProto, {"variant": "public_features"}, [0, 1, 1]),
        (CFD, {}, [0, 1, 1]),
        (FCCL, {"pretrain_iters": 1}, [0, 1, 1]),
        (FCCL, {"plus": True}, [0, 1, 1]),
        (FD, {}, [0, 1, 1]),
        (FedDF, {"use_al": True}, [0, 1, 1]),
        (FedAvg, {}, [0, 0, 0]),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_every_method_keeps_a_given_architecture_assignment(cls, kwargs, assignment):
    algo = cls(make_data(), POOL, config(), 0, assignment=assignment, **kwargs)
    assert [c.model.arch for c in algo.clients] == [arch_key(POOL[i]) for i in assignment]


def test_fccl_pretrains_its_intra_domain_teacher_100_steps_by_default():
    assert FCCL(make_data(), POOL, config(), 0).summary()["pretrain_steps"] == 100


def test_fedproto_downlink_is_k_prototypes_and_k_flags_in_the_prototype_dtype():
    torch.manual_seed(0)
    algo = FedProto(make_data(), POOL, config(record_messages=True), 0, variant="prototypes")
    algo.round(1)
    k, d = algo.prototypes.shape
    size = algo.prototypes.element_size()
    down = [m for m in algo.wire.messages if m.kind == "global_prototypes"]
    assert len(down) == algo.num_clients
    assert all((m.numel, m.nbytes) == (k * d + k, (k * d + k) * size) for m in down)


def test_after_grad_answers_with_the_old_discriminator_then_steps():
    torch.manual_seed(1)
    logits = torch.randn(3, 5, 4, generator=gen(7))
    before = AdversarialHelper(4, 3, (8,), 0.1, "sgd", 2.0, update="after_grad")
    old = copy.deepcopy(before.disc)
    grads, loss = before.step_and_grads(logits)
    expected_grads, u = payoff_grads(old, logits, 2.0)
    torch.testing.assert_close(grads, expected_grads)
    torch.testing.assert_close(loss, -u.mean())  # the loss of the step, taken with the old D
    assert any(not torch.equal(p, q) for p, q in zip(before.disc.parameters(), old.parameters()))
    with pytest.raises(ValueError, match="update"):
        AdversarialHelper(4, 3, (8,), 0.1, "sgd", 2.0, update="sideways")


def test_feddf_use_lf_adds_r_glo_to_the_distillation():
    def distilled(use_lf):  # the server's distillation alone (the local stage's r_loc left out)
        torch.manual_seed(0)
        algo = FedDF(make_data(), POOL, config(tau=3), 0, use_lf=use_lf, assignment=[0, 1, 0])
        algo._distill()
        return [p.detach().clone() for g in algo.groups for p in algo.group_models[g].parameters()]

    plain, anchored = distilled(False), distilled(True)
    assert max(float((p - q).abs().max()) for p, q in zip(plain, anchored)) > 1e-9


def test_feddf_group_model_is_the_size_weighted_average_of_its_members(monkeypatch):
    torch.manual_seed(0)
    algo = FedDF(make_data(num_clients=4), POOL, config(), 0, assignment=[0, 1, 0, 1])
    monkeypatch.setattr(algo, "_distill", lambda: {})
    algo.round(1)
    for g in algo.groups:
        members = algo.members[g]
        sizes = np.array([algo.clients[n].num_samples for n in members], dtype=float)
        assert len(set(sizes)) > 1
        for name, p in algo.group_models[g].state_dict().items():
            stacked = np.stack([algo.clients[n].model.state_dict()[name].numpy() for n in members])
            torch.testing.assert_close(p, torch.as_tensor(np.tensordot(sizes / sizes.sum(), stacked, 1)))


# ---------------------------------------------------------------------- diagnostics
def test_gradient_variance_matches_the_closed_form_with_an_unused_parameter():
    x = torch.randn(12, 3, generator=gen(8))
    w, unused = torch.randn(3, requires_grad=True), torch.zeros(2, requires_grad=True)
    chunks = [torch.arange(0, 4), torch.arange(4, 8), torch.arange(8, 12)]
    got = gradient_variance(lambda i: (x[i] @ w).sum(), [w, unused], chunks)
    g = np.stack([x[i].sum(0).numpy() for i in chunks])  # d/dw of sum(x w) is the column sum
    expected = (g**2).sum(1).mean() - (g.mean(0) ** 2).sum()
    assert got == pytest.approx(expected, rel=1e-10)
    assert math.isnan(gradient_variance(lambda i: (x[i] @ w).sum(), [w], chunks[:1]))


def test_chunks_are_disjoint_full_batches_of_a_seeded_permutation():
    chunks = chunks_of(10, 3, 5, seed=4)
    assert len(chunks) == 3 and all(len(c) == 3 for c in chunks)
    flat = torch.cat(chunks).tolist()
    assert len(set(flat)) == 9
    assert flat == np.random.default_rng(4).permutation(10)[:9].tolist()
    assert len(chunks_of(10, 3, 2, seed=4)) == 2


def test_summary_holds_per_client_accuracy_and_the_mean_output_per_true_class():
    """Fig. 2's input: row c is the mean over clients and over the test samples of class c of the
    softmax output; a class missing from the test split gives a row of NaN."""
    torch.manual_seed(0)
    data = make_data()
    keep = data.test_y != 3
    data.test_x, data.test_y = data.test_x[keep], data.test_y[keep]
    algo = FedAL(data, POOL, config(), 0, use_al=False, assignment=[0, 1, 1])
    summary = algo.summary()
    with torch.no_grad():
        probs = np.stack([torch.softmax(c.model(data.test_x), -1).numpy() for c in algo.clients])
    y = data.test_y.numpy()
    for c in range(3):
        np.testing.assert_allclose(summary["class_probs"][c], probs[:, y == c].mean(axis=(0, 1)), rtol=1e-6)
    assert all(math.isnan(v) for v in summary["class_probs"][3])
    np.testing.assert_allclose(summary["client_acc"], (probs.argmax(-1) == y).mean(axis=1), rtol=1e-6)
    assert summary["architectures"] == [arch_key(POOL[i]) for i in (0, 1, 1)]
    assert summary["iterations_done"] == 0


def test_feddf_al_summary_gives_its_discriminator_loss_beside_log_of_the_groups():
    torch.manual_seed(0)
    algo = FedDF(make_data(num_clients=4), POOL, config(tau=2), 0, use_al=True, assignment=[0, 1, 0, 1])
    seen, step = [], algo.adversary.step_and_grads

    def recording(logits):
        grads, loss = step(logits)
        seen.append(float(loss))
        return grads, loss

    algo.adversary.step_and_grads = recording
    for t in (1, 2):
        algo.round(t)
    out = algo.summary()
    assert len(seen) == 4 and out["disc_loss_final"] == seen[-1]
    assert out["disc_log_n"] == pytest.approx(math.log(2))  # two architecture groups play
    assert "disc_loss_final" not in FedDF(make_data(), POOL, config(), 0).summary()
