"""A stacked FedAL step is ready for CUDA graphs, proven on the CPU (the "CUDA graphs" lever of fedrepro.plan).

The stacked path (`batched: true`, fl.batched.Stack) runs each architecture group's clients as one program. Its
two steps, a local step (`FedAL.local_step_stacked`: vmap forward, CE + r_loc, one Adam step of the stack) and
a global-transfer iteration (`FedAL.global_step_stacked`: logits up, the server's discriminator step and reply,
KD + AL + r_glo, one Adam step per stack), make no host sync (their loss parts stay 0-dim device tensors, read
at the stage's end), and each compiles with torch.compile(fullgraph=True) in one graph with eager's numbers.
The batches are drawn on the host before a step (each client's own index stream), as in the run.
"""

import copy

import pytest
import torch

from fedrepro.algorithms.fedal import fedal
from fedrepro.algorithms.fedal.fedal import FedAL
from fedrepro.algorithms.fedal.server import AdversarialConfig
from fedrepro.fl import batched, transport
from fedrepro.fl.optim import Adam
from tests.graph_ready import (
    SyncCounter,
    aot_eager_fullgraph,
    capture_counting,
    compiled,
    compiled_static,
    host_syncs,
    in_child,
)
from tests.host_optim import HostAdam, host_adam_step

from .helpers import config, make_data

POOL = [  # the quick pools' two MLP shapes (config.yaml fedal.pools.digits_het) on 12 features
    {"name": "mlp", "options": {"in_features": 12, "hidden": [32]}},
    {"name": "mlp", "options": {"in_features": 12, "hidden": [64, 32]}},
]
BATCH = 32


