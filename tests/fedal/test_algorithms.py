"""FedAL's protocol: message boundaries, counters, ablation equivalences, synchronisation, resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedrepro.algorithms.fedal.cfd import CFD
from fedrepro.algorithms.fedal.discriminator import Discriminator
from fedrepro.algorithms.fedal.fccl import FCCL
from fedrepro.algorithms.fedal.fd import FD
from fedrepro.algorithms.fedal.fedal import FedAL, build
from fedrepro.algorithms.fedal.fedavg import FedAvg
from fedrepro.algorithms.fedal.feddf import FedDF
from fedrepro.algorithms.fedal.fedproto import FedProto
from fedrepro.algorithms.fedal.kd import kl_to_logits
from fedrepro.algorithms.fedal.server import LogitServer
from fedrepro.fl.loop import Checkpoint, run_rounds

from .helpers import POOL, config, make_data

K, B = 4, 8


def _fedal(**kw):
    torch.manual_seed(0)
    return FedAL(make_data(), POOL, config(record_messages=True), seed=0, **kw)


def _modules_in(obj, depth=0, seen=None):
    """Every nn.Module reachable from an object's attributes (lists/dicts included)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 4:
        return []
    seen.add(id(obj))
    if isinstance(obj, nn.Module):
        return [obj]
    children = []
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        children = list(obj)
    elif hasattr(obj, "__dict__"):
        children = list(vars(obj).values())
    return [m for c in children for m in _modules_in(c, depth + 1, seen)]


def test_server_receives_only_logits_and_clients_only_average_and_gradient():
    algo = _fedal()
    for t in range(1, 3):
        algo.round(t)
    to_server = [m for m in algo.wire.messages if m.receiver == "server"]
    to_clients = [m for m in algo.wire.messages if m.receiver != "server"]
    assert {m.kind for m in to_server} == {"logits"}
    assert all(m.numel == K * B for m in to_server)  # uplink K * B per client per iteration
    assert {m.kind for m in to_clients} == {"reply"}
    assert all(m.numel == 2 * K * B for m in to_clients)  # downlink 2 K * B
    per_iteration = algo.cfg.tau * 2 * algo.num_clients  # 2 rounds
    assert len(to_server) == per_iteration and len(to_clients) == per_iteration


def test_server_holds_no_client_model_and_clients_never_hold_the_discriminator():
    algo = _fedal()
    algo.round(1)
    server_modules = _modules_in(algo.server)
    assert server_modules and all(isinstance(m, Discriminator) for m in server_modules)
    for client in algo.clients:
        assert not any(isinstance(m, Discriminator) for m in _modules_in(client))
    # the server's interface takes logits only: a model is rejected
    with pytest.raises((TypeError, AttributeError, RuntimeError)):
        algo.server.respond([c.model for c in algo.clients])


def test_reply_carries_average_and_per_sample_payoff_gradient():
    torch.manual_seed(0)
    from fedrepro.algorithms.fedal.server import AdversarialHelper

    helper = AdversarialHelper(K, 3, (8,), 1e-3, "adam", 2.0)
    server = LogitServer(3, helper)
    logits = [torch.randn(B, K) for _ in range(3)]
    replies = server.respond(logits)
    torch.testing.assert_close(replies[1]["mean_logits"], torch.stack(logits).mean(0))
    assert replies[2]["grad_u"].shape == (B, K)
    # the gradient of U_n w.r.t. softmax-invariant shifts of f_n is zero
    torch.testing.assert_close(replies[0]["grad_u"].sum(-1), torch.zeros(B), atol=1e-6, rtol=0)


def test_fedmd_counters_have_no_gradient_downlink():
    algo = _fedal(use_al=False, use_lf=False)
    algo.round(1)
    assert all(m.numel == K * B for m in algo.wire.messages)


def test_fedavg_uplink_is_the_number_of_parameters():
    torch.manual_seed(0)
    algo = FedAvg(make_data(), POOL[:1], config(record_messages=True), seed=0)
    algo.round(1)
    params = sum(p.numel() for p in algo.clients[0].model.parameters())
    up = [m for m in algo.wire.messages if m.receiver == "server"]
    assert [m.kind for m in up] == ["weights"] * algo.num_clients
    assert all(m.numel == params for m in up)


def test_public_batches_are_identical_across_clients():
    algo = _fedal()
    streams = [c.public_stream for c in algo.clients]
    for _ in range(20):
        draws = [s.next(B) for s in streams]
        for d in draws[1:]:
            np.testing.assert_array_equal(d, draws[0])
    private = [c.local_stream.next(B) for c in algo.clients]
    assert not all(np.array_equal(private[0], p) for p in private[1:])


def _reference_fedmd_round(algo: FedAL) -> None:
    """FedMD written out by hand: 1 CE step, then KL to the mean of the others' logits."""
    for c in algo.clients:
        for _ in range(algo.cfg.tau):
            x, y = c.local_batch()
            c.step(nn.functional.cross_entropy(c.model(x), y))
    for _ in range(algo.cfg.tau):
        xs = [c.public_batch()[1] for c in algo.clients]
        logits = [c.model(x) for c, x in zip(algo.clients, xs)]
        for n, c in enumerate(algo.clients):
            others = torch.stack([f.detach() for m, f in enumerate(logits) if m != n]).mean(0)
            c.step(kl_to_logits(others, logits[n]))


def _params(algo):
    return torch.cat([p.detach().reshape(-1) for c in algo.clients for p in c.model.parameters()])


