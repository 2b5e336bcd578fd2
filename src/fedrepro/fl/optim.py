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

Both are capturable: everything a step reads that changes between steps or rounds lives in device tensors
updated in place, so one CUDA graph (or one torch.compile graph) of a step replays every later step of the run
(tests/foundation/test_capturable_optim.py). SGD's learning rate is a 0-dim tensor (`set_lr`) and its momentum
buffers exist from the start as zeros (`restart`: b = 0.9 * 0 + d is torch's first-step b = d exactly, so the
first step takes the path of every other); Adam's step count and bias corrections are device tensors (float64,
as the host's Python floats were: the same values, bit for bit, on the CPU).
"""

from __future__ import annotations

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


def scalar(value: float, params: list[torch.Tensor], dtype: torch.dtype | None = None) -> torch.Tensor:
    """A 0-dim tensor holding `value` on the parameters' device, in their dtype (a step's scalar a graph reads)."""
    like = params[0] if params else torch.empty(0)
    return torch.tensor(value, dtype=dtype or like.dtype, device=like.device)


class SGD:
    def __init__(self, params: Iterable[torch.Tensor], lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        self.params = [p for p in params if p.requires_grad]
        self.momentum, self.weight_decay = momentum, weight_decay
        # set_lr: filled in place, so a captured step reads each round's; float64, the Python float's value (a
        # step casts it to the parameters' dtype as it cast the float)
        self.lr = scalar(0.0, self.params, torch.float64)
        self.set_lr(lr)
        self.buffers = [torch.zeros_like(p) for p in self.params] if momentum else []

    def set_lr(self, lr: float) -> None:
        if lr <= 0:
            raise ValueError(f"SGD learning rate must be > 0, got {lr}")
        self.lr.fill_(lr)

    @torch.no_grad()
    def restart(self, lr: float) -> None:
        """The optimiser as freshly made with learning rate `lr` (zero momentum), its tensors kept in place."""
        self.set_lr(lr)
        if self.buffers:
            torch._foreach_zero_(self.buffers)

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
        if params[0].is_cpu:
            # p - lr * d as one fused multiply-add, the rounding of add_(d, alpha=-lr): bit for bit the update
            # with the learning rate a Python float (on the CPU a foreach op runs per tensor anyway)
            torch._foreach_addcmul_(params, directions, [self.lr] * len(params), value=-1)
        else:  # a GPU (and the meta device the planner counts on): two multi-tensor kernels, torch.optim.SGD's
            # capturable form, not one kernel per tensor
            torch._foreach_add_(params, torch._foreach_mul(directions, self.lr), alpha=-1)

    def _momentum(self, group: list[int], directions: list[torch.Tensor]) -> list[torch.Tensor]:
        """b = momentum * b + d from b = 0 (equals torch.optim.SGD's b = d at a tensor's first step); returns the b's."""
        for k, i in enumerate(group):
            if self.buffers[i].dtype != directions[k].dtype:  # the parameters changed dtype after construction
                self.buffers[i] = torch.zeros_like(directions[k])
        running = [self.buffers[i] for i in group]
        torch._foreach_mul_(running, self.momentum)
        torch._foreach_add_(running, directions)
        return running

    def state_dict(self) -> dict:
        return {"buffers": [b.clone() for b in self.buffers]}

    def load_state_dict(self, state: dict) -> None:
        for dst, src in zip(self.buffers, state["buffers"], strict=True):
            dst.copy_(src) if src is not None else dst.zero_()  # None: a checkpoint from before the zeros


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
        # the step count on the device (float64: exact to 2^53), so a captured step counts for itself
        self.steps = scalar(0.0, self.params, torch.float64)
        self.neg_lr = scalar(-lr, [self.steps])
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    @property
    def step_count(self) -> int:
        """The step count on the host (a read of the device: for checks and checkpoints, never in a step)."""
        return int(self.steps.item())

    @step_count.setter
    def step_count(self, value: int) -> None:
        self.steps.fill_(value)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        step_size, bias2_sqrt = self._scalars()
        for group in _groups(self.params):
            params = [self.params[i] for i in group]
            grads, m, v = [p.grad for p in params], [self.m[i] for i in group], [self.v[i] for i in group]
            torch._foreach_lerp_(m, grads, 1 - self.betas[0])
            torch._foreach_mul_(v, self.betas[1])
            torch._foreach_addcmul_(v, grads, grads, value=1 - self.betas[1])
            denom = torch._foreach_sqrt(v)
            torch._foreach_div_(denom, bias2_sqrt)
            torch._foreach_add_(denom, self.eps)
            # p + (s * m) / denom: the rounding of addcdiv_(m, denom, value=s) with s a Python float
            torch._foreach_addcdiv_(params, torch._foreach_mul(m, step_size), denom)

    def _scalars(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The step count advanced; -lr / (1 - beta1^t) and sqrt(1 - beta2^t) in float64 (what the host computed
        in Python floats: pow and sqrt of float64 0-dim tensors give the same doubles on the CPU), then in the
        parameters' dtype, as a Python scalar is cast."""
        self.steps.add_(1)
        beta1, beta2 = self.betas
        step_size = self.neg_lr / (1 - torch.pow(beta1, self.steps))
        bias2_sqrt = torch.sqrt(1 - torch.pow(beta2, self.steps))
        dtype = self.params[0].dtype if self.params else torch.float32
        return step_size.to(dtype), bias2_sqrt.to(dtype)

    def state_dict(self) -> dict:
        return {"step": self.step_count, "m": [t.clone() for t in self.m], "v": [t.clone() for t in self.v]}

    def load_state_dict(self, state: dict) -> None:
        self.step_count = state["step"]
        for dst, src in zip(self.m + self.v, state["m"] + state["v"]):
            dst.copy_(src)
