"""FedSC's local training step is ready for CUDA graphs, proven on the CPU (the "CUDA graphs" lever of
fedrepro.plan).

The step (`base.sgd_step` on `FedSC.step_loss`: forward of the 2V augmented views, NormClip, the Eq. 80 loss with
the received correlation matrix held fixed, gradients, clipping by the global norm, the SGD update) makes no host
sync: the loss stays a 0-dim device tensor, each client's mean is read once at the round's end, and clipping scales
by a clamped factor instead of branching. The augmentations are drawn before the step (`FedSSL.augmented`), so the
step compiles with torch.compile(fullgraph=True) in one graph with eager's numbers. DP-CalR and the kNN monitor
run outside the step and are not part of this claim.
"""

import copy

import pytest
import torch
from torch import nn

from fedrepro.algorithms.fedsc import base, byol, fedca, fedsc, fedx
from fedrepro.algorithms.fedsc.fedsc import FedSC
from fedrepro.fl.optim import SGD
from tests.fedsc.helpers import method_classes, tiny_spec
from tests.graph_ready import (
    SyncCounter,
    aot_eager_fullgraph,
    capture_counting,
    compiled,
    compiled_static,
    host_syncs,
    in_child,
)
from tests.host_optim import HostSGD

SHARING = {"sharing": {"after": 0.0, "every": 1}, "privacy": {"eps": "inf"}}
METHODS = {"fedsc": SHARING, "fedavg_sc": {}, "fedavg_byol": {}, "fedu": {}, "fedema": {}, "fedx": {}, "fedca": {}}
BASELINES = ("fedavg_byol", "fedu", "fedema", "fedx", "fedca")
CLIP = 0.05  # small enough that the clip scales the gradients (factor < 1) in the steps below


@pytest.fixture
def algo(tiny_digits):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    return FedSC(tiny_spec(**SHARING), tiny_digits, seed=0)


def step_inputs(algo, received: bool):
    """The arguments of one local step of client 0: its augmented views (drawn on the host side of the step),
    Eq. 80's loss (alpha 0.6 and a fixed symmetric R_-j, or local SC before any matrix arrived), an SGD whose
    momentum buffers exist (one step taken)."""
    batch = algo.data.client_x(0)[:16]
    dim = algo.net.projector[-1].out_features
    r_minus = torch.randn(dim, dim, generator=torch.Generator().manual_seed(1)) if received else None
    loss = algo.step_loss(0.6 if received else 1.0, None if r_minus is None else (r_minus + r_minus.T) / 2)
    params = list(algo.work.parameters())
    opt = SGD(params, lr=0.03, momentum=0.9, weight_decay=5e-4)
    base.sgd_step(loss, algo.augmented(batch), opt, params, CLIP)
    return loss, algo.augmented(batch), opt, params


@pytest.mark.parametrize("received", [True, False])
def test_a_fedsc_local_step_makes_no_host_sync(algo, received):
    loss, x, opt, params = step_inputs(algo, received)
    assert host_syncs(base.sgd_step, loss, x, opt, params, CLIP) == 0


def captured_step(algo, monkeypatch) -> tuple:
    """The arguments of the last local step of client 0 in round 2 (after round 1): the method's own loss
    closure, its drawn views, its SGD and parameters, the clip."""
    algo.round(1)
    seen = []
    step = base.sgd_step

    def recording(*args):
        seen.append(args)
        return step(*args)

    with monkeypatch.context() as patch:
        patch.setattr(base, "sgd_step", recording)
        algo.client_update(0, algo.global_state(), 2, 0.03)
    return seen[-1]


def baseline(tiny_digits, method: str):
    torch.manual_seed(0)
    return method_classes()[method](tiny_spec(rounds=3, **METHODS[method]), tiny_digits, seed=0)


