"""A data set's size and classes as the config's options make them, before it is prepared: what the
planners and the config checks need to know of the data (pure Python; the catalog's counts)."""

from __future__ import annotations

import math

from fedrepro.data.catalog import DATASETS


def dataset_options(config: dict, dataset: str) -> dict:
    from fedrepro.data.prepared import resolve_options

    return resolve_options(dataset, config.get("datasets", {}).get(dataset, {}))


def num_classes(dataset: str, options: dict) -> int:
    return int(options.get("num_classes", DATASETS[dataset].num_classes))


def train_size(config: dict, dataset: str) -> int:
    """Training samples that preparing `dataset` with the config's options gives: the catalog's count,
    or the count the options set (digits' test_fraction, the tabular train_fraction, the generated
    sets' sizes). CelebA and Retired Adult keep the catalog's estimate (their raw files decide)."""
    info, options = DATASETS[dataset], dataset_options(config, dataset)
    total = options.get("n", info.n_train + info.n_test)
    if "test_fraction" in options:  # sklearn's train_test_split: ceil(test_fraction * n) test samples
        return total - math.ceil(options["test_fraction"] * total)
    if info.kind == "tabular" and info.sizes_exact:  # pandas' sample(frac): round(frac * n) training rows
        return round(options["train_fraction"] * total)
    if "train_per_class" in options:
        return options["train_per_class"] * options.get("num_classes", info.num_classes)
    return int(options.get("n_train") or info.n_train)
