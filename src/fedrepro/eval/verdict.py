"""One verdict for every claims table: paired over seeds, with the effect, its interval and the test named.

A claim "A beats B" is judged on the per-seed differences d_s = a_s - b_s (same seed, same data,
same partition). The test is a two-sided Student t interval of the mean difference at `LEVEL`:
- "holds" when the whole interval lies above `margin`;
- "does not hold" when the whole interval lies below `margin`;
- "no effect at this scale" when the whole interval lies within +-`smallest_effect`, the smallest
  difference the claim's paper treats as an effect (an equivalence outcome: the data exclude any
  effect that matters);
- "inconclusive (n seeds)" otherwise, and always with fewer than `MIN_SEEDS` seeds, with the number
  of seeds at which the observed mean and spread would decide (`seeds_needed`);
- "not tested (why)" when a side is degenerate (diverged, collapsed, at chance) for a reason other
  than the mechanism under test. A side at chance under its own DP noise, while the same method
  trains without noise, is a result: `chance_under_dp` turns its health into `ok` with that note.

When every seed gives the same difference the t interval has zero width and proves nothing; the sign
test decides instead. "The same" means equal within the data's resolution (`resolution`: one test
example in the metric's units) or within float32 rounding of the compared values (`REL_TOL`), so
three seeds that each differ by exactly one test image are identical even when their float32
accuracies make the differences differ in the sixth digit.

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
# relative to the largest compared value: float32 rounds a value v to within 6e-8 |v|, so differences
# of float32 accuracies that count the same test examples agree to about 2.4e-7 |v|; one test example
# of 100,000 (1e-5 of an accuracy) is still told apart
REL_TOL = 1e-6
MAX_SEEDS = 1000  # `seeds_needed` looks no further
TEST_NAME = f"paired t interval of the mean difference over seeds, {LEVEL:.0%} two-sided"
HOLDS, FAILS, NO_EFFECT = "holds", "does not hold", "no effect at this scale"
OUTCOMES = (HOLDS, FAILS, NO_EFFECT, "inconclusive", "not tested")


@dataclass(frozen=True)
class Verdict:
    label: str  # "holds", "does not hold", "inconclusive (n seeds)" or "not tested (why)"
    effect: float = math.nan  # mean of a - b over the paired seeds
    low: float = math.nan
    high: float = math.nan
    seeds: int = 0
    wins: int = 0  # seeds on which a - b > margin
    note: str = ""  # e.g. "B at chance under its DP noise"
    smallest_effect: float = math.nan  # the equivalence margin the claim was judged with (nan: none)
    needed: int | None = None  # inconclusive only: seeds at which the observed effect and spread would decide

    @property
    def tested(self) -> bool:
        return not self.label.startswith("not tested")

    @property
    def outcome(self) -> str:
        """One of `OUTCOMES`: the label without its seed count or reason."""
        return next(o for o in OUTCOMES if self.label.startswith(o))

    def text(self, decimals: int = 4) -> str:
        """'holds: +0.0123 [+0.0051, +0.0195], 3/3 seeds' (the label alone when not tested); an
        inconclusive verdict adds the seeds it would need, an equivalence outcome its margin."""
        if not self.tested or math.isnan(self.effect):
            return self.label
        interval = "" if math.isnan(self.low) else f" [{self.low:+.{decimals}f}, {self.high:+.{decimals}f}]"
        within = f" within ±{self.smallest_effect:.{decimals}g}" if self.label == NO_EFFECT else ""
        notes = [self.note] if self.note else []
        if self.outcome == "inconclusive":
            notes.append(needed_text(self.needed))
        note = "".join(f"; {n}" for n in notes)
        return f"{self.label}: {self.effect:+.{decimals}f}{interval}{within}, {self.wins}/{self.seeds} seeds{note}"

    def as_row(self) -> dict:
        """The columns a claims table carries for this verdict."""
        return {
            "verdict": self.label,
            "effect": self.effect,
            "ci_low": self.low,
            "ci_high": self.high,
            "seeds": self.seeds,
            "wins": self.wins,
            "smallest_effect": self.smallest_effect,
            "seeds_needed": self.needed,
            "note": self.note,
        }


def needed_text(needed: int | None) -> str:
    """'needs about 5 seeds', or why no count is given."""
    if needed is None:
        return f"no seed count up to {MAX_SEEDS} would decide at the observed effect"
    return f"needs about {needed} seeds"


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
    smallest_effect: float = math.nan,
    resolution: float = 0.0,
) -> Verdict:
    """Verdict on "a > b + margin" from per-seed values. Mappings are paired by seed (only seeds in
    both count); sequences by position and must have equal lengths. `smallest_effect` (> 0) enables the
    equivalence outcome; `resolution` is the data's quantum in the values' units (e.g. 100 / test size
    for an accuracy in percent)."""
    pairs = _pair(a, b)
    scale = max((max(abs(x), abs(y)) for x, y in pairs), default=0.0)
    return differences([x - y for x, y in pairs], sides, margin, level, smallest_effect, resolution, scale)


def differences(
    diffs: Iterable[float],
    sides: Mapping[str, Health] | None = None,
    margin: float = 0.0,
    level: float = LEVEL,
    smallest_effect: float = math.nan,
    resolution: float = 0.0,
    scale: float | None = None,
) -> Verdict:
    """Verdict on "mean difference > margin" from paired per-seed differences. `scale`: the largest
    compared value (for float rounding; default the largest difference)."""
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
    judged = {"effect": effect, "seeds": n, "wins": wins, "note": notes, "smallest_effect": smallest_effect}
    if n < MIN_SEEDS:
        return Verdict(f"inconclusive ({n} seed)", **judged)
    tolerance = _tolerance(d, resolution, scale)
    if np.ptp(d) <= tolerance:  # identical differences: the t interval has zero width and proves nothing
        return _sign_verdict(d, margin, level, tolerance, judged)
    low, high = _t_interval(d, level)
    label = _interval_label(low, high, margin, smallest_effect) or f"inconclusive ({n} seeds)"
    needed = seeds_needed(d, margin, level, smallest_effect, resolution, scale) if label.startswith("inc") else None
    return Verdict(label, low=low, high=high, needed=needed, **judged)


def _interval_label(low: float, high: float, margin: float, smallest_effect: float) -> str | None:
    if low > margin:
        return HOLDS
    if high < margin:
        return FAILS
    if -smallest_effect < low and high < smallest_effect:  # False when smallest_effect is nan
        return NO_EFFECT
    return None


def _tolerance(d: np.ndarray, resolution: float, scale: float | None) -> float:
    """How far apart two differences may be and still count as the same."""
    scale = float(np.abs(d).max()) if scale is None else scale
    return max(resolution / 2, REL_TOL * scale)


def _sign_seeds(level: float) -> int:
    """The fewest seeds, all on one side, at which the two-sided sign test decides: 2 * 0.5**n < 1 - level."""
    return next(n for n in range(1, MAX_SEEDS + 1) if 2 * 0.5**n < 1 - level)


def _sign_verdict(d: np.ndarray, margin: float, level: float, tolerance: float, judged: dict) -> Verdict:
    """Every seed gave the same difference (quantised accuracies on a small test set can): the sign
    test decides, which needs every seed on one side and 2 * 0.5**n < 1 - level (6 seeds at 95 %)."""
    n, common = len(d), float(d.mean())
    off_margin = abs(common - margin) > tolerance
    judged = {**judged, "note": "; ".join(filter(None, [judged["note"], "sign test"]))}
    if n >= _sign_seeds(level) and off_margin:
        return Verdict(HOLDS if common > margin else FAILS, **judged)
    needed = _sign_seeds(level) if off_margin else None
    return Verdict(f"inconclusive ({n} seeds, identical differences)", needed=needed, **judged)


def seeds_needed(
    diffs: Iterable[float],
    margin: float = 0.0,
    level: float = LEVEL,
    smallest_effect: float = math.nan,
    resolution: float = 0.0,
    scale: float | None = None,
) -> int | None:
    """The fewest seeds at which differences with the observed mean and spread would decide: the t
    interval excludes `margin` or lies within +-`smallest_effect`; the sign test's count when the
    differences are identical. None with fewer than two seeds (no spread to go on) or when no count up
    to `MAX_SEEDS` would."""
    d = np.asarray(list(diffs), dtype=np.float64)
    if len(d) < MIN_SEEDS:
        return None
    tolerance = _tolerance(d, resolution, scale)
    if np.ptp(d) <= tolerance:
        return _sign_seeds(level) if abs(d.mean() - margin) > tolerance else None
    counts = np.arange(MIN_SEEDS, MAX_SEEDS + 1)
    half = stats.t.ppf(0.5 + level / 2, df=counts - 1) * d.std(ddof=1) / np.sqrt(counts)
    mean = d.mean()
    decides = (half < abs(mean - margin)) | (abs(mean) + half < smallest_effect)
    return int(counts[decides][0]) if decides.any() else None


def all_of(verdicts: Iterable[Verdict]) -> Verdict:
    """A conjunction of claims: not tested if any part is, does not hold if any part does not, no effect
    if any part shows none, holds if all hold, inconclusive otherwise (needing the seeds of its
    neediest inconclusive part). Its effect and interval are those of the weakest part (the smallest
    lower bound)."""
    parts = list(verdicts)
    if not parts:
        return Verdict("not tested (no parts)")
    for part in parts:
        if not part.tested:
            return part
    outcomes = {p.outcome for p in parts}
    weakest = min(parts, key=lambda p: p.low if not math.isnan(p.low) else -math.inf)
    needed = None
    if FAILS in outcomes:
        label = FAILS
    elif NO_EFFECT in outcomes:
        label = NO_EFFECT
        weakest = next(p for p in parts if p.outcome == NO_EFFECT)
    elif outcomes == {HOLDS}:
        label = HOLDS
    else:
        label = f"inconclusive ({min(p.seeds for p in parts)} seeds)"
        counts = [p.needed for p in parts if p.outcome == "inconclusive"]
        needed = None if None in counts else max(counts)
    return Verdict(
        label,
        weakest.effect,
        weakest.low,
        weakest.high,
        weakest.seeds,
        weakest.wins,
        weakest.note,
        weakest.smallest_effect,
        needed,
    )


def _pair(a, b) -> list[tuple[float, float]]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return [(float(a[s]), float(b[s])) for s in sorted(set(a) & set(b))]
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"paired values need one per seed on each side, got {len(a)} and {len(b)}")
    return [(float(x), float(y)) for x, y in zip(a, b)]


def _t_interval(d: np.ndarray, level: float) -> tuple[float, float]:
    n = len(d)
    half = stats.t.ppf(0.5 + level / 2, df=n - 1) * d.std(ddof=1) / math.sqrt(n)
    return float(d.mean() - half), float(d.mean() + half)


__all__ = [
    "LEVEL",
    "NO_EFFECT",
    "OUTCOMES",
    "TEST_NAME",
    "Verdict",
    "all_of",
    "chance_under_dp",
    "differences",
    "needed_text",
    "not_tested",
    "paired",
    "seeds_needed",
]
