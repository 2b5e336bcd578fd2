"""Claims tables count distinct comparisons: one row per pair of run sets compared on one metric.

A paper often restates one comparison in several tables (FedAL's alpha = 1 panel in Tables IV-IX) or
several claims rest on the same two run sets; counting each restatement as a verdict inflates the
counts. Each claim row carries a `comparison` key naming what is compared (both run sets and the
metric); `distinct` keeps the first row of each key and lists the other claims that restate it.
"""

from __future__ import annotations

from collections.abc import Iterable

from fedrepro.eval.verdict import OUTCOMES, Verdict


def distinct(rows: Iterable[dict], key: str = "comparison", claim: str = "claim") -> list[dict]:
    """The first row of each `key`, in order, with `also`: the `claim` texts of later rows of that key
    (joined by '; ', empty when none). Rows whose key is None are each their own comparison."""
    kept: dict[object, dict] = {}
    out = []
    for i, row in enumerate(rows):
        k = row.get(key)
        k = ("row", i) if k is None else k
        if k in kept:
            first = kept[k]
            first["also"] = "; ".join(filter(None, [first["also"], str(row.get(claim, ""))]))
            continue
        kept[k] = {**row, "also": ""}
        out.append(kept[k])
    return out


def counts(verdicts: Iterable[Verdict | str]) -> dict[str, int]:
    """How many verdicts have each outcome (`OUTCOMES` order): from Verdicts or their labels."""
    tally = dict.fromkeys(OUTCOMES, 0)
    for v in verdicts:
        label = v.label if isinstance(v, Verdict) else str(v)
        tally[next(o for o in OUTCOMES if label.startswith(o))] += 1
    return tally


def counts_text(verdicts: Iterable[Verdict | str]) -> str:
    """'7 distinct comparisons: 2 holds, 1 does not hold, 1 no effect at this scale, 3 inconclusive,
    0 not tested'."""
    tally = counts(verdicts)
    parts = ", ".join(f"{n} {outcome}" for outcome, n in tally.items())
    return f"{sum(tally.values())} distinct comparisons: {parts}"