@pytest.fixture
def algo():
    """FedAL (AL and LF on), two stacks of two clients, after one round (Adam and discriminator state exist)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    run = FedAL(
        make_data(num_clients=4),
        POOL,
        config(tau=5, batch_size=BATCH),
        seed=0,
        adversarial=AdversarialConfig(hidden=(32, 256)),  # the paper's FC 32 and 256 (config.yaml)
        assignment=[0, 1, 0, 1],
        batched=True,
    )
    run.round(1)
    return run


def local_inputs(algo):
    stack, group = algo.stacks()[0], algo._groups[0]
    x, y = group.batch(algo.clients, BATCH)
    return stack, x, y, stack.freeze()


def global_inputs(algo):
    return algo.stacks(), [s.freeze() for s in algo.stacks()], algo.shared_public_batch()


def stack_state(algo) -> dict[str, torch.Tensor]:
    out = {}
    for i, stack in enumerate(algo.stacks()):
        out.update({f"stack{i}.{k}": p.detach().clone() for k, p in stack.params.items()})
        out.update({f"stack{i}.adam_m{k}": m.clone() for k, m in enumerate(stack.opt.m)})
        out.update({f"stack{i}.adam_v{k}": v.clone() for k, v in enumerate(stack.opt.v)})
    out.update({f"disc.{k}": v.clone() for k, v in algo.server.adversary.disc.state_dict().items()})
    return out


@pytest.mark.parametrize("first", [True, False])
def test_a_stacked_local_step_makes_no_host_sync(algo, first):
    stack, x, y, anchor = local_inputs(algo)
    assert host_syncs(algo.local_step_stacked, stack, x, y, anchor, first) == 0


@pytest.mark.parametrize("live", [True, False])
def test_a_stacked_global_step_makes_no_host_sync(algo, live):
    stacks, anchors, xb = global_inputs(algo)
    assert host_syncs(algo.global_step_stacked, stacks, anchors, live, xb) == 0


def test_the_sync_test_sees_one_float_put_back_into_the_step(algo, monkeypatch):
    """The check above fails when a step reads a loss part on the host again (the stage's per-iteration read)."""
    terms = fedal.local_terms

    def reading(f, y, anchor_logits, cfg):
        loss, parts = terms(f, y, anchor_logits, cfg)
        return loss, {k: float(v.mean()) for k, v in parts.items()}

    monkeypatch.setattr(fedal, "local_terms", reading)
    stack, x, y, anchor = local_inputs(algo)
    assert host_syncs(algo.local_step_stacked, stack, x, y, anchor, False) == 2  # ce and r_loc


def test_a_stage_reads_its_iterations_once_with_the_per_iteration_numbers(algo, monkeypatch):
    """The global stage's record is the host mean of each iteration's mean, read after the stage (one copy per
    part) rather than by float() after each iteration: the same numbers as before."""
    seen: dict[str, list[float]] = {}
    step = FedAL.global_step_stacked

    def recording(self, *args):
        out = step(self, *args)
        for k, v in out.items():
            seen.setdefault(k, []).append(float(v))  # what each iteration was read as before
        return out

    monkeypatch.setattr(FedAL, "global_step_stacked", recording)
    with SyncCounter() as counter:
        row = algo._global_stage_batched()
    assert set(seen) == {"kd", "r_glo"} and all(len(v) == algo.cfg.tau for v in seen.values())
    for key, values in seen.items():
        assert row[key] == sum(values) / len(values)  # exact
    assert counter.syncs == 2 * algo.cfg.tau + 3  # the recording's reads, one copy per part, disc_loss's mean


def assert_close_state(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-6, msg=key)


def check_the_local_step_compiles(algo):
    twin = copy.deepcopy(algo)
    stack, x, y, anchor = local_inputs(algo)
    before = stack_state(algo)
    with aot_eager_fullgraph() as counters:
        got = compiled(twin.local_step_stacked)(twin.stacks()[0], x, y, copy.deepcopy(anchor), False)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    want = algo.local_step_stacked(stack, x, y, anchor, False)
    assert_close_state(got, want)
    assert_close_state(stack_state(twin), stack_state(algo))
    assert not torch.equal(stack_state(algo)["stack0.head.weight"], before["stack0.head.weight"])


def check_the_global_step_compiles(algo):
    twin = copy.deepcopy(algo)
    stacks, anchors, xb = global_inputs(algo)
    twin_anchors = copy.deepcopy(anchors)
    before = stack_state(algo)
    with aot_eager_fullgraph() as counters:
        got = compiled(twin.global_step_stacked)(twin.stacks(), twin_anchors, False, xb)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    want = algo.global_step_stacked(stacks, anchors, False, xb)
    assert_close_state(got, want)
    after = stack_state(algo)
    assert_close_state(stack_state(twin), after)
    assert all(not torch.equal(after[k], before[k]) for k in after if k.startswith("disc."))  # D stepped too


def test_a_stacked_local_step_compiles_in_one_graph_and_matches_eager(algo):
    in_child(check_the_local_step_compiles, algo)


def test_a_stacked_global_step_compiles_in_one_graph_and_matches_eager(algo):
    in_child(check_the_global_step_compiles, algo)


@pytest.mark.parametrize("host_read", ["tolist", "print"])
def test_a_graph_break_in_the_step_fails_the_fullgraph_compile(algo, monkeypatch, host_read):
    """The checks above fail when a step breaks its graph (a host read of a loss, a print)."""
    terms = fedal.local_terms

    def broken(f, y, anchor_logits, cfg):
        loss, parts = terms(f, y, anchor_logits, cfg)
        print(loss) if host_read == "print" else loss.tolist()
        return loss, parts

    monkeypatch.setattr(fedal, "local_terms", broken)
    stack, x, y, anchor = local_inputs(algo)

    def check():
        with aot_eager_fullgraph(), pytest.raises(torch._dynamo.exc.Unsupported):
            compiled(algo.local_step_stacked)(stack, x, y, anchor, False)

    in_child(check)


# ---------------------------------------------------------------- one capture per run
# A CUDA graph replays its kernels with the arguments they had when captured: Adam's step count and bias
# corrections are device tensors (fl/optim.Adam), so one graph of a stacked step serves every step of the run, and a
# stage's fresh Adam (`reset_optimizer`) zeroes them in place. `capture_counting`: a compile stands for a capture.
STAGES = 2


def fresh_run():
    torch.manual_seed(0)
    return FedAL(
        make_data(num_clients=4),
        POOL,
        config(tau=5, batch_size=BATCH),
        seed=0,
        adversarial=AdversarialConfig(hidden=(32, 256)),
        assignment=[0, 1, 0, 1],
        batched=True,
    )


def test_records_are_bit_identical_to_the_host_adam_step(monkeypatch):
    """Two rounds of stacked FedAL with the device step count against Adam's step as it was (tests/host_optim.py):
    every record and every client's parameters and Adam state, bit for bit."""
    torch.set_num_threads(1)
    kept_run = fresh_run()
    kept = [kept_run.round(t) for t in (1, 2)]
    with monkeypatch.context() as patch:
        patch.setattr(Adam, "step", host_adam_step)
        host_run = fresh_run()
        host = [host_run.round(t) for t in (1, 2)]
    assert kept == host
    for got, want in zip(stack_state(kept_run).values(), stack_state(host_run).values(), strict=True):
        assert torch.equal(got, want)
    assert [c.opt.step_count for c in kept_run.clients] == [c.opt.step_count for c in host_run.clients]


def local_stage_graphs(algo) -> int:
    """Graphs compiled by `STAGES` local stages of tau steps of stack 0, each stage with a fresh Adam (in place)."""
    step = compiled_static(algo.local_step_stacked)
    stack, group = algo.stacks()[0], algo._groups[0]
    with capture_counting() as counters:
        for _ in range(STAGES):
            stack.reset_optimizer()
            anchor = stack.freeze()
            for i in range(algo.cfg.tau):
                x, y = group.batch(algo.clients, BATCH)
                step(stack, x, y, anchor, i == 0)
        return counters["stats"]["unique_graphs"]


def check_local_stage_graphs(algo, expected: int | None):
    graphs = local_stage_graphs(algo)
    assert graphs == expected if expected is not None else graphs > 2, graphs


def test_a_stacked_local_step_is_captured_once_per_form_over_two_stages(algo):
    """2 stages x 5 steps, Adam's bias corrections new at each: 2 graphs, the stage's first step (its anchor the live
    forward, FedAL.share_first_anchor) and the others."""
    in_child(check_local_stage_graphs, algo, 2)


def test_the_capture_count_sees_adam_s_step_count_on_the_host(algo, monkeypatch):
    """The count above fails with Adam's step count on the host: a graph per step."""
    monkeypatch.setattr(batched, "Adam", HostAdam)
    algo._stacks = None  # the stacks rebuilt with the host-count Adam
    in_child(check_local_stage_graphs, algo, None)


def global_stage_graphs(algo) -> int:
    """Graphs compiled by `STAGES` global stages (tau iterations each) with the global step compiled."""
    algo.global_step_stacked = compiled_static(algo.global_step_stacked)
    with capture_counting() as counters:
        for _ in range(STAGES):
            algo._global_stage_batched()
        return counters["stats"]["unique_graphs"]


def check_global_stage_graphs(algo, expected: int | None):
    graphs = global_stage_graphs(algo)
    assert graphs == expected if expected is not None else graphs > 2, graphs


def test_a_stacked_global_step_is_captured_once_per_form_over_two_stages(algo):
    """2 stages x 5 iterations: 2 graphs (the stage's first, its anchor the live forward, and the others). The step
    carries its messages (Wire.carry) and the iteration logs them after it (Wire.log), so it reads no host counter."""
    in_child(check_global_stage_graphs, algo, 2)


def test_the_capture_count_sees_the_wire_logged_inside_the_step(algo, monkeypatch):
    """The count above fails when the step logs its messages itself (the Wire's byte counters read in the step)."""
    wire = algo.wire

    def logged_carry(payload):  # what `send` did inside the step
        wire.log("client", "server", "logits", payload)
        return transport._copy(payload)

    monkeypatch.setattr(transport.Wire, "carry", staticmethod(logged_carry))
    in_child(check_global_stage_graphs, algo, None)
