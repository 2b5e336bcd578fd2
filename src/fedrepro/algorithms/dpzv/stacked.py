"""The clients' queries of a segment of server rounds as one stacked program per client architecture.

The server's rounds stay sequential (each answer uses the head and table that the previous message
left), but a client's query (its forward(s) on its next batch, a zeroth-order method's perturbed
forwards) reads only that client's own state, which only its own rounds change. So in a run of
consecutive rounds whose clients are all distinct (a *segment*: it ends before the first repeated
client or at the evaluation block's end, `VFLAlgorithm.segment`), every query can be computed up
front; the server then answers them one by one in schedule order exactly as in the per-client loop.
On a GPU the per-client loop is bound by kernel launches (a batch-32 ResNet-18 forward is ~60 kernels
of little work each); stacked, a segment's queries cost the launches of one forward.

`ClientStack` holds one architecture's parameter snapshots in stacked tensors (slot, ...): a method
copies a client's current parameters and buffers into a slot (`snapshot`, one multi-tensor copy), may
perturb a slot in place (`trainable`: views of it in `Client.params` order, for a `zo.Direction`), and
runs every filled slot on its own batch by `vmap(functional_call)` (`forward`). The first-order
baselines' slots are leaves with gradients: one backward over the segment's stacked graph gives every
client its own gradient (the clients share no parameter), read back per slot (`gradients`).

Models whose forward cannot run under vmap are not stacked: Hugging Face BERT (transformers 5.x) decides
whether to build its attention mask from `padding_mask.all()`, data-dependent control flow that vmap
refuses (`stackable`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.func import functional_call, vmap


def stackable(model: torch.nn.Module) -> bool:
    """False for a model holding a Hugging Face BERT (see the module docstring)."""
    return not any(type(m).__module__.startswith("transformers.") for m in model.modules())


def signature(client) -> tuple:
    """What must agree for clients to share a stack: parameter and buffer shapes, dtypes, the input's sample shape."""
    return (
        type(client.model),
        tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in client.model.named_parameters()),
        tuple((n, tuple(b.shape), b.dtype) for n, b in client.model.named_buffers()),
        tuple(client.x.shape[1:]),
        client.x.dtype,
    )


def stack_groups(clients: Sequence) -> dict[int, int]:
    """Client index -> group number (clients of one signature form one group, numbered by first client)."""
    numbers: dict[tuple, int] = {}
    return {c.index: numbers.setdefault(signature(c), len(numbers)) for c in clients}


class ClientStack:
    """Stacked parameter snapshots of one architecture's clients: `slots` of them (see the module docstring)."""

    def __init__(self, template: torch.nn.Module, slots: int, requires_grad: bool = False):
        self.template = template
        self.params = {
            name: torch.zeros((slots, *p.shape), dtype=p.dtype, device=p.device).requires_grad_(requires_grad)
            for name, p in template.named_parameters()
        }
        self.buffers = {
            name: torch.zeros((slots, *b.shape), dtype=b.dtype, device=b.device) for name, b in template.named_buffers()
        }
        self.trainable_names = [name for name, p in template.named_parameters() if p.requires_grad]

    @torch.no_grad()
    def snapshot(self, model: torch.nn.Module, slot: int) -> None:
        """Slot `slot` <- the model's current parameters and buffers (one multi-tensor copy)."""
        dst = [self.params[n][slot] for n, _ in model.named_parameters()]
        dst += [self.buffers[n][slot] for n, _ in model.named_buffers()]
        src = [p.detach() for _, p in model.named_parameters()] + [b for _, b in model.named_buffers()]
        torch._foreach_copy_(dst, src)

    def trainable(self, slot: int) -> list[torch.Tensor]:
        """Views of a slot's trainable parameters, in `Client.params` order (what a ZO direction perturbs)."""
        return [self.params[n].detach()[slot] for n in self.trainable_names]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The first x.shape[0] slots, slot k on batch x[k]: (slots, B, ...) -> (slots, B, e)."""
        count = x.shape[0]
        params = {n: p[:count] for n, p in self.params.items()}
        buffers = {n: b[:count] for n, b in self.buffers.items()}

        def one(p, b, xb):
            return functional_call(self.template, (p, b), (xb,))

        return vmap(one)(params, buffers, x)

    def clear_gradients(self) -> None:
        for p in self.params.values():
            p.grad = None

    def gradients(self, slot: int) -> list[torch.Tensor]:
        """A slot's gradients after a backward, in `Client.params` order."""
        return [self.params[n].grad[slot] for n in self.trainable_names]


class Stacks:
    """Every client group's `ClientStack`, `per_client` snapshots per client (DPZV: w + lambda u and
    w - lambda u; ZOO-VFL: w and w + lambda u; VAFL, VFL-CZOFO: w with gradients)."""

    def __init__(self, clients: Sequence, per_client: int, requires_grad: bool = False):
        self.group_of = stack_groups(clients)
        sizes: dict[int, int] = {}
        templates: dict[int, torch.nn.Module] = {}
        for c in clients:
            g = self.group_of[c.index]
            sizes[g] = sizes.get(g, 0) + 1
            templates.setdefault(g, c.model)
        self.per_client = per_client
        self.stacks = {g: ClientStack(templates[g], per_client * sizes[g], requires_grad) for g in sizes}

    def split(self, turns: Sequence[tuple[int, object]]) -> list[tuple[ClientStack, list[int]]]:
        """The segment's turns by group: (stack, turn positions), groups in order of first appearance."""
        out: dict[int, list[int]] = {}
        for i, (m, _) in enumerate(turns):
            out.setdefault(self.group_of[m], []).append(i)
        return [(self.stacks[g], positions) for g, positions in out.items()]
