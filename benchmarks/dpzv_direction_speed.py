"""CPU seconds of a DPZV client's zeroth-order direction per server round, on many-tensor client models.

    .venv/bin/python benchmarks/dpzv_direction_speed.py [--repeats 20]

One DPZV client round's direction work, as `fedrepro.algorithms.dpzv.dpzv` runs it: build the
direction (the sphere's norm), perturb +lambda, -2 lambda, restore, then the momentum-0.9 update
(`ZOUpdater.step`); beside it the same round with its two forwards at batch 8, for scale. Models:
a BERT-shaped encoder (`vfl_text_encoder` with a 12-layer BERT config of width 64: BERT-base's 199
parameter tensors at 0.4 % of its size, so the per-tensor overhead shows as on a GPU) and Figure 6's /
ModelNet40's ResNet-18 with group norm on 3x32x32 views. One thread; median of `--repeats` rounds
after two warm-up rounds. The script uses only `Direction`, `ZOUpdater` and the model registry, so
the same file times an older checkout (run it from that checkout's root with its src on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from fedrepro.algorithms.dpzv import zo
from fedrepro.algorithms.dpzv.zo import Direction, ZOUpdater
from fedrepro.models import build_model

BERT_SHAPED = {
    "hidden_size": 64,
    "num_hidden_layers": 12,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 1000,
    "max_position_embeddings": 64,
}
MODELS = {
    "BERT-shaped encoder (199 tensors)": (
        "vfl_text_encoder",
        {"embed_dim": 16, "bert_config": BERT_SHAPED},
        lambda: torch.randint(1000, (8, 32)),
    ),
    "ResNet-18 GN, 3x32x32 (62 tensors)": (
        "vfl_resnet18",
        {"embed_dim": 16, "norm": "group", "small_input": True, "in_channels": 3},
        lambda: torch.randn(8, 3, 32, 32),
    ),
}
LAMBDA = 1e-3


def direction_round(params, updater, seed: int) -> None:
    u = Direction(params, seed)
    u.add_(LAMBDA)
    u.add_(-2 * LAMBDA)
    u.add_(LAMBDA)
    updater.step(u, 0.1)


def full_round(model, x, params, updater, seed: int) -> None:
    with torch.no_grad():
        u = Direction(params, seed)
        u.add_(LAMBDA)
        model(x)
        u.add_(-2 * LAMBDA)
        model(x)
        u.add_(LAMBDA)
    updater.step(u, 0.1)


def median_seconds(fn, repeats: int) -> float:
    for s in range(2):
        fn(s)
    times = []
    for s in range(repeats):
        start = time.perf_counter()
        fn(100 + s)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"code: {zo.__file__}, torch {torch.__version__}")
    print("| client model | tensors | parameters | direction s/round | round with 2 forwards s/round |")
    print("|---|---:|---:|---:|---:|")
    for label, (name, kwargs, batch) in MODELS.items():
        print(measure(label, name, kwargs, batch(), args.repeats))


def measure(label: str, name: str, kwargs: dict, x: torch.Tensor, repeats: int) -> str:
    torch.manual_seed(0)
    model = build_model(name, **kwargs).eval()
    params = [p for p in model.parameters() if p.requires_grad]
    updater = ZOUpdater(params, lr=1e-4, momentum=0.9)
    direction = median_seconds(lambda s: direction_round(params, updater, s), repeats)
    full = median_seconds(lambda s: full_round(model, x, params, updater, s), repeats)
    n = sum(p.numel() for p in params)
    return f"| {label} | {len(params)} | {n:,} | {direction:.5f} | {full:.5f} |"


if __name__ == "__main__":
    main()
