"""The stacked steps of FedAL's baselines are ready for CUDA graphs, proven on the CPU (the "CUDA graphs" lever
of fedrepro.plan), as tests/fedal/test_graph_ready.py proves FedAL's own.

FCCL and FCCL+ (fccl.py) run two stacked steps: a collaborative step (`FCCL.collaborative_step_stacked`: logits
(and FCCL+'s similarity matrices) up, the average back, eq. (3)'s loss, one Adam step per stack) and a local step
(`FCCL.local_step_stacked`: CE + the teachers' distillation, one Adam step of the stack). FedMD and FedMD-LF are
FedAL with terms off (fedal.py `SWITCHES`): FedAL's two stacked steps. Each makes no host sync (the losses stay
device tensors, read at the round's or stage's end) and compiles with torch.compile(fullgraph=True) in one graph
with eager's numbers. The batches are drawn on the host before a step, as in the run.
"""

import copy

import pytest
import torch

from fedrepro.algorithms.fedal import fccl
from fedrepro.algorithms.fedal.base import supervised_step_stacked
from fedrepro.algorithms.fedal.cfd import CFD
from fedrepro.algorithms.fedal.fccl import FCCL
from fedrepro.algorithms.fedal.fd import FD
from fedrepro.algorithms.fedal.fedal import SWITCHES, FedAL
from fedrepro.algorithms.fedal.fedavg import local_step_stacked
from fedrepro.algorithms.fedal.feddf import FedDF
from fedrepro.algorithms.fedal.fedproto import FedProto
from fedrepro.fl import transport
from tests.graph_ready import (
    SyncCounter,
    aot_eager_fullgraph,
    capture_counting,
    compiled,
    compiled_static,
    host_syncs,
    in_child,
)

from .helpers import config, make_data
from .test_graph_ready import BATCH, POOL, assert_close_state

FCCL_METHODS = {"fccl": False, "fccl_plus": True}
FEDMD_METHODS = ("fedmd", "fedmd_lf")
PUBLIC_KD = ("cfd", "fedproto")


