"""A plain Adam (Kingma & Ba), numerically the same as `torch.optim.Adam` with its defaults.

Why not torch.optim.Adam: constructing any torch optimiser imports torch._dynamo,
about 2 s of CPU per pipeline job on the 2-core machine (measured), and FedAL's
quick slice runs dozens of short jobs. The update below follows torch's
single-tensor Adam (no weight decay, no amsgrad) step for step; a test checks
that both give identical parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


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