@pytest.mark.parametrize("method", BASELINES)
def test_a_baseline_local_step_makes_no_host_sync(tiny_digits, method, monkeypatch):
    """FedAvg+BYOL, FedU, FedEMA, FedX and FedCA: their steps on views drawn before the step."""
    args = captured_step(baseline(tiny_digits, method), monkeypatch)
    assert host_syncs(base.sgd_step, *args) == 0


@pytest.mark.parametrize("method", ["fedsc", "fedavg_sc", "fedavg_byol", "fedx", "fedca"])
def test_a_client_update_makes_no_host_sync(tiny_digits, method):
    """A client's whole local training (batches, augmentations, steps, BYOL's EMA) reads nothing on the host.
    FedU and FedEMA read their divergence once per returning client before it (start_local), outside the step."""
    algo = baseline(tiny_digits, method)
    algo.round(1)
    if method == "fedsc":
        assert 0 in algo.received  # round 2 trains on Eq. 80 with alpha < 1
    with SyncCounter() as counter:
        _, loss = algo.client_update(0, algo.global_state(), 2, 0.03)
    assert counter.syncs == 0 and loss.dim() == 0


def test_the_sync_test_sees_one_float_put_back_into_the_step(algo, monkeypatch):
    """The check above fails when the step reads its loss on the host again (the per-step .item())."""
    eq80 = fedsc.local_loss

    def reading(*args):
        loss = eq80(*args)
        loss.item()
        return loss

    monkeypatch.setattr(fedsc, "local_loss", reading)
    loss, x, opt, params = step_inputs(algo, True)
    assert host_syncs(base.sgd_step, loss, x, opt, params, CLIP) == 1


def clipping_by_a_branch(params, max_norm):
    """torch's clip rewritten with the data-dependent branch that clipping code often has."""
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
    if norm > max_norm:
        for p in params:
            p.grad.mul_(max_norm / (norm + 1e-6))


def test_the_sync_test_sees_a_clip_that_branches_on_the_norm(algo, monkeypatch):
    monkeypatch.setattr(nn.utils, "clip_grad_norm_", clipping_by_a_branch)
    loss, x, opt, params = step_inputs(algo, True)
    assert host_syncs(base.sgd_step, loss, x, opt, params, CLIP) == 1


def host_read_local_sgd(net, x, batch_loss, cfg, lr, gen, after_step=None, params=None, draw=None):
    """The local training before the step was made graph-ready: random views drawn inside the loss, backward(),
    the client's mean loss read by float() at its end, a fresh SGD per client-round with the learning rate a
    Python float and momentum buffers made at the first step (tests/host_optim.py)."""
    params = list(params if params is not None else net.parameters())
    opt = HostSGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    net.train()
    n, losses = x.shape[0], []
    for _ in range(cfg.local_epochs):
        order = torch.randperm(n, generator=gen, device=gen.device).to(x.device)
        for start in range(0, n, cfg.batch_size):
            batch = x[order[start : start + cfg.batch_size]]
            if batch.shape[0] < 2:
                continue
            loss = batch_loss(draw(batch) if draw is not None else batch)
            opt.zero_grad()
            loss.backward()
            if cfg.grad_clip:
                nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            if after_step is not None:
                after_step()
            losses.append(loss.detach())
    return float(torch.stack(losses).mean()) if losses else float("nan")


class FloatAlpha:
    """Eq. 80's alpha as it was: the Python float itself in the loss (`set` returns it)."""

    def __init__(self, device):
        pass

    def set(self, alpha: float) -> float:
        return alpha


def rounds(algo, count: int) -> list[dict]:
    return [algo.round(t) for t in range(1, count + 1)]


