"""Builders of the fairness tabular data sets (Adult, Credit, Retired Adult); see fedrepro.data.prepare."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedrepro.data import formats, sources
from fedrepro.data.prepared import Built, fetch_raw


@dataclass(frozen=True)
class TabularSpec:
    label: Callable                  # DataFrame -> boolean Series (positive class)
    label_desc: str
    sensitive: str                   # column; s = 1 where it equals `female`
    female: object
    continuous: tuple[str, ...]
    categorical: tuple[str, ...]
    age: str


TABULAR: dict[str, TabularSpec] = {
    "adult": TabularSpec(
        lambda df: df["income"] == ">50K", "income == '>50K'", "sex", "Female",
        ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"),
        ("workclass", "education", "marital-status", "occupation", "relationship", "race", "native-country"),
        "age"),
    "credit": TabularSpec(
        lambda df: df["default"] == 1, "default payment next month == 1", "SEX", 2,
        ("LIMIT_BAL", "AGE", *(f"BILL_AMT{i}" for i in range(1, 7)), *(f"PAY_AMT{i}" for i in range(1, 7))),
        ("EDUCATION", "MARRIAGE", "PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"),
        "AGE"),
    "retired_adult": TabularSpec(
        lambda df: df["income"] > 50000, "income > 50000", "gender", "Female",
        ("age", "hours-per-week", "education-num", "capital-gain", "capital-loss"),
        ("workclass", "education", "marital-status", "relationship", "race", "native-country", "occupation"),
        "age"),
}


def tabular_arrays(df, spec: TabularSpec, train_fraction: float, seed: int) -> tuple[dict, dict]:
    """One-hot, split 3:1 with df.sample, z-score continuous columns on train stats."""
    import pandas as pd

    df = df.reset_index(drop=True)
    y = spec.label(df).to_numpy(dtype=np.int64)
    s = (df[spec.sensitive] == spec.female).to_numpy(dtype=np.int64)
    age = df[spec.age].to_numpy(dtype=np.int64)
    x = pd.get_dummies(df[list(spec.continuous + spec.categorical)], columns=list(spec.categorical),
                       dtype=np.float64)
    train = df.sample(frac=train_fraction, random_state=seed).index.to_numpy()
    test = df.index.difference(train).to_numpy()
    cont = list(spec.continuous)
    mean, std = x.loc[train, cont].mean(), x.loc[train, cont].std(ddof=1)
    x[cont] = (x[cont] - mean) / std
    xs = x.to_numpy(dtype=np.float32)
    arrays = {"x_train": xs[train], "y_train": y[train], "x_test": xs[test], "y_test": y[test],
              "s_train": s[train], "s_test": s[test], "age_train": age[train], "age_test": age[test]}
    meta = {
        "feature_names": [str(c) for c in x.columns],
        "continuous": cont,
        "zscore": {c: [float(mean[c]), float(std[c])] for c in cont},
        "label": spec.label_desc,
        "class_names": ["negative", "positive"],
        "sensitive": {"column": spec.sensitive, "s=1": str(spec.female), "excluded_from_x": True},
        "stats": _fairness_stats(y[train], s[train], len(df)),
    }
    return arrays, meta


def _fairness_stats(y, s, n_rows) -> dict:
    p_s = [float(np.mean(s == k)) for k in (0, 1)]
    return {"n_rows_after_cleaning": int(n_rows),
            "train_p_s": p_s,
            "train_minority_fraction": min(p_s),
            "train_positive_rate": float(y.mean()),
            "train_p_s_given_y": {str(c): [float(np.mean(s[y == c] == k)) for k in (0, 1)] for c in (0, 1)}}


def adult(data_root, opts) -> Built:
    fetched = fetch_raw("adult", data_root, opts)
    folder = Path(data_root) / "adult"
    df = formats.read_adult(folder / "adult.data", folder / "adult.test")
    df = df[~(df == "?").any(axis=1)]
    return Built(*tabular_arrays(df, TABULAR["adult"], opts["train_fraction"], opts["seed"]), fetched)


def credit(data_root, opts) -> Built:
    if opts["raw"] == "csv":
        fetched = fetch_raw("credit", data_root, opts)
    elif opts["raw"] == "xls":
        fetched = [sources.fetch_file(sources.CREDIT_XLS, Path(data_root) / "credit")]
    else:
        raise ValueError(f"credit: option raw must be 'csv' or 'xls', got {opts['raw']!r}")
    df = formats.read_credit(fetched[0].path)
    df["EDUCATION"] = df["EDUCATION"].replace({0: 4, 5: 4, 6: 4})
    df["MARRIAGE"] = df["MARRIAGE"].replace({0: 3})
    return Built(*tabular_arrays(df, TABULAR["credit"], opts["train_fraction"], opts["seed"]), fetched)


def retired(data_root, opts) -> Built:
    fetched = fetch_raw("retired_adult", data_root, opts)
    df = formats.read_retired_adult(fetched[0].path).dropna()
    return Built(*tabular_arrays(df, TABULAR["retired_adult"], opts["train_fraction"], opts["seed"]), fetched)
