"""fl/optim.py's SGD and Adam are capturable: what changes between steps or rounds (SGD's learning rate and its
momentum restarted at a client's first step, Adam's step count and bias corrections) lives in device tensors
updated in place, so one graph of a step serves every later step (a compile stands for a CUDA-graph capture,
tests/graph_ready.capture_counting); and the parameters they give are bit for bit those of the host-scalar steps
they replace (tests/host_optim.py)."""

import copy

import pytest
import torch

from fedrepro.fl import optim
from fedrepro.fl.optim import SGD, Adam
from tests.foundation.test_optim_foreach import ADAM_OPTIONS, set_grads, tensors
from tests.graph_ready import capture_counting, compiled_static
from tests.host_optim import HostAdam, HostSGD, host_adam_step

ROUND_LRS = [0.1, 0.07, 0.02]  # a cosine schedule's falling rates, one per round


@pytest.mark.parametrize("group_elements", [optim.CPU_GROUP_ELEMENTS, 500], ids=["one-group", "groups"])
def test_a_restarted_sgd_is_bit_identical_to_a_fresh_host_sgd_each_round(group_elements, monkeypatch):
    """One SGD restarted each round (zero momentum, the round's rate in its tensor) against a fresh SGD per round
    with a Python float rate and buffers made at the first step; tensor 2 skips a step (no gradient)."""
    monkeypatch.setattr(optim, "CPU_GROUP_ELEMENTS", group_elements)
    ours, host = tensors(), tensors()
    kept = SGD(ours, lr=ROUND_LRS[0], momentum=0.9, weight_decay=5e-4)
    for lr in ROUND_LRS:
        kept.restart(lr)
        fresh = HostSGD(host, lr=lr, momentum=0.9, weight_decay=5e-4)
        for step in range(4):
            set_grads(ours, step)
            set_grads(host, step)
            kept.step()
            fresh.step()
        for x, y in zip(ours, host, strict=True):
            assert torch.equal(x, y)
    assert not torch.equal(ours[0], tensors()[0])


@pytest.mark.parametrize("group_elements", [optim.CPU_GROUP_ELEMENTS, 500], ids=["one-group", "groups"])
def test_the_device_step_count_adam_is_bit_identical_to_the_host_count(group_elements, monkeypatch):
    """60 steps (the bias corrections change at every one), then a reset as a stage's fresh Adam."""
    monkeypatch.setattr(optim, "CPU_GROUP_ELEMENTS", group_elements)
    ours, host = tensors(), tensors()
    mine, theirs = Adam(ours, **ADAM_OPTIONS), Adam(host, **ADAM_OPTIONS)
    for _ in range(2):
        for step in range(30):
            set_grads(ours, step)
            set_grads(host, step)
            mine.step()
            host_adam_step(theirs)
        for x, y in zip(ours, host, strict=True):
            assert torch.equal(x, y)
        assert mine.step_count == theirs.step_count == 30
        for opt in (mine, theirs):
            opt.step_count = 0
    assert not torch.equal(ours[0], tensors()[0])


def loss_of(params, x):
    return sum((p * x[: p.numel()].view_as(p)).square().sum() for p in params)


def train_step(opt, params, x):
    """A training step as the runs take it: gradients by autograd.grad, then the optimiser's step."""
    optim.backward_into(loss_of(params, x), params)
    opt.step()


def graphs_over_steps(make, rounds: list[float], steps: int) -> int:
    """Graphs a compiled `train_step` needs over `steps` steps in each of `rounds` (the rate of each), each round
    restarting the optimiser as a client's fresh one (`restart` when it has one, else a new `make`)."""
    params = tensors()
    step = compiled_static(train_step)
    x = torch.randn(8192, generator=torch.Generator().manual_seed(0))
    opt = make(params, rounds[0])
    with capture_counting() as counters:
        for lr in rounds:
            if hasattr(opt, "restart"):
                opt.restart(lr)
            else:
                opt = make(params, lr)
            for _ in range(steps):
                step(opt, params, x)
        return counters["stats"]["unique_graphs"]


def make_sgd(params, lr):
    return SGD(params, lr=lr, momentum=0.9, weight_decay=5e-4)


def make_host_sgd(params, lr):
    return HostSGD(params, lr=lr, momentum=0.9, weight_decay=5e-4)


def make_adam(params, lr):
    return Adam(params, **ADAM_OPTIONS)


def make_host_adam(params, lr):
    return HostAdam(params, **ADAM_OPTIONS)


def check_graphs(make, rounds, steps, expected):
    got = graphs_over_steps(make, rounds, steps)
    assert (got == expected) if expected is not None else got > 1, got


@pytest.mark.parametrize(
    "make, rounds, expected",
    [
        (make_sgd, ROUND_LRS, 1),  # 3 rounds x 3 steps, first steps included: one graph
        (make_adam, ROUND_LRS[:1], 1),  # 9 steps, a new bias correction each: one graph
        (make_host_sgd, ROUND_LRS, None),  # as it was: a graph per round's rate and per first step
        (make_host_adam, ROUND_LRS[:1], None),  # as it was: a graph per step count
    ],
    ids=["sgd", "adam", "host-sgd-recaptures", "host-adam-recaptures"],
)
def test_a_step_is_captured_once_across_steps_and_rounds(make, rounds, expected):
    check_graphs(make, rounds, 3 if len(rounds) > 1 else 9, expected)


def test_the_compiled_step_gives_the_eager_parameters():
    """The one graph's steps (3 rounds x 3, each round's rate read from the tensor) equal eager's, bit for bit."""

    def check():
        eager, traced = tensors(), tensors()
        x = torch.randn(8192, generator=torch.Generator().manual_seed(0))
        a, b = make_sgd(eager, ROUND_LRS[0]), make_sgd(traced, ROUND_LRS[0])
        step = compiled_static(train_step)
        with capture_counting():
            for lr in ROUND_LRS:
                a.restart(lr)
                b.restart(lr)
                for _ in range(3):
                    train_step(a, eager, x)
                    step(b, traced, x)
        for p, q in zip(eager, traced, strict=True):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)

    check()


def test_a_stack_copies_its_step_count_to_the_clients_adams():
    """fl.batched.Stack keeps the stacked Adam's device count and writes it back into every client's Adam."""
    from fedrepro.fl.batched import Stack

    nets = [torch.nn.Linear(3, 2) for _ in range(2)]
    stack = Stack(nets, [Adam(n.parameters()) for n in nets])
    for _ in range(3):
        stack.step(stack.forward(torch.ones(2, 4, 3)).square().sum())
    stack.write_back()
    assert [opt.step_count for opt in stack.optimizers] == [3, 3]
    again = Stack(copy.deepcopy(nets), [Adam(n.parameters()) for n in nets])
    assert again.opt.step_count == 0
    stack.reset_optimizer()
    assert stack.opt.step_count == 0 and all(opt.step_count == 0 for opt in stack.optimizers)
