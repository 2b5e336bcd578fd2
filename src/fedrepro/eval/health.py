"""Is a run a result at all? Diverged, collapsed and chance-level runs are named, never tabulated.

A run's health is one of `STATUSES`:
- `diverged`: a loss (or any metric) became NaN or infinite; the reason names the first round;
- `collapsed`: a self-supervised encoder's embeddings no longer vary with the input: their spread
  around their mean has (almost) vanished relative to an untrained encoder's (`relative_spread`,
  `check_spread`: complete collapse, every input one vector), or it varies along (almost) one
  direction (`effective_rank` of the centered covariance, `check_collapse`: dimensional collapse;
  Roy & Vetterli, 2007: exp of the entropy of the normalised eigenvalues; 1 for a rank-1
  covariance, d for an isotropic one);
- `chance`: the accuracy is within sampling error of the chance level;
- `ok`: none of these.

Pure numpy / pandas: reports and planners import it without torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

STATUSES = ("ok", "diverged", "collapsed", "chance")
_SEVERITY = {"diverged": 0, "collapsed": 1, "chance": 2, "ok": 3}


@dataclass(frozen=True)
class Health:
    status: str = "ok"
    reason: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"health status must be one of {STATUSES}, got {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict:
        """The fields a run's per-seed summary carries (`status`, `status_reason`)."""
        return {"status": self.status, "status_reason": self.reason}

    @classmethod
    def from_dict(cls, summary: dict) -> Health:
        return cls(summary.get("status", "ok"), summary.get("status_reason", ""))


OK = Health()


def worst(*healths: Health) -> Health:
    """The most severe of several checks (diverged > collapsed > chance > ok)."""
    return min(healths, key=lambda h: _SEVERITY[h.status], default=OK)


def check_finite(metrics: pd.DataFrame, columns: list[str] | None = None, step: str = "round") -> Health:
    """`diverged` at the first row where one of `columns` (default: every numeric column) is inf, or
    NaN where the column should have a value.

    A metric logged every k rounds is NaN in between; that is not a divergence. A column's expected
    rows are its first finite row and every k-th row after it, k being its most common logging
    interval; a NaN there (or a column that is NaN throughout) is one.
    """
    columns = (
        columns
        if columns is not None
        else [c for c in metrics.columns if c not in (step, "seed") and pd.api.types.is_numeric_dtype(metrics[c])]
    )
    found = []
    for column in columns:
        values = metrics[column].to_numpy(dtype=float)
        row = _first_bad_row(values)
        if row is not None:
            found.append((row, column, values[row]))
    if not found:
        return OK
    row, column, value = min(found)
    where = metrics[step].iloc[row] if step in metrics else row
    return Health("diverged", f"diverged at {step} {where} ({column} = {value})")


def _first_bad_row(values: np.ndarray) -> int | None:
    bad = np.isinf(values)
    finite = np.flatnonzero(np.isfinite(values))
    if len(finite) == 0:
        bad |= np.isnan(values)
    else:
        gaps = np.diff(finite)
        every = int(np.bincount(gaps).argmax()) if len(gaps) else 1
        expected = np.zeros(len(values), dtype=bool)
        expected[finite[0] :: every] = True
        bad |= expected & np.isnan(values)
    rows = np.flatnonzero(bad)
    return int(rows[0]) if len(rows) else None


def chance_margin(chance: float, n_test: int | None, floor: float = 0.02) -> float:
    """How far above chance an accuracy must be to count as learned: 3 binomial standard errors of
    a chance-level classifier on `n_test` samples, at least `floor`."""
    if n_test is None or n_test <= 0:
        return floor
    return max(floor, 3.0 * math.sqrt(chance * (1.0 - chance) / n_test))


def majority_rate(labels: np.ndarray) -> float:
    """Accuracy of the best classifier that ignores its input: always the most frequent label."""
    return float(np.bincount(np.asarray(labels).ravel()).max() / np.asarray(labels).size)


