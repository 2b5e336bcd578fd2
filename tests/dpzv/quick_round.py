"""DPZV and its baselines as the default run's digits section configures them (config.yaml, dpzv:), built in
memory for round-level tests: the same data split, client model, learning rates and shared options."""

from __future__ import annotations

import importlib

import numpy as np
import torch

from fedrepro.algorithms.dpzv.base import VFLSettings, build_vfl_data
from fedrepro.data.partition import vertical_partition

LR = {  # config.yaml dpzv.datasets.digits.lr: (server, client)
    "dpzv": (0.05, 0.0005),
    "vafl": (0.05, 0.01),
    "zoo_vfl": (0.05, 0.0005),
    "vfl_czofo": (0.05, 0.001),
}
SHARED = {  # config.yaml dpzv.shared: the options a round reads
    "zo_lambda": 0.001,
    "clip": 10,
    "clip_mode": "symmetric",
    "fd_denominator": "lambda",
    "direction": "sphere",
    "zo_momentum": 0.9,
    "server_update": "sgd",
    "embed_clip": 0.5,
    "zoo_pair_release": "joint",
    "zoo_noise": "shared",
    "label_privacy": "none",
    "head_clip": 1.0,
    "batch": "public",
    "secret_rate": 0.5,
    "perturbations": 5,
}


def digits_data(device="cpu"):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x * 16).clip(0, 255).astype(np.uint8).reshape(-1, 1, 8, 8)  # the prepared arrays' uint8 images
    part = vertical_partition((1, 8, 8), "rows", 4)
    return build_vfl_data(x[:1500], y[:1500], x[1500:], y[1500:], part.features, part.feature_shapes, 10, "image")


def quick_algorithm(method: str, data, eps: float = 1.0, seed: int = 0, evals_per_epoch: int = 8, **extra):
    """One run of `method` at the digits quick-scale settings; `extra` overrides the shared options."""
    server, client = LR[method]
    settings = VFLSettings(
        batch_size=64,
        epochs=12,
        evals_per_epoch=evals_per_epoch,
        client_model="vfl_mnist_cnn",
        client_kwargs={"pool": [2, 4], "width": 8},
        embed_dim=16,
        server_hidden=64,
        lr_server=server,
        lr_client=client,
        momentum=0.9,
        eps=eps,
        delta=1e-3,
        extra={**SHARED, "stack_clients": False, **extra},
    )
    module = importlib.import_module(f"fedrepro.algorithms.dpzv.{method}")
    torch.manual_seed(seed)
    return module.ALGORITHM(data, settings, seed)


def records(algo, blocks: int = 2) -> list[dict]:
    """The metrics rows of the first `blocks` evaluation blocks (round, then evaluate, as the loop runs them)."""
    return [{**algo.round(t), **algo.evaluate(t)} for t in range(1, blocks + 1)]


def parameters(algo) -> list[torch.Tensor]:
    return [p.detach().clone() for c in algo.clients for p in c.params] + [
        p.detach().clone() for p in algo.server.params
    ]
