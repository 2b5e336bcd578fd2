"""What every benchmark shares: one row format, timing, and where results go.

A benchmark module exposes `run(quick: bool) -> list[dict]`, each dict made by `row(...)`.
`benchmarks/run.py` gathers them into results/benchmarks/summary.{csv,md}.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "benchmarks"

COLUMNS = ["benchmark", "case", "unit", "ours", "reference", "ratio", "ratio_is", "target", "met"]


def row(
    benchmark: str,
    case: str,
    unit: str,
    ours: float,
    reference: float,
    ratio_is: str,
    target: str = "",
    met: bool | None = None,
) -> dict:
    """One result. `ratio_is` says how the ratio reads: "ours / reference" or "reference / ours"."""
    if ratio_is == "ours / reference":
        ratio = ours / reference
    elif ratio_is == "reference / ours":
        ratio = reference / ours
    else:
        raise ValueError(f"ratio_is must be 'ours / reference' or 'reference / ours', not {ratio_is!r}")
    return {
        "benchmark": benchmark,
        "case": case,
        "unit": unit,
        "ours": ours,
        "reference": reference,
        "ratio": ratio,
        "ratio_is": ratio_is,
        "target": target,
        "met": "" if met is None else met,
    }


def seconds(fn: Callable[[], object], repeats: int = 1) -> float:
    """Median wall seconds of `fn()` over `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def write(rows: list[dict], name: str) -> pd.DataFrame:
    """results/benchmarks/<name>.csv and .md; returns the table."""
    table = pd.DataFrame(rows, columns=COLUMNS)
    OUT.mkdir(parents=True, exist_ok=True)
    table.to_csv(OUT / f"{name}.csv", index=False)
    (OUT / f"{name}.md").write_text(table.to_markdown(index=False, floatfmt=".4g") + "\n")
    return table