def test_fedal_without_al_and_lf_is_exactly_fedmd():
    a, b = _fedal(use_al=False, use_lf=False), _fedal(use_al=False, use_lf=False)
    for t in range(1, 4):
        a.round(t)
        _reference_fedmd_round(b)
    # same batches, same updates; only the rounding of (N mean - f_n)/(N-1) vs the mean of the others differs
    torch.testing.assert_close(_params(a), _params(b), rtol=0, atol=1e-6)


def test_method_switches_map_to_the_ablations():
    data = make_data()
    spec = {"method": "fedal", "use_al": False, "use_lf": True}
    torch.manual_seed(0)
    a = build(data, POOL, config(), 0, spec)
    torch.manual_seed(0)
    b = build(data, POOL, config(), 0, {"method": "fedmd_lf"})
    assert (a.use_al, a.use_lf) == (b.use_al, b.use_lf) == (False, True)
    for t in range(1, 3):
        a.round(t)
        b.round(t)
    torch.testing.assert_close(_params(a), _params(b), rtol=0, atol=0)
    assert build(data, POOL, config(), 0, {"method": "fedmd"}).use_lf is False


def test_lf_terms_are_zero_at_the_first_step_of_each_stage():
    torch.manual_seed(0)
    algo = FedAL(make_data(), POOL, config(tau=1), seed=0)
    for t in range(1, 4):
        parts = algo.round(t)
        assert parts["r_loc"] == pytest.approx(0.0, abs=1e-7)
        assert parts["r_glo"] == pytest.approx(0.0, abs=1e-7)


def test_fedal_learns_the_synthetic_task():
    algo = _fedal()
    before = algo.evaluate(0)["acc"]
    for t in range(1, 9):
        algo.round(t)
    after = algo.evaluate(8)
    assert after["acc"] > max(0.6, before + 0.2)
    assert after["iteration"] == 8 * algo.cfg.tau


@pytest.mark.parametrize(
    "make",
    [
        lambda d: FedAL(d, POOL, config(), 0),
        lambda d: FedDF(d, POOL, config(), 1, use_al=True),
        lambda d: FCCL(d, POOL, config(), 0, pretrain_iters=3),
        lambda d: CFD(d, POOL, config(), 0),
        lambda d: FD(d, POOL, config(), 0),
        lambda d: FedProto(d, POOL, config(), 0, variant="prototypes"),
        lambda d: FedProto(d, POOL, config(), 0, variant="public_features"),
        lambda d: FCCL(d, POOL, config(), 0, plus=True),
        lambda d: FedAvg(d, POOL[:1], config(), 0),
    ],
)
def test_checkpoint_resume_is_exact(tmp_path, make):
    data = make_data()
    torch.manual_seed(0)
    full = run_rounds(make(data), 4, Checkpoint(tmp_path / "a.pt", every=1), eval_every=2)
    torch.manual_seed(0)
    run_rounds(make(data), 2, Checkpoint(tmp_path / "b.pt", every=1), eval_every=2)
    torch.manual_seed(123)  # a resumed process starts from other global RNG states
    resumed = run_rounds(make(data), 4, Checkpoint(tmp_path / "b.pt", every=1), eval_every=2)
    assert full.equals(resumed)


def test_inapplicable_settings_raise_clear_errors():
    data = make_data()
    mixed = [
        {"name": "mlp", "options": {"in_features": 12, "hidden": [16]}},
        {"name": "mlp", "options": {"in_features": 12, "hidden": [24]}},
    ]
    with pytest.raises(ValueError, match="fedproto needs one feature dimension"):
        FedProto(data, mixed, config(), 0, assignment=[0, 1, 0])
    with pytest.raises(ValueError, match="fedavg needs one architecture"):
        FedAvg(data, POOL, config(), 0, assignment=[0, 1, 0])
    with pytest.raises(ValueError, match="feddf_al needs at least two architectures"):
        FedDF(data, POOL, config(), 0, use_al=True, assignment=[0, 0, 0])
    no_public = make_data()
    no_public.public_x = None
    with pytest.raises(ValueError, match="needs a public data set"):
        FedAL(no_public, POOL, config(), 0)
    with pytest.raises(ValueError, match="kd_target"):
        config(kd_target="median")


def test_every_baseline_runs_and_sends_what_its_paper_says():
    data = make_data()
    expected = {
        "fedproto": (
            lambda: FedProto(data, POOL, config(record_messages=True), 0, variant="prototypes"),
            {"prototypes"},
        ),
        "fedproto_public": (
            lambda: FedProto(data, POOL, config(record_messages=True), 0, variant="public_features"),
            {"features"},
        ),
        "cfd": (lambda: CFD(data, POOL, config(record_messages=True), 0), {"logits"}),
        "fccl": (lambda: FCCL(data, POOL, config(record_messages=True), 0, pretrain_iters=2), {"logits"}),
        "fccl_plus": (lambda: FCCL(data, POOL, config(record_messages=True), 0, plus=True), {"logits", "similarity"}),
        "fd": (lambda: FD(data, POOL, config(record_messages=True), 0), {"label_logits"}),
        "feddf": (lambda: FedDF(data, POOL, config(record_messages=True), 1), {"weights"}),
    }
    for name, (make, kinds) in expected.items():
        torch.manual_seed(0)
        algo = make()
        algo.round(1)
        assert algo.wire.kinds("server") == kinds, name
        assert 0.0 <= algo.evaluate(1)["acc"] <= 1.0
