"""Argument checks shared by the per-paper privacy modules: each names the argument it rejects."""

from __future__ import annotations

import math


def positive(name: str, value: float) -> float:
    value = float(value)
    if not value > 0.0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def non_negative(name: str, value: float) -> float:
    value = float(value)
    if not value >= 0.0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def check_delta(delta: float) -> float:
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return delta


def log_inv_delta(delta: float) -> float:
    return -math.log(check_delta(delta))
