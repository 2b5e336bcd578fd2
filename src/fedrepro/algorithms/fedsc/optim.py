"""SGD with momentum and Adam written out with plain tensor ops.

Same update rules as torch.optim.SGD (dampening 0, no Nesterov) and
torch.optim.Adam (no amsgrad, L2 weight decay 0), checked against them in the
tests. Why not torch.optim: its first construction imports torch._dynamo,
which costs 2-5 s per process, and every quick-scale job is a fresh process.
"""

from __future__ import annotations

import torch


class SGD:
    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self) -> None:
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


class Adam:
    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.eps = lr, betas, eps
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            denom = (v / (1 - b2**self.t)).sqrt_().add_(self.eps)
            p.addcdiv_(m, denom, value=-self.lr / (1 - b1**self.t))
