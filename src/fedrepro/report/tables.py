"""Paper-style tables: the published value, ours (mean +- std over seeds) and the difference.

Published numbers live only in `fedrepro/report/published/<paper>_<table>.csv`
(columns row, column, mean, std); `compare` puts ours beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from fedrepro.atomic import atomic_write
from fedrepro.eval.health import Health, cell_status

SCALE_NOTE = {
    "quick": "Quick scale: offline data (small stand-ins where the real set cannot ship), few rounds and seeds. "
    "These numbers are NOT the paper's setting; "
    "they show the pipeline and the qualitative trends only.",
    "paper": "Paper scale: the paper's data sets, models and budgets.",
}


def published(name: str) -> pd.DataFrame:
    """The published reference table `name` (e.g. "fedsc_table2")."""
    path = resources.files("fedrepro.report") / "published" / f"{name}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"no published reference table {name!r} at {path}")
    with path.open() as stream:
        return pd.read_csv(stream, dtype={"row": str, "column": str})


def summarise(ours: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample std (ddof=1) and count of `value` per (row, column).

    When `ours` carries the runs' health (`status`, `status_reason` per seed, see
    `fedrepro.eval.health`), a cell with any degenerate seed gets no number: its mean and std are
    NaN and its `status` column says what happened ("diverged at round 177 (2/2 seeds diverged)").
    """
    grouped = ours.groupby(["row", "column"], sort=False)["value"]
    out = grouped.agg(mean="mean", std=lambda v: v.std(ddof=1) if len(v) > 1 else np.nan, n="count")
    out = out.reset_index()
    if "status" not in ours:
        return out
    reasons = ours.get("status_reason", pd.Series("", index=ours.index)).fillna("")
    health = [Health(s, r) for s, r in zip(ours["status"].fillna("ok"), reasons)]
    cells = (
        pd.Series(health, index=ours.index)
        .groupby([ours["row"], ours["column"]], sort=False)
        .agg(lambda hs: cell_status(list(hs)))
    )
    status = [cells[(r, c)] for r, c in zip(out["row"], out["column"])]
    degenerate = np.array([not h.ok for h in status])
    out.loc[degenerate, ["mean", "std"]] = np.nan
    out["status"] = [h.reason if not h.ok else "ok" for h in status]
    return out


def compare(ours: pd.DataFrame, reference: pd.DataFrame | None = None) -> pd.DataFrame:
    """One line per (row, column): published mean/std, our mean/std/n, and ours - published.

    Rows and columns keep the order of the published table, then any of ours it lacks.
    """
    mine = summarise(ours).rename(columns={"mean": "ours_mean", "std": "ours_std", "n": "seeds"})
    if reference is None:
        return mine
    ref = reference.rename(columns={"mean": "published_mean", "std": "published_std"})
    table = ref.merge(mine, on=["row", "column"], how="outer")
    table["difference"] = table["ours_mean"] - table["published_mean"]
    status = ["status"] if "status" in table else []
    for key in ("row", "column"):  # published order first, then ours; never lexical
        order = list(dict.fromkeys([*ref[key], *mine[key]]))
        table[f"_{key}"] = table[key].map(order.index)
    table = table.sort_values(["_row", "_column"]).reset_index(drop=True)
    return table[
        ["row", "column", "published_mean", "published_std", "ours_mean", "ours_std", "seeds", "difference", *status]
    ]


def _pm(mean, std, decimals: int) -> str:
    if pd.isna(mean):
        return "–"
    return f"{mean:.{decimals}f}" if pd.isna(std) else f"{mean:.{decimals}f} ± {std:.{decimals}f}"


def wide(table: pd.DataFrame, decimals: int = 2) -> pd.DataFrame:
    """Paper layout: one line per row; per column 'published', 'ours' and 'diff' cells."""
    cells = pd.DataFrame({"row": table["row"], "column": table["column"]})
    has_ref = "published_mean" in table
    if has_ref:
        cells["published"] = [_pm(m, s, decimals) for m, s in zip(table["published_mean"], table["published_std"])]
    cells["ours"] = [_pm(m, s, decimals) for m, s in zip(table["ours_mean"], table["ours_std"])]
    if "status" in table:  # a degenerate cell shows what happened, never a number
        named = table["status"].fillna("ok").ne("ok")
        cells.loc[named.to_numpy(), "ours"] = table.loc[named, "status"].to_numpy()
    if has_ref:
        cells["diff"] = [("–" if pd.isna(d) else f"{d:+.{decimals}f}") for d in table["difference"]]
    rows = list(dict.fromkeys(table["row"]))
    columns = list(dict.fromkeys(table["column"]))
    pieces = [c for c in ("published", "ours", "diff") if c in cells]
    out = cells.pivot(index="row", columns="column", values=pieces)
    out = out.reindex(index=rows, columns=[(p, c) for c in columns for p in pieces])
    out.columns = [f"{c} ({p})" for p, c in out.columns]
    return out.fillna("–").reset_index()


def write_table(table: pd.DataFrame, stem: str | Path, caption: str, scale: str, decimals: int = 2) -> None:
    """Write stem.csv (long, numeric), stem.md and stem.tex (paper layout) with the caption and scale note,
    all or none (`write_together`)."""
    stem = Path(stem)
    layout = wide(table, decimals) if "ours_mean" in table else table
    note = SCALE_NOTE.get(scale, f"Scale: {scale}.")
    markdown = f"**{caption}**\n\n{note}\n\n{layout.to_markdown(index=False)}\n"
    latex = layout.to_latex(index=False, caption=f"{caption} {note}", escape=True)
    write_together(
        {
            stem.with_suffix(".csv"): lambda tmp: table.to_csv(tmp, index=False),
            stem.with_suffix(".md"): lambda tmp: tmp.write_text(markdown),
            stem.with_suffix(".tex"): lambda tmp: tmp.write_text(latex),
        }
    )


def write_together(writers: dict[Path, Callable[[Path], object]]) -> None:
    """Write each file to a temporary beside it (`fedrepro.atomic.atomic_write`) and rename them only once
    every one is written, so a report job that fails leaves the previous table or figure whole (a stem's
    files never mix two versions) and no temporary behind."""
    items = list(writers.items())

    def write_from(i: int) -> None:
        if i < len(items):
            path, write = items[i]
            atomic_write(path, lambda tmp: (write(tmp), write_from(i + 1)))

    write_from(0)
