"""Where tensors live: CUDA when available, else the CPU."""

from __future__ import annotations

import torch

ALLOWED = ("auto", "cpu", "cuda")


def pick_device(name: str = "auto") -> torch.device:
    """`auto` picks CUDA when present; `cuda` without a GPU is an error, not a silent fallback."""
    if name not in ALLOWED:
        raise ValueError(f"device {name!r} is not one of {', '.join(ALLOWED)}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was requested but torch sees no GPU; use device: auto or cpu")
    return torch.device(name)