@pytest.mark.parametrize("method", METHODS)
def test_records_are_bit_identical_to_the_host_read_round(tiny_digits, method, monkeypatch):
    kept_algo = baseline(tiny_digits, method)  # torch.manual_seed(0): the networks' initial weights
    kept = rounds(kept_algo, 3)
    with monkeypatch.context() as patch:
        for module in (fedsc, byol, fedca, fedx):
            patch.setattr(module, "local_sgd", host_read_local_sgd)
        patch.setattr(fedsc, "AlphaTerms", FloatAlpha)
        reference_algo = baseline(tiny_digits, method)
        reference = rounds(reference_algo, 3)
    assert kept == reference  # exact float equality, every key of every round
    for key, value in reference_algo.net.state_dict().items():
        assert torch.equal(kept_algo.net.state_dict()[key], value), key


def check_the_step_compiles(algo, received: bool):
    twin = copy.deepcopy(algo)
    loss, x, opt, params = step_inputs(algo, received)
    twin_loss, _, twin_opt, twin_params = step_inputs(twin, received)
    before = [p.detach().clone() for p in params]
    with aot_eager_fullgraph() as counters:
        got = compiled(base.sgd_step)(twin_loss, x, twin_opt, twin_params, CLIP)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    want = base.sgd_step(loss, x, opt, params, CLIP)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for new, old, start in zip(twin_params, params, before, strict=True):
        torch.testing.assert_close(new, old, rtol=1e-5, atol=1e-6)
        assert not torch.equal(old, start)
    for new, old in zip(twin_opt.buffers, opt.buffers, strict=True):
        torch.testing.assert_close(new, old, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("received", [True, False])
def test_a_fedsc_local_step_compiles_in_one_graph_and_matches_eager(algo, received):
    in_child(check_the_step_compiles, algo, received)


def check_the_captured_step_compiles(algo, twin, monkeypatch):
    step, x, opt, params, clip = captured_step(algo, monkeypatch)
    twin_step, _, twin_opt, twin_params, _ = captured_step(twin, monkeypatch)
    with aot_eager_fullgraph() as counters:
        got = compiled(base.sgd_step)(twin_step, x, twin_opt, twin_params, clip)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    want = base.sgd_step(step, x, opt, params, clip)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for new, old in zip(twin_params, params, strict=True):
        torch.testing.assert_close(new, old, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", BASELINES)
def test_a_baseline_local_step_compiles_in_one_graph_and_matches_eager(tiny_digits, method, monkeypatch):
    algo = baseline(tiny_digits, method)
    in_child(check_the_captured_step_compiles, algo, copy.deepcopy(algo), monkeypatch)


@pytest.mark.parametrize("host_read", ["tolist", "print"])
def test_a_graph_break_in_the_step_fails_the_fullgraph_compile(algo, monkeypatch, host_read):
    """The compile check above fails when the step breaks its graph (a host copy of the loss, a print). A bare
    `.item()` does not break it (dynamo 2.14 captures the scalar in the graph): the sync tests catch that one."""
    eq80 = fedsc.local_loss

    def broken(*args):
        loss = eq80(*args)
        print(loss) if host_read == "print" else loss.tolist()
        return loss

    monkeypatch.setattr(fedsc, "local_loss", broken)
    loss, x, opt, params = step_inputs(algo, True)

    def check():
        with aot_eager_fullgraph(), pytest.raises(torch._dynamo.exc.Unsupported):
            compiled(base.sgd_step)(loss, x, opt, params, CLIP)

    in_child(check)


# ---------------------------------------------------------------- one capture per run
# A CUDA graph replays the kernels it captured with the arguments they had: a step is captured once per run only if
# what changes between rounds (the learning rate of the cosine schedule, Eq. 80's alpha, the momentum restarted at a
# client's first step) is read from device tensors updated in place (fl/optim.SGD, loss.AlphaTerms) and the first
# step takes the path of every other. What stays: one graph per distinct batch shape (the short last batch of each
# client size) and per form of the loss (FedSC: local SC before the first share, Eq. 80 after), each captured once.
# `capture_counting` makes a compile stand for a capture (a float read by the step is a constant of its graph).
CAPTURE_ROUNDS = 3
SHARING_FROM_ROUND_2 = {"sharing": {"after": 0.34, "every": 1}, "privacy": {"eps": "inf"}}


@pytest.fixture
def one_thread():
    """One intra-op thread before the fork of `in_child` (a forked child of a process whose OpenMP pool ran hangs)."""
    torch.set_num_threads(1)


def step_shapes(algo) -> set[int]:
    """The batch sizes of a run's local steps: full batches and each client's short last batch (of 2 or more)."""
    b = algo.train_cfg.batch_size
    return {b for n in algo.data.sizes if n >= b} | {n % b for n in algo.data.sizes if n % b >= 2}


def captured_run(algo) -> tuple[int, list[dict]]:
    """Graphs compiled and records of `CAPTURE_ROUNDS` rounds with every local step compiled (in a forked child)."""
    step = base.sgd_step
    base.sgd_step = compiled_static(step)
    try:
        with capture_counting() as counters:
            records = rounds(algo, CAPTURE_ROUNDS)
            return counters["stats"]["unique_graphs"], records
    finally:
        base.sgd_step = step


def check_one_capture_per_form_and_shape(algo, forms: int):
    eager = rounds(copy.deepcopy(algo), CAPTURE_ROUNDS)
    graphs, records = captured_run(algo)
    assert len({r["lr"] for r in records}) == CAPTURE_ROUNDS  # the learning rate changed every round
    assert graphs == forms * len(step_shapes(algo)) == forms * 2, graphs  # 24 images a client, batches of 16 and 8
    for got, want in zip(records, eager, strict=True):
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key


def test_fedsc_captures_its_step_once_per_form_and_batch_shape_over_three_rounds(tiny_digits, one_thread):
    """FedSC sharing from round 2 (local SC in round 1, Eq. 80 with alpha falling after): 2 forms x 2 shapes,
    over 3 rounds x 5 clients x 2 steps, each client's first step included, and the records of eager steps."""
    torch.manual_seed(0)
    algo = FedSC(tiny_spec(rounds=CAPTURE_ROUNDS, **SHARING_FROM_ROUND_2), tiny_digits, seed=0)
    in_child(check_one_capture_per_form_and_shape, algo, 2)


def test_a_baseline_captures_its_step_once_per_batch_shape_over_three_rounds(tiny_digits, one_thread):
    """FedAvg+BYOL (its EMA outside the step): one form, 2 shapes."""
    in_child(check_one_capture_per_form_and_shape, baseline(tiny_digits, "fedavg_byol"), 1)


def fresh_host_sgd(net, params, cfg, lr):
    return HostSGD([p for p in params if p.requires_grad], lr, cfg.momentum, cfg.weight_decay)


def check_a_capture_per_round(algo):
    graphs, _ = captured_run(algo)
    assert graphs > 2 * len(step_shapes(algo)), graphs


def test_the_capture_count_sees_a_learning_rate_on_the_host(tiny_digits, one_thread, monkeypatch):
    """The count above fails with the SGD as it was (a Python float learning rate, a first step without momentum
    buffers): the float is baked into each round's graph, and the first step is another graph."""
    torch.manual_seed(0)
    algo = FedSC(tiny_spec(rounds=CAPTURE_ROUNDS, **SHARING_FROM_ROUND_2), tiny_digits, seed=0)
    monkeypatch.setattr(base, "local_optimizer", fresh_host_sgd)
    in_child(check_a_capture_per_round, algo)


def test_the_capture_count_sees_alpha_as_a_float(tiny_digits, one_thread, monkeypatch):
    """... and with Eq. 80's alpha a Python float in the loss (a graph per round of sharing)."""
    torch.manual_seed(0)
    monkeypatch.setattr(fedsc, "AlphaTerms", FloatAlpha)
    algo = FedSC(tiny_spec(rounds=CAPTURE_ROUNDS, **SHARING_FROM_ROUND_2), tiny_digits, seed=0)
    in_child(check_a_capture_per_round, algo)
