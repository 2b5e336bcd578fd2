"""Seconds per DPZV server round with the segment's client queries stacked (`stack_clients`) and per client.

A tiny ModelNet40-shaped setting: 12 clients, one view each, the ResNet-18 (GroupNorm) client at a small input,
float32, one thread. Each method runs one evaluation block of `--rounds` server rounds per path after a
warm-up block; prints seconds per round. On a CPU the stacked forward does the same FLOPs through vmap's batched
kernels, so no gain is expected there; the gain is in kernel launches on a GPU (fedrepro.plan prices it).

    .venv/bin/python benchmarks/dpzv_stacked_speed.py [--rounds 24] [--side 8] [--batch 8] [--methods dpzv vafl]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fedrepro.algorithms.dpzv.base import VFLSettings, build_vfl_data  # noqa: E402
from fedrepro.algorithms.dpzv.dpzv import DPZV  # noqa: E402
from fedrepro.algorithms.dpzv.vafl import VAFL  # noqa: E402
from fedrepro.algorithms.dpzv.vfl_czofo import VFLCZOFO  # noqa: E402
from fedrepro.algorithms.dpzv.zoo_vfl import ZOOVFL  # noqa: E402
from fedrepro.data.partition import vertical_partition  # noqa: E402

METHODS = {"dpzv": DPZV, "zoo_vfl": ZOOVFL, "vafl": VAFL, "vfl_czofo": VFLCZOFO}
CLIENTS = 12


def data(side: int, batch: int, rounds: int):
    n = batch * (2 * rounds // CLIENTS + 2)  # two blocks of `rounds` rounds
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(n + 16, CLIENTS, 3, side, side)).astype(np.uint8)
    y = rng.integers(0, 40, size=n + 16)
    p = vertical_partition((CLIENTS, 3, side, side), "views", CLIENTS)
    return build_vfl_data(x[:n], y[:n], x[n:], y[n:], p.features, p.feature_shapes, 40, "multiview", val="test")


def seconds_per_round(method: str, vfl_data, batch: int, stacked: bool) -> tuple[float, float]:
    settings = VFLSettings(
        batch_size=batch,
        epochs=1,
        evals_per_epoch=2,
        client_model="vfl_resnet18",
        client_kwargs={"norm": "group", "small_input": True},
        embed_dim=128,
        server_hidden=128,
        lr_server=1e-5,
        lr_client=1e-5,
        eps=1.0,
        extra={
            "stack_clients": stacked,
            "server_update": "zo" if method in ("dpzv", "zoo_vfl") else "sgd",
            "embed_clip": 10.0,
        },
    )
    algo = METHODS[method](vfl_data, settings, seed=0)
    algo.round(1)  # warm-up block
    done = algo.server_round
    start = time.perf_counter()
    algo.round(2)
    elapsed = time.perf_counter() - start
    return elapsed / (algo.server_round - done), algo.server_round - done


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--side", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--methods", nargs="*", default=["dpzv", "vafl"], choices=list(METHODS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    vfl_data = data(args.side, args.batch, args.rounds)
    print(f"{CLIENTS} clients, ResNet-18 (GroupNorm) on 3x{args.side}x{args.side}, batch {args.batch}, CPU, 1 thread")
    print("method     per client s/round   stacked s/round   ratio   rounds")
    for method in args.methods:
        alone, rounds = seconds_per_round(method, vfl_data, args.batch, False)
        stacked, _ = seconds_per_round(method, vfl_data, args.batch, True)
        print(f"{method:10s} {alone:18.4f} {stacked:17.4f} {stacked / alone:7.2f} {rounds:8d}")


if __name__ == "__main__":
    main()
