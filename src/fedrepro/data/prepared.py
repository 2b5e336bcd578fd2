"""What every prepare job runs, whatever the data set: options, checks, statistics, writing.

The builders of the data sets live in one module per family, so that a prepare job runs
(and its code inputs list) only its own family's code (fedrepro.codedeps): `images` (digits,
MNIST, CIFAR, SVHN, CINIC-10, CelebA, ModelNet40), `text` (Amazon), `tabular` (Adult,
Credit, Retired Adult), `generated` (the synthetic stand-ins). `fedrepro.data.prepare`
names them all (`prepare_dataset`). The array conventions are in `fedrepro.data.prepare`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedrepro.data import sources
from fedrepro.data.arrays import save_npz
from fedrepro.data.catalog import get as catalog_get
from fedrepro.atomic import atomic_write_text

DEFAULT_OPTIONS: dict[str, dict] = {
    "digits": {"seed": 0, "test_fraction": 0.25},
    "mnist": {},
    "cifar10": {},
    "cifar100": {},
    "svhn": {},
    "cinic10": {"include_valid": False},
    "celeba": {"image_size": 84, "min_images": 5, "train_fraction": 0.9, "seed": 0},
    "modelnet40": {"resolution": 32, "channels": 3},
    "amazon_polarity": {"n_train": 100000, "n_test": 10000, "seed": 0, "tokenizer": "hash",
                        "vocab_size": 30522, "length": 384, "chunks": 3, "tokenizer_dir": None},
    "adult": {"seed": 100, "train_fraction": 0.75},
    "credit": {"seed": 100, "train_fraction": 0.75, "raw": "csv"},
    "retired_adult": {"seed": 100, "train_fraction": 0.75},
    "synthetic_multiview": {"n_train": 2000, "n_test": 500, "num_classes": 10, "views": 12, "channels": 1,
                            "size": 16, "latent_dim": 32, "class_sep": 1.0, "within_std": 1.0,
                            "pixel_noise": 0.5, "seed": 0},
    "synthetic_text": {"n_train": 2000, "n_test": 500, "length": 96, "chunks": 3, "vocab_size": 1000,
                       "n_polar": 50, "signal": 0.15, "confusion": 0.3, "label_noise": 0.05, "seed": 0},
    "shapes": {"train_per_class": 200, "test_per_class": 100, "size": 16, "size_range": [0.22, 0.45], "min_contrast": 0.25,
               "tint": 0.05, "gradient": 0.3, "noise": 0.08, "supersample": 4, "seed": 0},
    "textures": {"train_per_class": 200, "test_per_class": 100, "size": 16, "period_range": [4.0, 8.0],
                 "max_angle": 10.0, "min_contrast": 0.25, "colour": 0.05, "noise": 0.05, "supersample": 4, "seed": 0},
    "synthetic_tabular": {"n": 4000, "minority_fraction": 0.3, "s_effect": 1.0, "seed": 0,
                          "train_fraction": 0.75},
}


# Every dataset also takes `source`: "auto" (pre-staged, else shipped, else download) or
# "shipped" (Adult, Credit: never download; the pipeline then skips the download rule).
SOURCE_CHOICES = ("auto", "shipped")


def resolve_options(name: str, options: dict | None) -> dict:
    """Defaults of `name` updated with `options`; unknown keys or values raise a clear error."""
    catalog_get(name)
    allowed = {**DEFAULT_OPTIONS[name], "source": "auto"}
    unknown = sorted(set(options or {}) - set(allowed))
    if unknown:
        raise ValueError(f"dataset {name!r}: unknown option(s) {unknown}; allowed: {sorted(allowed)}")
    opts = {**allowed, **(options or {})}
    if opts["source"] not in SOURCE_CHOICES:
        raise ValueError(f"dataset {name!r}: option source must be one of {SOURCE_CHOICES}, got {opts['source']!r}")
    for key, value in opts.items():  # a split fraction of 0 or 1 leaves one side empty
        if key.endswith("_fraction") and not (isinstance(value, (int, float)) and 0 < value < 1):
            raise ValueError(f"dataset {name!r}: option {key} must be a number strictly between 0 and 1, got {value!r}")
    if opts["source"] == "shipped" and not sources.has_shipped(name):
        raise ValueError(f"dataset {name!r}: option source 'shipped' is only available for "
                         f"{[d for d in sources.SOURCES if sources.has_shipped(d)]}")
    return opts


def fetch_raw(name: str, data_root, opts: dict) -> list:
    return sources.fetch(name, data_root, allow_download=opts["source"] != "shipped")


def xy(x_train, y_train, x_test, y_test) -> dict:
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


@dataclass
class Built:
    arrays: dict[str, np.ndarray]
    meta: dict = field(default_factory=dict)
    fetched: list = field(default_factory=list)



# ----------------------------------------------------------------------------- checks, stats, writing

_NDIM = {"image": 4, "multiview": 5, "text": 2, "tabular": 2}
_DTYPE = {"image": np.uint8, "multiview": np.uint8, "text": np.int64, "tabular": np.float32}


def check_arrays(name: str, kind: str, num_classes: int, arrays: dict) -> None:
    """Shapes, dtypes and label range agree with the dataset kind."""
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim != _NDIM[kind] or x.dtype != _DTYPE[kind]:
            raise ValueError(f"{name}: x_{split} is {x.dtype} {x.shape}, expected {_NDIM[kind]}-d {_DTYPE[kind]}")
        if y.dtype != np.int64 or y.shape != (len(x),):
            raise ValueError(f"{name}: y_{split} is {y.dtype} {y.shape}, expected int64 ({len(x)},)")
        if len(y) and (y.min() < 0 or y.max() >= num_classes):
            raise ValueError(f"{name}: y_{split} has labels outside 0..{num_classes - 1}")
        for key, value in arrays.items():
            if key.endswith(f"_{split}") and len(value) != len(x):
                raise ValueError(f"{name}: {key} has {len(value)} rows, x_{split} has {len(x)}")


def channel_stats(x: np.ndarray, channel_axis: int, chunk: int = 4096) -> tuple[list, list]:
    """Per-channel mean and std of uint8 images on the [0, 1] scale (chunked, float64)."""
    moved = np.moveaxis(x, channel_axis, -1)
    c = moved.shape[-1]
    total, sq, count = np.zeros(c), np.zeros(c), 0
    for start in range(0, len(moved), chunk):
        block = moved[start:start + chunk].reshape(-1, c).astype(np.float64) / 255.0
        total += block.sum(0)
        sq += (block ** 2).sum(0)
        count += len(block)
    mean = total / max(count, 1)
    std = np.sqrt(np.maximum(sq / max(count, 1) - mean ** 2, 0.0))
    return mean.tolist(), std.tolist()


def prepare_with(build: Callable, name: str, out_dir: str | os.PathLike, data_root: str | os.PathLike,
                 options: dict | None = None) -> Path:
    """Build dataset `name` with `build(data_root, options)` (its builder) and write
    `out_dir/arrays.npz` and `out_dir/meta.json`."""
    info = catalog_get(name)
    opts = resolve_options(name, options)
    built = build(data_root, opts)
    num_classes = built.meta.pop("num_classes", info.num_classes)
    check_arrays(name, info.kind, num_classes, built.arrays)

    meta = info.as_dict()
    x_train = built.arrays["x_train"]
    meta.update(num_classes=num_classes, n_train=len(x_train), n_test=len(built.arrays["x_test"]),
                input_shape=list(x_train.shape[1:]), sizes_exact=True)
    if info.kind in ("image", "multiview"):
        mean, std = channel_stats(x_train, 1 if info.kind == "image" else 2)
        meta["normalization"] = {"scale": "x / 255", "mean": mean, "std": std}
    meta.update(built.meta)
    meta["extras"] = sorted(k for k in built.arrays if not k.startswith(("x_", "y_")))
    meta["options"] = opts
    meta["provenance"] = sources.provenance(name, built.fetched)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_npz(out / "arrays.npz", built.arrays)
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=1, default=str))
    return out
