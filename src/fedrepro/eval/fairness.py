"""Test metrics of the fair-learning experiments (SteFFLe App. E.1, eqs. 11-12).

All three work on hard predictions y_hat = 1{sigma > 0.5} and broadcast over
leading dimensions of `y_hat` (..., n), so a whole grid of models is scored in
one call. `y` and `s` are (n,) integer arrays (labels and sensitive attribute).

* misclassification error = 1 - accuracy;
* demographic-parity violation, eq. (11):
  max_{y', s1, s2} |P[y_hat = y' | s = s1] - P[y_hat = y' | s = s2]|;
* equalized-odds violation, eq. (12):
  max_{y', s1, s2} max(|P[y_hat=y'|s=s1, y=y'] - P[y_hat=y'|s=s2, y=y']|,
                       |P[y_hat=y'|s=s1, y!=y'] - P[y_hat=y'|s=s2, y!=y']|).

Both compare pairs of groups (not a group with the marginal as eq. (2) does;
`dp_violation_marginal` is eq. (2) for completeness). A group with no samples in
a conditioning set is skipped (its rate is undefined).
"""

from __future__ import annotations

import numpy as np


def _as_arrays(y_hat, *others):
    y_hat = np.asarray(y_hat)
    rest = [np.asarray(o).reshape(-1) for o in others]
    for o in rest:
        if o.shape[0] != y_hat.shape[-1]:
            raise ValueError(
                f"length mismatch: predictions have {y_hat.shape[-1]} samples, got an array of {o.shape[0]}"
            )
    return (y_hat, *rest)


def _labels(*arrays) -> np.ndarray:
    return np.unique(np.concatenate([np.unique(a) for a in arrays]))


def _rate(y_hat: np.ndarray, value, mask: np.ndarray) -> np.ndarray | None:
    """P[y_hat = value | mask] along the last axis, or None if the mask is empty."""
    count = mask.sum()
    if count == 0:
        return None
    return ((y_hat == value) & mask).sum(-1) / count


def _max_pairwise_gap(rates: list[np.ndarray], shape) -> np.ndarray:
    if len(rates) < 2:
        return np.zeros(shape)
    stacked = np.stack(rates, axis=0)
    return stacked.max(0) - stacked.min(0)


def misclassification_error(y_hat, y) -> np.ndarray:
    y_hat, y = _as_arrays(y_hat, y)
    return (y_hat != y).mean(-1)


def dp_violation(y_hat, s) -> np.ndarray:
    """Eq. (11)."""
    y_hat, s = _as_arrays(y_hat, s)
    shape = y_hat.shape[:-1]
    out = np.zeros(shape)
    for value in _labels(y_hat):
        rates = [r for g in np.unique(s) if (r := _rate(y_hat, value, s == g)) is not None]
        out = np.maximum(out, _max_pairwise_gap(rates, shape))
    return out


def eo_violation(y_hat, y, s) -> np.ndarray:
    """Eq. (12); for binary labels this is max(|TPR_a - TPR_b|, |FPR_a - FPR_b|)."""
    y_hat, y, s = _as_arrays(y_hat, y, s)
    shape = y_hat.shape[:-1]
    out = np.zeros(shape)
    for value in _labels(y_hat, y):
        for cond in (y == value, y != value):
            rates = [r for g in np.unique(s) if (r := _rate(y_hat, value, cond & (s == g))) is not None]
            out = np.maximum(out, _max_pairwise_gap(rates, shape))
    return out


def dp_violation_marginal(y_hat, s) -> np.ndarray:
    """Eq. (2): max_{y', s} |P[y_hat = y' | s] - P[y_hat = y']| (main-text measure, not used in the figures)."""
    y_hat, s = _as_arrays(y_hat, s)
    shape = y_hat.shape[:-1]
    out = np.zeros(shape)
    everyone = np.ones_like(s, dtype=bool)
    for value in _labels(y_hat):
        marginal = _rate(y_hat, value, everyone)
        for g in np.unique(s):
            out = np.maximum(out, np.abs(_rate(y_hat, value, s == g) - marginal))
    return out
