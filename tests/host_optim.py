"""fl/optim.py's SGD and Adam steps as they were before they became capturable (the learning rate a Python float,
momentum buffers made at a tensor's first step, Adam's step count and bias corrections on the host): the reference
the capturable ones are compared with, bit for bit (tests/foundation/test_capturable_optim.py, and the FedSC and
FedAL record tests), and what the one-capture tests swap back in to see a capture per round or step."""

from __future__ import annotations

import math

import torch

from fedrepro.fl.optim import Adam, _groups


class HostSGD:
    """fl/optim.SGD before: `lr` a Python float, `buffers[i]` None until tensor i's first step (b = d)."""

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for group in _groups(self.params):
            params = [self.params[i] for i in group]
            directions = [p.grad for p in params]
            if self.weight_decay:
                directions = torch._foreach_add(directions, params, alpha=self.weight_decay)
            if self.momentum:
                directions = self._momentum(group, directions)
            torch._foreach_add_(params, directions, alpha=-self.lr)

    def _momentum(self, group, directions):
        started = [k for k, i in enumerate(group) if self.buffers[i] is not None]
        if started:
            running = [self.buffers[group[k]] for k in started]
            torch._foreach_mul_(running, self.momentum)
            torch._foreach_add_(running, [directions[k] for k in started])
        for k, i in enumerate(group):
            if self.buffers[i] is None:
                self.buffers[i] = directions[k].clone()
        return [self.buffers[i] for i in group]


@torch.no_grad()
def host_adam_step(self) -> None:
    """fl/optim.Adam.step before: the step count read on the host, the bias corrections Python floats
    (a method for `Adam`, monkeypatched in its place)."""
    self.steps.add_(1)
    step = int(self.steps.item())
    beta1, beta2 = self.betas
    bias1 = 1 - beta1**step
    bias2_sqrt = math.sqrt(1 - beta2**step)
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


class HostAdam(Adam):
    """Adam whose step count lives on the host (a Python int, `step_count`), its step `host_adam_step` without the
    device count: how it was, for the capture counts to see a graph per step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.host_steps = 0

    @property
    def step_count(self) -> int:
        return self.host_steps

    @step_count.setter
    def step_count(self, value: int) -> None:
        self.host_steps = value

    @torch.no_grad()
    def step(self) -> None:
        self.host_steps += 1
        beta1, beta2 = self.betas
        bias1, bias2_sqrt = 1 - beta1**self.host_steps, math.sqrt(1 - beta2**self.host_steps)
        grads = [p.grad for p in self.params]
        torch._foreach_lerp_(self.m, grads, 1 - beta1)
        torch._foreach_mul_(self.v, beta2)
        torch._foreach_addcmul_(self.v, grads, grads, value=1 - beta2)
        denom = torch._foreach_sqrt(self.v)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(self.params, self.m, denom, value=-self.lr / bias1)
