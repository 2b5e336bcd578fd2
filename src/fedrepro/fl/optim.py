"""SGD with momentum and Adam written out with plain tensor ops.

Same update rules as torch.optim.SGD (dampening 0, no Nesterov) and
torch.optim.Adam (no amsgrad, no weight decay), step for step; tests check
that they give the same parameters. Why not torch.optim: constructing any
torch optimiser imports torch._dynamo, 2-5 s of CPU per process, and every
quick-scale pipeline job is a fresh process.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


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
        beta1, beta2 = self.betas
        bias1 = 1 - beta1 ** self.step_count
        bias2_sqrt = math.sqrt(1 - beta2 ** self.step_count)
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            g = p.grad
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (v.sqrt() / bias2_sqrt).add_(self.eps)
            p.addcdiv_(m, denom, value=-self.lr / bias1)

    def state_dict(self) -> dict:
        return {"step": self.step_count, "m": [t.clone() for t in self.m], "v": [t.clone() for t in self.v]}

    def load_state_dict(self, state: dict) -> None:
        self.step_count = state["step"]
        for dst, src in zip(self.m + self.v, state["m"] + state["v"]):
            dst.copy_(src)