def make_fccl(method: str) -> FCCL:
    """FCCL or FCCL+, two stacks of two clients, after one round (Adam state exists, teachers pretrained)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    run = FCCL(
        make_data(num_clients=4),
        POOL,
        config(tau=3, batch_size=BATCH),
        seed=0,
        plus=FCCL_METHODS[method],
        pretrain_iters=2,
        local_steps=2,
        assignment=[0, 1, 0, 1],
        batched=True,
    )
    run.round(1)
    return run


def make_fedmd(method: str) -> FedAL:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    use_al, use_lf = SWITCHES[method]
    run = FedAL(
        make_data(num_clients=4),
        POOL,
        config(tau=3, batch_size=BATCH),
        seed=0,
        use_al=use_al,
        use_lf=use_lf,
        assignment=[0, 1, 0, 1],
        batched=True,
    )
    run.round(1)
    return run


def make_public_kd(method: str):
    """CFD or FedProto (public features, the paper's adaptation), two stacks of two clients, after one round."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cls = {"cfd": CFD, "fedproto": FedProto, "fd": FD}[method]
    run = cls(make_data(num_clients=4), POOL, config(tau=3, batch_size=BATCH), 0, assignment=[0, 1, 0, 1], batched=True)
    run.round(1)
    return run


def make_feddf(use_lf: bool) -> FedDF:
    """FedDF (LF on: FedDF-AL's `use_lf`), two stacks of two clients, after one round (teachers received)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data, cfg = make_data(num_clients=4), config(tau=3, batch_size=BATCH)
    run = FedDF(data, POOL, cfg, 0, use_lf=use_lf, assignment=[0, 1, 0, 1], batched=True)
    run.round(1)
    return run


def fedavg_inputs(algo: FedDF) -> tuple:
    """The arguments of fedavg.local_step_stacked (FedAvg's and FedDF's clients) for the first group."""
    stack = algo.stacks()[0]
    x, y = algo._groups[0].batch(algo.clients, BATCH)
    return stack, x, y, stack.freeze() if algo.use_lf else None


def fd_inputs(algo: FD) -> tuple:
    """The arguments of FD's `local_step_stacked` for its first group, as `_round_batched` makes them."""
    group, k = algo._groups[0], algo.data.num_classes
    x, y = group.batch(algo.clients, BATCH)
    sums, counts = torch.randn(len(group.members), k, k), torch.rand(len(group.members), k)
    return algo.stacks()[0], x, y, torch.as_tensor(group.members), sums, counts


def global_inputs(algo) -> tuple:
    """The arguments of a CFD or FedProto `global_step_stacked`, drawn as `_global_iteration_batched` draws them."""
    xb = algo.shared_public_batch()
    if isinstance(algo, CFD):
        idx = torch.as_tensor(algo._server_public.next(BATCH))
        return algo.stacks(), xb, algo.data.public_x[idx]
    return algo.stacks(), xb


def fccl_local_inputs(algo: FCCL) -> tuple:
    stack, group = algo.stacks()[0], algo._groups[0]
    x, y = group.batch(algo.clients, BATCH)
    return stack, x, y, stack.freeze(), algo._intra_teachers()[0]


def stack_state(algo) -> dict[str, torch.Tensor]:
    out = {}
    for i, stack in enumerate(algo.stacks()):
        out.update({f"stack{i}.{k}": p.detach().clone() for k, p in stack.params.items()})
        out.update({f"stack{i}.buffer.{k}": b.clone() for k, b in stack.buffers.items()})
        out.update({f"stack{i}.adam_m{k}": m.clone() for k, m in enumerate(stack.opt.m)})
        out.update({f"stack{i}.adam_v{k}": v.clone() for k, v in enumerate(stack.opt.v)})
    return out


# ---------------------------------------------------------------------- FCCL, FCCL+: no host sync
@pytest.mark.parametrize("method", FCCL_METHODS)
def test_an_fccl_collaborative_step_makes_no_host_sync(method):
    algo = make_fccl(method)
    xb = algo.shared_public_batch()
    assert host_syncs(algo.collaborative_step_stacked, algo.stacks(), xb) == 0


@pytest.mark.parametrize("method", FCCL_METHODS)
def test_an_fccl_local_step_makes_no_host_sync(method):
    algo = make_fccl(method)
    assert host_syncs(algo.local_step_stacked, *fccl_local_inputs(algo)) == 0


@pytest.mark.parametrize("method", FCCL_METHODS)
def test_the_sync_test_sees_one_item_put_back_into_an_fccl_step(method, monkeypatch):
    """The checks above fail when a step reads its loss on the host (the old per-iteration float())."""
    entropy, correlation = fccl.cross_entropy, fccl.stacked_cross_correlation

    def reading_entropy(f, y):
        loss = entropy(f, y)
        loss.sum().item()
        return loss

    def reading_correlation(f, target):
        loss = correlation(f, target)
        loss.sum().item()
        return loss

    monkeypatch.setattr(fccl, "cross_entropy", reading_entropy)
    monkeypatch.setattr(fccl, "stacked_cross_correlation", reading_correlation)
    algo = make_fccl(method)
    assert host_syncs(algo.local_step_stacked, *fccl_local_inputs(algo)) == 1
    assert host_syncs(algo.collaborative_step_stacked, algo.stacks(), algo.shared_public_batch()) == 2  # 2 stacks


@pytest.mark.parametrize("method", FCCL_METHODS)
def test_fccl_records_are_bit_identical_to_the_host_read_round(method, monkeypatch):
    """The round's `collab` is the host mean of each collaborative iteration's mean read by float() after the
    iteration (the path before the step kept it on the device), now read in one copy at the round's end; `local`
    is unchanged (one device mean at the end). Exact equality, and the round makes only those reads."""
    algo = make_fccl(method)
    seen, step = [], FCCL.collaborative_step_stacked

    def host_read(self, *args):
        out = step(self, *args)
        seen.append(float(out))  # what each iteration was read as before
        return out

    monkeypatch.setattr(FCCL, "collaborative_step_stacked", host_read)
    twin = copy.deepcopy(algo)
    with SyncCounter() as counter:
        row = algo.round(2)
    assert len(seen) == algo.cfg.tau
    assert row["collab"] == sum(seen) / len(seen)  # exact
    assert counter.syncs == algo.cfg.tau + 2  # the rebuilt float() per iteration, one copy, the local mean
    monkeypatch.setattr(FCCL, "collaborative_step_stacked", step)
    assert twin.round(2) == row


# ---------------------------------------------------------------------- FedMD, FedMD-LF: FedAL's steps
@pytest.mark.parametrize("method", FEDMD_METHODS)
def test_a_fedmd_stacked_local_step_makes_no_host_sync(method):
    algo = make_fedmd(method)
    stack, group = algo.stacks()[0], algo._groups[0]
    x, y = group.batch(algo.clients, BATCH)
    anchor = stack.freeze() if algo.use_lf else None
    for first in (True, False):
        assert host_syncs(algo.local_step_stacked, stack, x, y, anchor, first) == 0


@pytest.mark.parametrize("method", FEDMD_METHODS)
def test_a_fedmd_stacked_global_step_makes_no_host_sync(method):
    algo = make_fedmd(method)
    anchors = [s.freeze() if algo.use_lf else None for s in algo.stacks()]
    for live in (True, False):
        xb = algo.shared_public_batch()
        assert host_syncs(algo.global_step_stacked, algo.stacks(), anchors, live, xb) == 0


# ---------------------------------------------------------------------- CFD, FedProto; the supervised step
@pytest.mark.parametrize("method", PUBLIC_KD)
def test_a_public_kd_global_step_makes_no_host_sync(method):
    algo = make_public_kd(method)
    assert host_syncs(algo.global_step_stacked, *global_inputs(algo)) == 0


def test_a_supervised_step_makes_no_host_sync():
    """base.supervised_step_stacked: the CE stage of CFD and FedProto, FCCL's teacher pretraining."""
    algo = make_public_kd("cfd")
    x, y = algo._groups[0].batch(algo.clients, BATCH)
    assert host_syncs(supervised_step_stacked, algo.stacks()[0], x, y) == 0


@pytest.mark.parametrize("method", PUBLIC_KD)
def test_public_kd_records_are_bit_identical_to_the_host_read_round(method, monkeypatch):
    """CFD's `kd` and FedProto's `proto_mse`: the host mean of each iteration's mean read by float() after the
    iteration (as before), now read in one copy at the round's end. Exact."""
    algo = make_public_kd(method)
    cls, key = type(algo), {"cfd": "kd", "fedproto": "proto_mse"}[method]
    seen, step = [], cls.global_step_stacked

    def host_read(self, *args):
        out = step(self, *args)
        seen.append(float(out[0] if isinstance(out, tuple) else out))  # what each iteration was read as before
        return out

    monkeypatch.setattr(cls, "global_step_stacked", host_read)
    twin = copy.deepcopy(algo)
    row = algo.round(2)
    assert len(seen) == algo.cfg.tau and row[key] == sum(seen) / len(seen)  # exact
    monkeypatch.setattr(cls, "global_step_stacked", step)
    assert twin.round(2) == row


def test_an_fd_local_step_makes_no_host_sync():
    """FD (Jeong et al.): CE + the per-label logit distillation toward the known labels, the sums added."""
    algo = make_public_kd("fd")
    assert algo.known.any()  # after one round: the KL term is on
    assert host_syncs(algo.local_step_stacked, *fd_inputs(algo)) == 0


@pytest.mark.parametrize("use_lf", [False, True])
def test_a_fedavg_local_step_makes_no_host_sync(use_lf):
    """fedavg.local_step_stacked: FedAvg's and FedDF's (FedDF-AL's) client step, r_loc's anchor or not."""
    algo = make_feddf(use_lf)
    assert host_syncs(local_step_stacked, *fedavg_inputs(algo)) == 0


def test_a_feddf_ensemble_forward_makes_no_host_sync():
    """FedDF's teacher: the received models' stacked eval-mode forwards, their logits averaged."""
    algo = make_feddf(False)
    assert host_syncs(algo.ensemble_logits, algo.data.public_x[:BATCH]) == 0


# ---------------------------------------------------------------------- one graph, eager's numbers
def check_fccl_collaborative_step_compiles(method):
    algo = make_fccl(method)
    twin = copy.deepcopy(algo)
    xb = algo.shared_public_batch()
    before = stack_state(algo)
    with aot_eager_fullgraph() as counters:
        got = compiled(twin.collaborative_step_stacked)(twin.stacks(), xb)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    want = algo.collaborative_step_stacked(algo.stacks(), xb)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert_close_state(stack_state(twin), stack_state(algo))
    assert twin.iteration == algo.iteration and twin.wire.bytes_by_direction == algo.wire.bytes_by_direction
    assert not torch.equal(stack_state(algo)["stack0.head.weight"], before["stack0.head.weight"])


def check_fccl_local_step_compiles(method):
    algo = make_fccl(method)
    twin = copy.deepcopy(algo)
    stack, x, y, inter, intra = fccl_local_inputs(algo)
    before = stack_state(algo)
    with aot_eager_fullgraph() as counters:
        twin_inputs = (twin.stacks()[0], x, y, copy.deepcopy(inter), copy.deepcopy(intra))
        got = compiled(twin.local_step_stacked)(*twin_inputs)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    want = algo.local_step_stacked(stack, x, y, inter, intra)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert_close_state(stack_state(twin), stack_state(algo))
    assert not torch.equal(stack_state(algo)["stack0.head.weight"], before["stack0.head.weight"])


def check_fedmd_steps_compile(method):
    for step in ("local", "global"):
        algo = make_fedmd(method)
        twin = copy.deepcopy(algo)
        stack = algo.stacks()[0]
        if step == "local":
            x, y = algo._groups[0].batch(algo.clients, BATCH)
            anchor = stack.freeze() if algo.use_lf else None
            args = (x, y, anchor, False)
            fn, twin_args = "local_step_stacked", (twin.stacks()[0], *copy.deepcopy(args))
            args = (stack, *args)
        else:
            anchors = [s.freeze() if algo.use_lf else None for s in algo.stacks()]
            args = (anchors, False, algo.shared_public_batch())
            fn, twin_args = "global_step_stacked", (twin.stacks(), *copy.deepcopy(args))
            args = (algo.stacks(), *args)
        with aot_eager_fullgraph() as counters:
            got = compiled(getattr(twin, fn))(*twin_args)
            assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"], step
        want = getattr(algo, fn)(*args)
        assert_close_state(got, want)
        assert_close_state(stack_state(twin), stack_state(algo))


def check_public_kd_step_compiles(method):
    algo = make_public_kd(method)
    twin = copy.deepcopy(algo)
    inputs = global_inputs(algo)
    with aot_eager_fullgraph() as counters:
        got = compiled(twin.global_step_stacked)(twin.stacks(), *inputs[1:])
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    want = algo.global_step_stacked(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert_close_state(stack_state(twin), stack_state(algo))
    if method == "cfd":  # the server's model stepped alike
        server = {k: v.clone() for k, v in algo.server.model.state_dict().items()}
        assert_close_state({k: v.clone() for k, v in twin.server.model.state_dict().items()}, server)


def check_supervised_step_compiles():
    algo = make_public_kd("cfd")
    twin = copy.deepcopy(algo)
    x, y = algo._groups[0].batch(algo.clients, BATCH)
    with aot_eager_fullgraph() as counters:
        got = compiled(supervised_step_stacked)(twin.stacks()[0], x, y)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    want = supervised_step_stacked(algo.stacks()[0], x, y)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert_close_state(stack_state(twin), stack_state(algo))


def check_fd_local_step_compiles():
    algo = make_public_kd("fd")
    twin = copy.deepcopy(algo)
    inputs = fd_inputs(algo)
    twin_inputs = (twin.stacks()[0], *copy.deepcopy(inputs[1:]))
    with aot_eager_fullgraph() as counters:
        got = compiled(twin.local_step_stacked)(*twin_inputs)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    want = algo.local_step_stacked(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for a, b in zip(twin_inputs[4:], inputs[4:]):  # the per-label sums and counts added alike
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert_close_state(stack_state(twin), stack_state(algo))


def check_fedavg_and_feddf_steps_compile(use_lf):
    algo = make_feddf(use_lf)
    twin = copy.deepcopy(algo)
    inputs = fedavg_inputs(algo)
    with aot_eager_fullgraph() as counters:
        got = compiled(local_step_stacked)(twin.stacks()[0], *copy.deepcopy(inputs[1:]))
        xb = algo.data.public_x[:BATCH]
        teacher = compiled(twin.ensemble_logits)(xb)
        assert counters["stats"]["unique_graphs"] == 2 and not counters["graph_break"]
    torch.testing.assert_close(got, local_step_stacked(*inputs), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(teacher, algo.ensemble_logits(xb), rtol=1e-5, atol=1e-6)
    assert_close_state(stack_state(twin), stack_state(algo))


@pytest.mark.parametrize("use_lf", [False, True])
def test_fedavg_and_feddf_steps_compile_in_one_graph_each_and_match_eager(use_lf):
    in_child(check_fedavg_and_feddf_steps_compile, use_lf)


def test_an_fd_local_step_compiles_in_one_graph_and_matches_eager():
    in_child(check_fd_local_step_compiles)


@pytest.mark.parametrize("method", PUBLIC_KD)
def test_a_public_kd_global_step_compiles_in_one_graph_and_matches_eager(method):
    in_child(check_public_kd_step_compiles, method)


def test_a_supervised_step_compiles_in_one_graph_and_matches_eager():
    in_child(check_supervised_step_compiles)


@pytest.mark.parametrize("method", FCCL_METHODS)
def test_an_fccl_collaborative_step_compiles_in_one_graph_and_matches_eager(method):
    in_child(check_fccl_collaborative_step_compiles, method)


@pytest.mark.parametrize("method", FCCL_METHODS)
def test_an_fccl_local_step_compiles_in_one_graph_and_matches_eager(method):
    in_child(check_fccl_local_step_compiles, method)


@pytest.mark.parametrize("method", FEDMD_METHODS)
def test_fedmd_stacked_steps_compile_in_one_graph_and_match_eager(method):
    in_child(check_fedmd_steps_compile, method)


@pytest.mark.parametrize("host_read", ["tolist", "print"])
def test_a_graph_break_in_an_fccl_step_fails_the_fullgraph_compile(monkeypatch, host_read):
    """The compile checks above fail when a step breaks its graph (a host read of a loss, a print)."""
    entropy = fccl.cross_entropy

    def broken(f, y):
        loss = entropy(f, y)
        print(loss) if host_read == "print" else loss.tolist()
        return loss

    monkeypatch.setattr(fccl, "cross_entropy", broken)
    algo = make_fccl("fccl_plus")
    inputs = fccl_local_inputs(algo)

    def check():
        with aot_eager_fullgraph(), pytest.raises(torch._dynamo.exc.Unsupported):
            compiled(algo.local_step_stacked)(*inputs)

    in_child(check)


def test_off_diagonal_slicing_is_the_boolean_mask_bit_for_bit():
    """kd.off_diagonal (static shapes) replaced `m[~eye]` in FCCL's eq. (3) and FCCL+'s similarity logits: the
    same entries in the same order, so the losses and their gradients are bit-identical (float32)."""
    from fedrepro.algorithms.fedal.kd import cross_correlation_loss, off_diagonal, similarity_logits

    def masked(m):
        return m[~torch.eye(m.shape[0], dtype=torch.bool)].reshape(m.shape[0], m.shape[0] - 1)

    def old_correlation(own, target, weight=0.0051):  # the loss as it read before, with the mask
        def standardise(z):
            return (z - z.mean(0)) / (z.std(0) + 1e-8)

        corr = standardise(own).T @ standardise(target.detach()) / own.shape[0]
        return ((1 - torch.diagonal(corr)) ** 2).sum() + weight * ((1 + masked(corr)) ** 2).sum()

    def old_similarity(features, temperature=0.02):
        z = torch.nn.functional.normalize(features, dim=-1)
        return masked(z @ z.T / temperature)

    gen = torch.Generator().manual_seed(0)
    m = torch.randn(7, 7, generator=gen)
    assert torch.equal(off_diagonal(m), masked(m))
    own, target = torch.randn(32, 10, generator=gen), torch.randn(32, 10, generator=gen)
    for new, old, args in (
        (cross_correlation_loss, old_correlation, (target,)),
        (similarity_logits, old_similarity, ()),
    ):
        a, b = own.clone().requires_grad_(), own.clone().requires_grad_()
        got, want = new(a, *args), old(b, *args)
        assert torch.equal(got, want)
        (got * torch.arange(got.numel()).reshape(got.shape)).sum().backward()
        (want * torch.arange(want.numel()).reshape(want.shape)).sum().backward()
        assert torch.equal(a.grad, b.grad)


# ---------------------------------------------------------------- one capture per run
# CFD's and FedProto's global step carries its messages (Wire.carry) and the iteration logs them after it (Wire.log)
# and counts itself, so the step reads no host counter: one graph over every iteration (`capture_counting`: a
# compile stands for a CUDA-graph capture); FCCL's collaborative step likewise.
ITERATIONS = 6


def check_public_kd_step_captured_once(method: str, expected: int | None):
    algo = make_public_kd(method)
    algo.global_step_stacked = compiled_static(algo.global_step_stacked)
    with capture_counting() as counters:
        for _ in range(ITERATIONS):
            algo._global_iteration_batched()
        graphs = counters["stats"]["unique_graphs"]
    assert graphs == expected if expected is not None else graphs > 1, graphs


@pytest.mark.parametrize("method", PUBLIC_KD)
def test_a_public_kd_global_step_is_captured_once_over_its_iterations(method):
    in_child(check_public_kd_step_captured_once, method, 1)


@pytest.mark.parametrize("method", PUBLIC_KD)
def test_the_capture_count_sees_a_public_kd_step_logging_its_messages(method, monkeypatch):
    """The count above fails when the step logs on the Wire itself (its byte counters read inside the step)."""

    wire = transport.Wire()

    def logged_carry(payload):  # what `send` did inside the step: a wire's counters read and written
        wire.log("client", "server", "logits", payload)
        return transport._copy(payload)

    monkeypatch.setattr(transport.Wire, "carry", staticmethod(logged_carry))
    in_child(check_public_kd_step_captured_once, method, None)


def check_fccl_collaborative_step_captured_once(method: str, expected: int | None):
    algo = make_fccl(method)
    algo.collaborative_step_stacked = compiled_static(algo.collaborative_step_stacked)
    with capture_counting() as counters:
        for _ in range(ITERATIONS):
            algo._collaborative_iteration_batched(algo.stacks())
        graphs = counters["stats"]["unique_graphs"]
    assert graphs == expected if expected is not None else graphs > 1, graphs


@pytest.mark.parametrize("method", FCCL_METHODS)
def test_an_fccl_collaborative_step_is_captured_once_over_its_iterations(method):
    """FCCL's collaborative step (FCCL+: the similarities too) logs its messages after the step, as CFD's does."""
    in_child(check_fccl_collaborative_step_captured_once, method, 1)
