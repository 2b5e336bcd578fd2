"""fedrepro.fl.optim's foreach steps: the same parameters as a per-tensor loop (bit for bit on the CPU)
and as torch.optim (float64), across a checkpoint, without importing torch._dynamo."""

import math
import subprocess
import sys

import pytest
import torch

from fedrepro.fl import optim
from fedrepro.fl.optim import SGD, Adam

SHAPES = [(16, 3, 3, 3), (16,), (16,), (32, 16, 3, 3), (32,), (10, 32), (10,)]  # conv/bn/linear-like
SGD_OPTIONS = {"lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4}
ADAM_OPTIONS = {"lr": 3e-3, "betas": (0.8, 0.99), "eps": 1e-6}


def tensors(dtype=torch.float32, seed=0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in SHAPES]


def set_grads(params, step: int, skip: bool = True) -> None:
    """Deterministic gradients; with `skip`, tensor 2 has none at step 1 (a layer unused that step)."""
    gen = torch.Generator().manual_seed(100 + step)
    for i, p in enumerate(params):
        g = torch.randn(p.shape, generator=gen, dtype=p.dtype)
        if skip and i == 2 and step == 1:
            p.grad = None
        elif p.grad is None:
            p.grad = g + 0.1 * p.detach()
        else:  # in place, as backward() accumulates into an existing .grad
            p.grad.copy_(g + 0.1 * p.detach())


class LoopSGD:
    """The per-tensor loop fl/optim.SGD ran before foreach (kept here as the reference)."""

    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0):
        self.params, self.lr, self.momentum, self.weight_decay = list(params), lr, momentum, weight_decay
        self.buffers = [None] * len(self.params)

    @torch.no_grad()
    def step(self):
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            d = p.grad.add(p, alpha=self.weight_decay) if self.weight_decay else p.grad
            if self.momentum:
                buf = self.buffers[i]
                buf = d.clone() if buf is None else buf.mul_(self.momentum).add_(d)
                self.buffers[i] = buf
                d = buf
            p.add_(d, alpha=-self.lr)


class LoopAdam:
    """The per-tensor loop fl/optim.Adam ran before foreach."""

    def __init__(self, params, lr, betas, eps):
        self.params, self.lr, self.betas, self.eps, self.t = list(params), lr, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self):
        self.t += 1
        beta1, beta2 = self.betas
        bias1, bias2_sqrt = 1 - beta1**self.t, math.sqrt(1 - beta2**self.t)
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            m.lerp_(p.grad, 1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            p.addcdiv_(m, (v.sqrt() / bias2_sqrt).add_(self.eps), value=-self.lr / bias1)


def run(make, params, steps, skip=True):
    opt = make(params)
    for step in range(steps):
        set_grads(params, step, skip)
        opt.step()
    return opt


CASES = [
    (
        lambda ps: SGD(ps, **SGD_OPTIONS),
        lambda ps: LoopSGD(ps, **SGD_OPTIONS),
        lambda ps: torch.optim.SGD(ps, **SGD_OPTIONS),
    ),
    (
        lambda ps: SGD(ps, lr=0.05, momentum=0.5),
        lambda ps: LoopSGD(ps, lr=0.05, momentum=0.5),
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.5),
    ),
    (lambda ps: SGD(ps, lr=0.05), lambda ps: LoopSGD(ps, lr=0.05), lambda ps: torch.optim.SGD(ps, lr=0.05)),
    (
        lambda ps: Adam(ps, **ADAM_OPTIONS),
        lambda ps: LoopAdam(ps, **ADAM_OPTIONS),
        lambda ps: torch.optim.Adam(ps, **ADAM_OPTIONS),
    ),
]
IDS = ["sgd-momentum-decay", "sgd-momentum", "sgd-plain", "adam"]


@pytest.mark.parametrize("group_elements", [optim.CPU_GROUP_ELEMENTS, 500], ids=["one-group", "groups"])
@pytest.mark.parametrize("ours, loop, _", CASES, ids=IDS)
def test_foreach_step_is_bit_identical_to_the_per_tensor_loop(ours, loop, _, group_elements, monkeypatch):
    monkeypatch.setattr(optim, "CPU_GROUP_ELEMENTS", group_elements)  # 500: the 7 tensors in 3 groups
    a, b = tensors(), tensors()
    run(ours, a, 5)
    run(loop, b, 5)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert not torch.equal(a[0], tensors()[0])  # the steps moved the parameters


@pytest.mark.parametrize("ours, _, reference", CASES, ids=IDS)
def test_foreach_step_matches_torch_optim_in_float64(ours, _, reference):
    # every tensor has a gradient at every step: torch.optim.Adam counts bias-correction steps per
    # tensor, fl/optim.Adam per optimiser (as it always did), so they differ after a skipped tensor
    a, b = tensors(torch.float64), tensors(torch.float64)
    run(ours, a, 5, skip=False)
    run(reference, b, 5, skip=False)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ours", [CASES[0][0], CASES[1][0], CASES[3][0]], ids=["sgd-decay", "sgd", "adam"])
def test_resuming_from_a_state_dict_gives_the_uninterrupted_parameters(ours):
    straight = tensors()
    run(ours, straight, 6)
    resumed = tensors()
    saved = run(ours, resumed, 3).state_dict()
    restored = ours(resumed)
    restored.load_state_dict(saved)
    for step in range(3, 6):
        set_grads(resumed, step)
        restored.step()
    for x, y in zip(straight, resumed):
        assert torch.equal(x, y)


def test_a_step_does_not_import_torch_dynamo():
    code = (
        "import sys, torch\nfrom fedrepro.fl.optim import SGD, Adam\n"
        "p = torch.ones(3, requires_grad=True); p.grad = torch.ones(3)\n"
        "SGD([p], lr=0.1, momentum=0.9, weight_decay=0.1).step(); Adam([p]).step()\n"
        "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
