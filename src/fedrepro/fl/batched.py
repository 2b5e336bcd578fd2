"""Many clients of one architecture trained as one program (torch.func).

Parameters of all clients are stacked along a leading client axis; one
`vmap(grad(loss))` call computes every client's gradient for its own batch. This
is where simulation speed comes from when clients share an architecture
(benchmarks/fl_speed.py, docs/benchmarks.md: an MLP 8x faster than a per-client loop at 100
clients on the CPU, 15x at 1000; a LeNet-5 is not faster on a CPU).
`local_sgd` is FedAvg's: functional SGD, models without training-time buffers. `Stack` is
FedAL's: clients with their own Adam, BatchNorm included (running statistics per client).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, vmap

from fedrepro.fl.optim import Adam, backward_into
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


class Stack:
    """Models of one architecture, and their Adams, stacked along a leading client axis.

    `params` are leaf tensors (G, ...) with gradients, `buffers` the stacked buffers. The forward
    is `vmap(functional_call)` of the first model, the others' layers being the same: BatchNorm in
    training mode normalises each client's slice by that client's batch statistics and updates
    that client's running statistics in place (torch's vmap rule for batch_norm with batched
    buffers). Summing the clients' losses and calling `step` gives every slice its own client's
    gradient (the clients share no parameter), and one Adam over the stacked tensors is elementwise,
    so it is each client's Adam (same step count: the clients of one stage step together).
    `write_back` copies parameters, buffers and Adam state into the clients' own objects.
    """

    def __init__(self, models: Sequence[torch.nn.Module], optimizers: Sequence[Adam]):
        self.models, self.optimizers = list(models), list(optimizers)
        self.template = self.models[0]
        steps = torch.stack([opt.steps for opt in self.optimizers])  # one host read when built (none on meta)
        if not steps.is_meta and bool((steps != steps[0]).any()):
            raise ValueError(f"stacked clients must have taken the same number of Adam steps, got {steps.tolist()}")
        per_model = [dict(m.named_parameters()) for m in self.models]
        self.params = {
            name: torch.stack([p[name].detach() for p in per_model]).requires_grad_(True) for name in per_model[0]
        }
        per_model_buffers = [dict(m.named_buffers()) for m in self.models]
        self.buffers = {name: torch.stack([b[name] for b in per_model_buffers]) for name in per_model_buffers[0]}
        first = self.optimizers[0]
        if len(first.params) != len(self.params):
            raise ValueError("every parameter of a stacked model must be trained by its Adam")
        self.opt = Adam(self.params.values(), lr=first.lr, betas=first.betas, eps=first.eps)
        self.opt.steps.copy_(first.steps)
        for k in range(len(self.opt.params)):
            self.opt.m[k] = torch.stack([opt.m[k] for opt in self.optimizers])
            self.opt.v[k] = torch.stack([opt.v[k] for opt in self.optimizers])
        self._bound: dict[str, _Bound] = {}  # `call`'s wrappers, built once (a module built in a traced step
        # breaks torch.compile's graph: "getattr() on nn.Module with pending mutation", torch 2.14)

    def __len__(self) -> int:
        return len(self.models)

    def forward(self, x: torch.Tensor, shared_input: bool = False, frozen: tuple[Params, Params] | None = None):
        """Every client's output: `x` is (G, B, ...) one batch per client, or (B, ...) given to all
        (`shared_input`). `frozen`: (params, buffers) of a `freeze` copy instead of the live ones."""
        params, buffers = frozen if frozen is not None else (self.params, self.buffers)

        def one(p: Params, b: Params, xb: torch.Tensor) -> torch.Tensor:
            return functional_call(self.template, (p, b), (xb,))

        return vmap(one, in_dims=(0, 0, None if shared_input else 0))(params, buffers, x)

    def call(self, method: str, x: torch.Tensor, shared_input: bool = False):
        """Every client's `model.<method>(x)` (e.g. a ClientModel's `features` or `forward_both`), stacked
        like `forward`; a method returning a tuple gives a tuple of stacked tensors."""
        bound = self._bound.get(method)
        if bound is None:
            bound = self._bound[method] = _Bound(self.template, method)

        def one(p: Params, b: Params, xb: torch.Tensor):
            tensors = {f"model.{k}": v for k, v in (p | b).items()}
            return functional_call(bound, tensors, (xb,))

        return vmap(one, in_dims=(0, 0, None if shared_input else 0))(self.params, self.buffers, x)

    def freeze(self) -> tuple[Params, Params]:
        """A frozen copy of the current parameters and buffers (an anchor snapshot)."""
        return (
            {k: p.detach().clone() for k, p in self.params.items()},
            {k: b.clone() for k, b in self.buffers.items()},
        )

    def step(self, loss: torch.Tensor) -> None:
        """One Adam step of every client on the sum of their losses (`backward_into`: a traced backward() in a
        loop over stacks also fails building a guard on `.grad` under torch.compile, torch 2.14)."""
        self.opt.zero_grad(set_to_none=True)
        backward_into(loss, list(self.params.values()))
        self.opt.step()

    def reset_optimizer(self) -> None:
        """Fresh Adam state for every client (as each client's `Adam(...)` anew)."""
        for t in [self.opt.steps, *self.opt.m, *self.opt.v]:
            t.zero_()
        for opt in self.optimizers:
            opt.steps.zero_()

    @torch.no_grad()
    def write_back(self) -> None:
        """The stacked state into each model and Adam (a few multi-tensor copies)."""
        dst, src = [], []
        for i, (model, opt) in enumerate(zip(self.models, self.optimizers)):
            for name, p in model.named_parameters():
                dst.append(p)
                src.append(self.params[name][i])
            for name, b in model.named_buffers():
                dst.append(b)
                src.append(self.buffers[name][i])
            for k in range(len(opt.m)):
                dst += [opt.m[k], opt.v[k]]
                src += [self.opt.m[k][i], self.opt.v[k][i]]
            opt.steps.copy_(self.opt.steps)
        torch._foreach_copy_(dst, src)


class _Bound(torch.nn.Module):
    """`model.<method>` as a module's forward, so that functional_call can run a method other than forward."""

    def __init__(self, model: torch.nn.Module, method: str):
        super().__init__()
        self.model, self.method = model, method

    def forward(self, x: torch.Tensor):
        return getattr(self.model, self.method)(x)
