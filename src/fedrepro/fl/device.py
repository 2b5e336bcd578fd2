"""Where tensors live: CUDA when available, else the CPU; and whether GPU kernels are deterministic."""

from __future__ import annotations

import os

import torch

from fedrepro.options import DETERMINISTIC_ENV

ALLOWED = ("auto", "cpu", "cuda")


def pick_device(name: str = "auto") -> torch.device:
    """`auto` picks CUDA when present; `cuda` without a GPU is an error, not a silent fallback."""
    apply_determinism()
    if name not in ALLOWED:
        raise ValueError(f"device {name!r} is not one of {', '.join(ALLOWED)}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was requested but torch sees no GPU; use device: auto or cpu")
    return torch.device(name)


def apply_determinism(on: bool | None = None) -> bool:
    """Same seed, same numbers on a GPU too (config key `deterministic`; `None` reads DETERMINISTIC_ENV).

    On: torch's deterministic algorithms (an op without a deterministic kernel raises instead of
    silently differing between runs), cuDNN's deterministic convolutions without autotuning, and
    cuBLAS's fixed workspace (it must be set before the process's first cuBLAS call, which is why
    every job sets it when it picks its device). Off leaves torch's defaults. Returns whether it is on.
    """
    if on is None:
        on = os.environ.get(DETERMINISTIC_ENV) == "1"
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    return on
