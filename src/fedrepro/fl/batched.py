"""Many clients of one architecture trained as one program (torch.func).

Parameters of all clients are stacked along a leading client axis; one
`vmap(grad(loss))` call computes every client's gradient for its own batch. This
is where simulation speed comes from when clients share an architecture
(benchmarks/fl_speed.py, docs/benchmarks.md: an MLP 8x faster than a per-client loop at 100
clients on the CPU, 15x at 1000; a LeNet-5 is not faster on a CPU).
Models with buffers that training updates (BatchNorm running statistics) need
the per-client loop instead.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, vmap

from fedrepro.fl.precision import Precision

Params = dict[str, torch.Tensor]


def parameters_of(model: torch.nn.Module) -> Params:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def broadcast(params: Params, count: int) -> Params:
    """The same parameters repeated for `count` clients."""
    return {name: p.unsqueeze(0).expand(count, *p.shape).clone() for name, p in params.items()}


FP32 = Precision()  # the default: fp32 forward passes, NCHW, not compiled


def cross_entropy_loss(model: torch.nn.Module, precision: Precision = FP32) -> Callable:
    """loss(params, x, y) of `model` evaluated functionally, its forward pass in `precision`."""
    buffers = dict(model.named_buffers())

    def forward(params: Params) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda x: functional_call(model, (params, buffers), (x,))

    def loss(params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(precision.forward(forward(params), x), y)

    return loss


def local_sgd(
    loss: Callable,
    params: Params,
    batches: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    lr: float,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
) -> tuple[Params, torch.Tensor]:
    """`steps` SGD steps for every client at once; `batches(step)` returns stacked (x, y).

    Matches SGD (fedrepro.fl.optim / torch.optim; momentum and weight decay included) created fresh at
    the start of local training. Returns the new parameters and the mean loss per client.
    """
    value_and_grad = vmap(grad_and_value(loss))
    velocity = {name: torch.zeros_like(p) for name, p in params.items()}
    loss_sum = torch.zeros(next(iter(params.values())).shape[0])
    for step in range(steps):
        x, y = batches(step)
        grads, losses = value_and_grad(params, x, y)
        loss_sum += losses.detach().cpu()
        for name in params:
            g = grads[name] + weight_decay * params[name] if weight_decay else grads[name]
            if momentum:
                velocity[name] = g if step == 0 else momentum * velocity[name] + g
                g = velocity[name]
            params[name] = params[name] - lr * g
    return params, loss_sum / max(steps, 1)
