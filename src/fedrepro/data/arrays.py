"""Read a prepared dataset (`arrays.npz` + `meta.json`) back."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedrepro.atomic import atomic_write

CORE = ("x_train", "y_train", "x_test", "y_test")


@dataclass
class Prepared:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    extras: dict[str, np.ndarray] = field(default_factory=dict)  # s_train, group_train, age_train, ...
    meta: dict = field(default_factory=dict)


def save_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> Path:
    """`np.savez` of `arrays` to `path`, atomically (`fedrepro.atomic.atomic_write`)."""
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as stream:   # a file object keeps numpy from appending ".npz"
            np.savez(stream, **arrays)
    return atomic_write(path, write)


def load_prepared(directory: str | Path) -> Prepared:
    """Load `directory/arrays.npz` and `directory/meta.json` written by `prepare_dataset`."""
    directory = Path(directory)
    npz, meta_path = directory / "arrays.npz", directory / "meta.json"
    for path in (npz, meta_path):
        if not path.exists():
            raise FileNotFoundError(f"{path} not found; run prepare_dataset (the prepare rule) first")
    with np.load(npz, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    missing = [k for k in CORE if k not in arrays]
    if missing:
        raise ValueError(f"{npz} lacks arrays {missing}")
    meta = json.loads(meta_path.read_text())
    extras = {k: v for k, v in arrays.items() if k not in CORE}
    return Prepared(*(arrays[k] for k in CORE), extras=extras, meta=meta)
