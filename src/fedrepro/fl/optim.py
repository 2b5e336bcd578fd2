"""SGD with momentum and Adam written out with plain tensor ops.

Same update rules as torch.optim.SGD (dampening 0, no Nesterov) and
torch.optim.Adam (no amsgrad, no weight decay), step for step; tests check
that they give the same parameters. Why not torch.optim: constructing any
torch optimiser imports torch._dynamo, 2-5 s of CPU per process, and every
quick-scale pipeline job is a fresh process.

Each step is a handful of `torch._foreach_*` calls over all parameters with a
gradient, not one Python loop per tensor: on a GPU one multi-tensor kernel
launch per op instead of one per tensor. On the CPU a foreach op runs the same
per-tensor op in C++, so the parameters are bit for bit the ones the earlier
per-tensor loop gave (tests/foundation/test_optim_foreach.py); the foreach ops
do not import torch._dynamo.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


def _with_grads(params: list[torch.Tensor], *states: list) -> tuple[list, ...]:
    """The parameters that have a gradient, their gradients and their entries of each state list."""
    live = [i for i, p in enumerate(params) if p.grad is not None]
    return ([params[i] for i in live], [params[i].grad for i in live], live,
            *([state[i] for i in live] for state in states))


class SGD:
    def __init__(self, params: Iterable[torch.Tensor], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0):
        if lr <= 0:
            raise ValueError(f"SGD learning rate must be > 0, got {lr}")
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        params, directions, live, buffers = _with_grads(self.params, self.buffers)
        if not params:
            return
        if self.weight_decay:
            directions = torch._foreach_add(directions, params, alpha=self.weight_decay)
        if self.momentum:
            directions = self._momentum(directions, live, buffers)
        torch._foreach_add_(params, directions, alpha=-self.lr)

    def _momentum(self, directions: list, live: list[int], buffers: list) -> list[torch.Tensor]:
        """b = momentum * b + d (b = d at a tensor's first step, as torch.optim.SGD); returns the b's."""
        started = [k for k, b in enumerate(buffers) if b is not None]
        if started:
            running = [buffers[k] for k in started]
            torch._foreach_mul_(running, self.momentum)
            torch._foreach_add_(running, [directions[k] for k in started])
        for k, i in enumerate(live):
            if buffers[k] is None:
                self.buffers[i] = directions[k].clone()
        return [self.buffers[i] for i in live]

    def state_dict(self) -> dict:
        return {"buffers": [None if b is None else b.clone() for b in self.buffers]}

    def load_state_dict(self, state: dict) -> None:
        self.buffers = [None if b is None else b.clone() for b in state["buffers"]]


class Adam:
    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        if lr <= 0:
            raise ValueError(f"Adam learning rate must be > 0, got {lr}")
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.eps = lr, betas, eps
        self.step_count = 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.step_count += 1
        params, grads, _, m, v = _with_grads(self.params, self.m, self.v)
        if not params:
            return
        beta1, beta2 = self.betas
        bias1 = 1 - beta1 ** self.step_count
        bias2_sqrt = math.sqrt(1 - beta2 ** self.step_count)
        torch._foreach_lerp_(m, grads, 1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(params, m, denom, value=-self.lr / bias1)

    def state_dict(self) -> dict:
        return {"step": self.step_count, "m": [t.clone() for t in self.m], "v": [t.clone() for t in self.v]}

    def load_state_dict(self, state: dict) -> None:
        self.step_count = state["step"]
        for dst, src in zip(self.m + self.v, state["m"] + state["v"]):
            dst.copy_(src)
