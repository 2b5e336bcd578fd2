"""Kernel launches and CPU seconds of a DPZV client's zeroth-order direction per server round: flat buckets
(`fedrepro.algorithms.dpzv.zo.Direction`) against the per-tensor loop it replaced, in the same process.

    .venv/bin/python benchmarks/dpzv_direction_speed.py [--repeats 20]

One DPZV client round's direction work, as `fedrepro.algorithms.dpzv.dpzv` runs it: build the
direction (the sphere's norm), perturb +lambda, -2 lambda, restore, then the momentum-0.9 update.
Reference (`PerTensor`): the same steps drawing z tensor by tensor (one randn, dot / add per tensor,
a host sync per tensor for the norm), as the code did before issue 30. Models: BERT-shaped encoders
(`vfl_text_encoder` with a 12-layer BERT config: BERT-base's 199 parameter tensors at width 16 and 64)
and ResNet-18 with group norm on 3x32x32 views (ModelNet40's client). Launches are counted
(`fedrepro.experiments.cost.count`); seconds are the median over `--repeats` rounds, ours and the
reference alternating, one thread. On a CPU the randn of every element dominates both sides once
a model is more than a few thousand parameters; the launch count is what a GPU pays per op.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from fedrepro.algorithms.dpzv.zo import Direction, ZOUpdater
from fedrepro.experiments.cost import count
from fedrepro.models import build_model


def bert_shaped(width: int) -> dict:
    return {
        "embed_dim": 16,
        "bert_config": {
            "hidden_size": width,
            "num_hidden_layers": 12,
            "num_attention_heads": 2,
            "intermediate_size": 2 * width,
            "vocab_size": 100 * width // 16,
            "max_position_embeddings": 64,
        },
    }


MODELS = {
    "BERT-shaped, width 16": ("vfl_text_encoder", bert_shaped(16)),
    "BERT-shaped, width 64": ("vfl_text_encoder", bert_shaped(64)),
    "ResNet-18 GN, 3x32x32": ("vfl_resnet18", {"embed_dim": 16, "norm": "group", "small_input": True}),
}
LAMBDA = 1e-3


class PerTensor:
    """The reference: the direction drawn tensor by tensor from the re-seeded generator."""

    def __init__(self, params, seed: int):
        self.params, self.seed = params, seed
        total = 0.0
        for _, z in self._draws():
            total += float(torch.dot(z.reshape(-1), z.reshape(-1)))
        self.scale = math.sqrt(sum(p.numel() for p in params)) / math.sqrt(total)

    def _draws(self):
        gen = torch.Generator().manual_seed(self.seed)
        for p in self.params:
            yield p, torch.randn(p.shape, generator=gen)

    @torch.no_grad()
    def add_(self, coeff: float) -> None:
        for p, z in self._draws():
            p.add_(z, alpha=coeff * self.scale)

    @torch.no_grad()
    def momentum_step_(self, buffers, grad_coeff: float, momentum: float, lr: float) -> None:
        for (p, z), buf in zip(self._draws(), buffers):
            buf.mul_(momentum).add_(z, alpha=grad_coeff * self.scale)
            p.add_(buf, alpha=-lr)


def direction_round(make, params, updater, seed: int) -> None:
    u = make(params, seed)
    u.add_(LAMBDA)
    u.add_(-2 * LAMBDA)
    u.add_(LAMBDA)
    updater.step(u, 0.1)


def measure(label: str, name: str, kwargs: dict, repeats: int) -> str:
    torch.manual_seed(0)
    params = [p for p in build_model(name, **kwargs).parameters() if p.requires_grad]
    sides = {"per-tensor": PerTensor, "buckets": Direction}
    updaters = {k: ZOUpdater(params, lr=1e-4, momentum=0.9) for k in sides}
    for k, make in sides.items():
        direction_round(make, params, updaters[k], 0)  # allocates the momentum buffers
    launches = {k: count(lambda k=k: direction_round(sides[k], params, updaters[k], 1)).launches for k in sides}
    times = {k: [] for k in sides}
    for r in range(repeats):
        for k in sides if r % 2 else reversed(sides):
            start = time.perf_counter()
            direction_round(sides[k], params, updaters[k], 2 + r)
            times[k].append(time.perf_counter() - start)
    ref, ours = (statistics.median(times[k]) for k in sides)
    n = sum(p.numel() for p in params)
    return (
        f"| {label} | {len(params)} | {n:,} | {launches['per-tensor']:.0f} | {launches['buckets']:.0f} "
        f"| {ref * 1e3:.1f} | {ours * 1e3:.1f} | {ref / ours:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, one thread")
    print(
        "| client model | tensors | parameters | launches per-tensor | launches buckets | ms per-tensor | ms buckets | x |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, (name, kwargs) in MODELS.items():
        print(measure(label, name, kwargs, args.repeats), flush=True)


if __name__ == "__main__":
    main()
