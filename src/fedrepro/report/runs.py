"""Reading run outputs back for reports: the run's identity comes from its path
(`<paper>/runs/<dataset>/<method>/<setting>/<seeds>/<file>`)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

IDENTITY = ("dataset", "method", "setting", "seeds")


def identity(path: str | Path) -> dict[str, str]:
    parts = Path(path).parts
    return dict(zip(IDENTITY, parts[-5:-1]))


def load_metrics(paths: list[str]) -> pd.DataFrame:
    """Every run's per-round metrics in one frame, with dataset/method/setting columns."""
    frames = []
    for path in paths:
        frame = pd.read_parquet(path)
        for key, value in identity(path).items():
            frame[key] = value
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def load_summaries(paths: list[str]) -> pd.DataFrame:
    """One line per (run, seed) with the final metrics and whatever else the summary holds."""
    rows = []
    for path in paths:
        summary = json.loads(Path(path).read_text())
        for seed, per_seed in summary["seeds"].items():
            rows.append(
                {
                    **identity(path),
                    "seed": int(seed),
                    **per_seed.get("final", {}),
                    **{k: v for k, v in per_seed.items() if k != "final" and not isinstance(v, (dict, list))},
                }
            )
    return pd.DataFrame(rows)
