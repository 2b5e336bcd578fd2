"""Turn raw files (or a generator) into `arrays.npz` + `meta.json` for one dataset.

`prepare_dataset(name, out_dir, data_root, options)` is the prepare rule's entry
point. Arrays follow docs/architecture.md: images uint8 N x C x H x W, multiview
uint8 N x V x C x H x W, text int64 N x L, tabular float32 N x d, labels int64, and
extras `s_*` (sensitive attribute, 1 = female), `group_*` (LEAF user index),
`age_*` (raw age, the silo attribute of SteFFLe's split).

Tabular preparation follows SteFFLe App. E.2.2, with the details its authors' code fixes:
* Adult: both files combined, rows with '?' dropped (45,222), '.' stripped from the
  test labels; Credit: EDUCATION {0,5,6} -> 4 and MARRIAGE 0 -> 3 merged; Retired
  Adult: rows with missing values dropped, income > 50,000.
* the sensitive column is excluded from x; all other categoricals are one-hot
  encoded with `pd.get_dummies` on the full data before splitting;
* 3:1 split `df.sample(frac=0.75, random_state=100)` (options train_fraction, seed),
  the test set is the rest in file order;
* continuous columns are z-scored with the training mean and std (ddof = 1); the raw
  age is kept as `age_train`/`age_test`.
"""

from __future__ import annotations

import os
from pathlib import Path

from fedrepro.data.catalog import get as catalog_get
from fedrepro.data.prepared import (  # noqa: F401
    DEFAULT_OPTIONS,
    SOURCE_CHOICES,
    Built,
    channel_stats,
    check_arrays,
    prepare_with,
    resolve_options,
)
from fedrepro.registry import resolve

# Each data set's builder, by module and function: a prepare job runs (and depends on) only its
# own family's module (the prepare rule's code inputs; fedrepro.codedeps reads these strings).
BUILDERS: dict[str, str] = {
    "digits": "fedrepro.data.images:digits", "mnist": "fedrepro.data.images:mnist",
    "cifar10": "fedrepro.data.images:cifar10", "cifar100": "fedrepro.data.images:cifar100",
    "svhn": "fedrepro.data.images:svhn", "cinic10": "fedrepro.data.images:cinic",
    "celeba": "fedrepro.data.images:celeba", "modelnet40": "fedrepro.data.images:modelnet",
    "amazon_polarity": "fedrepro.data.text:amazon",
    "adult": "fedrepro.data.tabular:adult", "credit": "fedrepro.data.tabular:credit",
    "retired_adult": "fedrepro.data.tabular:retired",
    "synthetic_multiview": "fedrepro.data.generated:synthetic_multiview",
    "synthetic_text": "fedrepro.data.generated:synthetic_text",
    "synthetic_tabular": "fedrepro.data.generated:synthetic_tabular",
    "shapes": "fedrepro.data.generated:shapes",
    "textures": "fedrepro.data.generated:textures",
}

# The shape of one prepared sample where the data set's options change it: a function of the
# resolved options beside its builder. Every other data set's is its catalog `input_shape`.
SAMPLE_SHAPES: dict[str, str] = {
    "celeba": "fedrepro.data.images:celeba_shape", "modelnet40": "fedrepro.data.images:modelnet_shape",
    "amazon_polarity": "fedrepro.data.text:amazon_shape",
    "synthetic_multiview": "fedrepro.data.generated:synthetic_multiview_shape",
    "synthetic_text": "fedrepro.data.generated:synthetic_text_shape",
    "shapes": "fedrepro.data.generated:shapes_shape",
    "textures": "fedrepro.data.generated:textures_shape",
}


def sample_shape(name: str, options: dict) -> tuple[int, ...]:
    """Shape of one prepared sample of data set `name` under its resolved preparation `options`."""
    shape = resolve(SAMPLE_SHAPES[name])(options) if name in SAMPLE_SHAPES else catalog_get(name).input_shape
    return tuple(int(s) for s in shape)


def prepare_dataset(name: str, out_dir: str | os.PathLike, data_root: str | os.PathLike,
                    options: dict | None = None) -> Path:
    """Build dataset `name` and write `out_dir/arrays.npz` and `out_dir/meta.json`."""
    resolve_options(name, options)  # an unknown data set or option fails with the allowed values
    return prepare_with(resolve(BUILDERS[name]), name, out_dir, data_root, options)