def check_chance(accuracy: float, chance: float, n_test: int | None = None, name: str = "accuracy") -> Health:
    """`chance` when `accuracy` is not above the chance level by more than `chance_margin`."""
    if not math.isfinite(accuracy):
        return Health("diverged", f"{name} = {accuracy}")
    margin = chance_margin(chance, n_test)
    if accuracy <= chance + margin:
        return Health("chance", f"at chance ({name} {accuracy:.3f} <= chance {chance:.3f} + {margin:.3f})")
    return OK


def effective_rank(embeddings: np.ndarray, center: bool = True) -> float:
    """exp(entropy of the normalised eigenvalues of the embeddings' covariance), in [1, dim].

    `center=False` uses the uncentered second moment E[z z^T] instead: 1 when every embedding is
    (a multiple of) the same vector, whatever small noise surrounds it in the centered covariance.
    """
    x = np.asarray(embeddings, dtype=np.float64)
    if center:
        x = x - x.mean(axis=0, keepdims=True)
    singular = np.linalg.svd(x, compute_uv=False)
    eigen = singular**2
    total = eigen.sum()
    if not np.isfinite(total):
        return float("nan")
    if total <= 0:
        return 1.0
    p = eigen[eigen > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def relative_spread(embeddings: np.ndarray) -> float:
    """E||z - E z||^2 / E||z||^2 in [0, 1]: the share of the embeddings' second moment that varies with
    the input; 0 when every embedding is the same vector, whatever their scale or rank."""
    x = np.asarray(embeddings, dtype=np.float64)
    total = float((x**2).sum(axis=1).mean())
    if not math.isfinite(total):
        return float("nan")
    if total <= 0:
        return 0.0
    return float(((x - x.mean(axis=0, keepdims=True)) ** 2).sum(axis=1).mean() / total)


def check_spread(ratio: float, threshold: float) -> Health:
    """`collapsed` when the embeddings' relative spread, as a fraction of an untrained encoder's, is below
    `threshold`: a healthy run whose embeddings share a large common offset (uncentered rank near 1) keeps a
    spread comparable to its initialisation's; a collapsed one keeps none."""
    if not math.isfinite(ratio):
        return Health("diverged", f"embedding spread ratio = {ratio}")
    if ratio < threshold:
        return Health(
            "collapsed", f"collapsed (embedding spread {ratio:.2g} of the untrained encoder's < {threshold:g})"
        )
    return OK


def check_collapse(rank: float, threshold: float) -> Health:
    """`collapsed` when the embeddings' effective rank is below `threshold`."""
    if not math.isfinite(rank):
        return Health("diverged", f"embedding effective rank = {rank}")
    if rank < threshold:
        return Health("collapsed", f"collapsed (embedding effective rank {rank:.2f} < {threshold:g})")
    return OK


def embedding_collapse(z: np.ndarray, untrained: np.ndarray, min_spread: float, min_rank: float) -> tuple[Health, dict]:
    """Is an encoder's embedding `z` collapsed? `untrained`: the same architecture's embedding of the same
    inputs before training. Collapsed when the relative spread is below `min_spread` times the untrained
    one's, or the centered effective rank below `min_rank`. Returns the health and the measures."""
    spread, reference = relative_spread(z), relative_spread(untrained)
    ratio = spread / reference if reference > 0 else float("nan")
    centered = effective_rank(z)
    measures = {
        "effective_rank": effective_rank(z, center=False),
        "embedding_rank_centered": centered,
        "embedding_spread": spread,
        "untrained_spread": reference,
        "spread_ratio": ratio,
    }
    return worst(check_spread(ratio, min_spread), check_collapse(centered, min_rank)), measures


# ------------------------------------------------------------------------------------ reports


def cell_status(statuses: list[Health]) -> Health:
    """One table cell over seeds: the worst seed's health, its reason counting the seeds affected."""
    bad = [h for h in statuses if not h.ok]
    if not bad:
        return OK
    head = worst(*bad)
    return Health(head.status, f"{head.reason} ({len(bad)}/{len(statuses)} seeds {head.status})")
