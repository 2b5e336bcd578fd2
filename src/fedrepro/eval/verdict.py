"""One verdict for every claims table: paired over seeds, with the effect, its interval and the test named.

A claim "A beats B" is judged on the per-seed differences d_s = a_s - b_s (same seed, same data,
same partition). The test is a two-sided Student t interval of the mean difference at `LEVEL`:
- "holds" when the whole interval lies above `margin`;
- "does not hold" when the whole interval lies below `margin`;
- "inconclusive (n seeds)" otherwise, and always with fewer than `MIN_SEEDS` seeds; when every seed
  gives the same difference the t interval has zero width, and the sign test decides instead;
- "not tested (why)" when a side is degenerate (diverged, collapsed, at chance) for a reason other
  than the mechanism under test. A side at chance under its own DP noise, while the same method
  trains without noise, is a result: `chance_under_dp` turns its health into `ok` with that note.

Pure numpy / scipy: reports import it without torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from fedrepro.eval.health import Health

LEVEL = 0.95
MIN_SEEDS = 2
TEST_NAME = f"paired t interval of the mean difference over seeds, {LEVEL:.0%} two-sided"
HOLDS, FAILS = "holds", "does not hold"


@dataclass(frozen=True)
class Verdict:
    label: str  # "holds", "does not hold", "inconclusive (n seeds)" or "not tested (why)"
    effect: float = math.nan  # mean of a - b over the paired seeds
    low: float = math.nan
    high: float = math.nan
    seeds: int = 0
    wins: int = 0  # seeds on which a - b > margin
    note: str = ""  # e.g. "B at chance under its DP noise"

    @property
    def tested(self) -> bool:
        return not self.label.startswith("not tested")

    def text(self, decimals: int = 4) -> str:
        """'holds: +0.0123 [+0.0051, +0.0195], 3/3 seeds' (the label alone when not tested)."""
        if not self.tested or math.isnan(self.effect):
            return self.label
        interval = "" if math.isnan(self.low) else f" [{self.low:+.{decimals}f}, {self.high:+.{decimals}f}]"
        note = f"; {self.note}" if self.note else ""
        return f"{self.label}: {self.effect:+.{decimals}f}{interval}, {self.wins}/{self.seeds} seeds{note}"

    def as_row(self) -> dict:
        """The columns a claims table carries for this verdict."""
        return {
            "verdict": self.label,
            "effect": self.effect,
            "ci_low": self.low,
            "ci_high": self.high,
            "seeds": self.seeds,
            "wins": self.wins,
            "note": self.note,
        }


def chance_under_dp(private: Health, noiseless: Health) -> Health:
    """A private run at chance is a result (the mechanism's noise did it) when the same method trains
    without noise; otherwise its health is returned unchanged."""
    if private.status == "chance" and noiseless.ok:
        return Health("ok", "at chance under its DP noise")
    return private


def not_tested(sides: Mapping[str, Health]) -> Verdict | None:
    """A "not tested (why)" verdict when any side is degenerate, else None."""
    bad = {name: h for name, h in sides.items() if not h.ok}
    if not bad:
        return None
    why = "; ".join(f"{name}: {h.reason or h.status}" for name, h in bad.items())
    return Verdict(f"not tested ({why})")


def paired(
    a: Iterable[float] | Mapping[int, float],
    b: Iterable[float] | Mapping[int, float],
    sides: Mapping[str, Health] | None = None,
    margin: float = 0.0,
    level: float = LEVEL,
) -> Verdict:
    """Verdict on "a > b + margin" from per-seed values. Mappings are paired by seed (only seeds in
    both count); sequences by position and must have equal lengths."""
    return differences(_pair(a, b), sides, margin, level)


def differences(
    diffs: Iterable[float],
    sides: Mapping[str, Health] | None = None,
    margin: float = 0.0,
    level: float = LEVEL,
) -> Verdict:
    """Verdict on "mean difference > margin" from paired per-seed differences."""
    blocked = not_tested(sides or {})
    if blocked is not None:
        return blocked
    d = np.asarray(list(diffs), dtype=np.float64)
    if not np.all(np.isfinite(d)):
        return Verdict("not tested (a paired value is not finite)")
    notes = "; ".join(f"{name} {h.reason}" for name, h in (sides or {}).items() if h.reason)
    n, wins = len(d), int((d > margin).sum())
    if n == 0:
        return Verdict("not tested (no paired seeds)")
    effect = float(d.mean())
    if n < MIN_SEEDS:
        return Verdict(f"inconclusive ({n} seed)", effect, seeds=n, wins=wins, note=notes)
    if np.ptp(d) == 0:  # identical differences: the t interval has zero width and proves nothing
        return _sign_verdict(d, margin, level, effect, wins, notes)
    low, high = _t_interval(d, level)
    label = HOLDS if low > margin else FAILS if high < margin else f"inconclusive ({n} seeds)"
    return Verdict(label, effect, low, high, n, wins, notes)


def _sign_verdict(d: np.ndarray, margin: float, level: float, effect: float, wins: int, notes: str) -> Verdict:
    """Every seed gave the same difference (quantised accuracies on a small test set can): the sign
    test decides, which needs every seed on one side and 2 * 0.5**n < 1 - level (6 seeds at 95 %)."""
    n = len(d)
    decisive = 2 * 0.5**n < 1 - level
    label = f"inconclusive ({n} seeds, identical differences)"
    if decisive and d[0] > margin:
        label = HOLDS
    elif decisive and d[0] < margin:
        label = FAILS
    return Verdict(label, effect, seeds=n, wins=wins, note="; ".join(filter(None, [notes, "sign test"])))


def all_of(verdicts: Iterable[Verdict]) -> Verdict:
    """A conjunction of claims: not tested if any part is, does not hold if any part does not,
    holds if all hold, inconclusive otherwise. Its effect and interval are those of the weakest part
    (the smallest lower bound)."""
    parts = list(verdicts)
    if not parts:
        return Verdict("not tested (no parts)")
    for part in parts:
        if not part.tested:
            return part
    labels = {p.label for p in parts}
    weakest = min(parts, key=lambda p: p.low if not math.isnan(p.low) else -math.inf)
    if FAILS in labels:
        label = FAILS
    elif labels == {HOLDS}:
        label = HOLDS
    else:
        label = f"inconclusive ({min(p.seeds for p in parts)} seeds)"
    return Verdict(label, weakest.effect, weakest.low, weakest.high, weakest.seeds, weakest.wins, weakest.note)


def _pair(a, b) -> list[float]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return [float(a[s]) - float(b[s]) for s in sorted(set(a) & set(b))]
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"paired values need one per seed on each side, got {len(a)} and {len(b)}")
    return [float(x) - float(y) for x, y in zip(a, b)]


def _t_interval(d: np.ndarray, level: float) -> tuple[float, float]:
    n = len(d)
    half = stats.t.ppf(0.5 + level / 2, df=n - 1) * d.std(ddof=1) / math.sqrt(n)
    return float(d.mean() - half), float(d.mean() + half)


__all__ = ["LEVEL", "TEST_NAME", "Verdict", "all_of", "chance_under_dp", "differences", "not_tested", "paired"]
