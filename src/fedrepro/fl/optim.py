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

# On the CPU a foreach op runs tensor after tensor, so one op over a whole ResNet-18 (47 MB) streams
# it through memory once per op: 3x slower than the per-tensor loop there, while many small tensors
# are 1.8x faster. Groups of at most this many elements keep a group in cache (L2) between ops.
CPU_GROUP_ELEMENTS = 1 << 16


def _groups(params: list[torch.Tensor]) -> list[list[int]]:
    """Indices of the parameters with a gradient, in groups updated by one foreach call per op:
    one group on a GPU (one kernel launch per op), cache-sized groups on the CPU."""
    live = [i for i, p in enumerate(params) if p.grad is not None]
    if not live or params[live[0]].is_cuda:
        return [live] if live else []
    groups, current, size = [], [], 0
    for i in live:
        if current and size + params[i].numel() > CPU_GROUP_ELEMENTS:
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += params[i].numel()
    return groups + [current]


def backward_into(outputs: torch.Tensor, params: list[torch.Tensor], grad_outputs: torch.Tensor | None = None) -> None:
    """`outputs.backward(grad_outputs)` into the `.grad` of `params` (None beforehand), by autograd.grad: the same
    tensors (None for a parameter the outputs do not use, as backward leaves it). A round compiled with
    torch.compile(fullgraph=True) traces it cleanly, where a traced backward() left dynamo state behind that
    broke later compiles in the process (torch 2.14, trace_autograd_ops)."""
    grads = torch.autograd.grad(outputs, params, grad_outputs=grad_outputs, allow_unused=True)
    for p, g in zip(params, grads, strict=True):
        p.grad = g


class SGD:
    def __init__(self, params: Iterable[torch.Tensor], lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
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
        for group in _groups(self.params):
            self._update(group)

    def _update(self, group: list[int]) -> None:
        params = [self.params[i] for i in group]
        directions = [p.grad for p in params]
        if self.weight_decay:
            directions = torch._foreach_add(directions, params, alpha=self.weight_decay)
        if self.momentum:
            directions = self._momentum(group, directions)
        torch._foreach_add_(params, directions, alpha=-self.lr)

    def _momentum(self, group: list[int], directions: list[torch.Tensor]) -> list[torch.Tensor]:
        """b = momentum * b + d (b = d at a tensor's first step, as torch.optim.SGD); returns the b's."""
        started = [k for k, i in enumerate(group) if self.buffers[i] is not None]
        if started:
            running = [self.buffers[group[k]] for k in started]
            torch._foreach_mul_(running, self.momentum)
            torch._foreach_add_(running, [directions[k] for k in started])
        for k, i in enumerate(group):
            if self.buffers[i] is None:
                self.buffers[i] = directions[k].clone()
        return [self.buffers[i] for i in group]

    def state_dict(self) -> dict:
        return {"buffers": [None if b is None else b.clone() for b in self.buffers]}

    def load_state_dict(self, state: dict) -> None:
        self.buffers = [None if b is None else b.clone() for b in state["buffers"]]


class Adam:
    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
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
        bias1 = 1 - beta1**self.step_count
        bias2_sqrt = math.sqrt(1 - beta2**self.step_count)
        for group in _groups(self.params):
            params = [self.params[i] for i in group]
            grads, m, v = [p.grad for p in params], [self.m[i] for i in group], [self.v[i] for i in group]
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
