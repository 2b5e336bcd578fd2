"""The authors' one-hot column order, which decides which feature each of their init values and theta
noise draws lands on (rng = "refcode" with `refcode_hash_seed`).

Their `dataloader_fed.py` (GeneralData.__init__) orders columns through Python sets of strings:
    non_sens_attr = sorted(set(columns) - {sensitive, label})
    one_hot_cols = list(set(non_sens_attr).difference(cols_to_norm))      # a set's order
    df = pd.get_dummies(df, columns=one_hot_cols)                          # dummies in that order
    non_sens_attr = list(set(df.columns).difference(sensitive + [label]))  # a set's order again
and the model's weight i multiplies column non_sens_attr[i]. A set's order of strings depends on
the process's string-hash seed (PYTHONHASHSEED; random per process unless set), so their column
order, and with it the init's and the noise's assignment to features, is a random draw per run;
with PYTHONHASHSEED fixed it is fixed. `authors_column_order` runs the same set operations in a
Python process with that hash seed (the same interpreter version gives the same order).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

# their adult_original_purified.csv: the UCI Adult columns in file order, the label renamed
ADULT_HEADER = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", ">50K",
)  # fmt: skip
ADULT_NORMALISED = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")  # args_fed.py
ADULT_SENSITIVE, ADULT_LABEL = "sex", ">50K"

_SET_ORDER = """
import json, sys
header, categories, norm, sensitive, label = json.loads(sys.stdin.read())
non_sens = sorted(set(header).difference({sensitive, label}))
one_hot = list(set(non_sens).difference(norm))
columns = [c for c in header if c not in one_hot] + [f"{c}_{v}" for c in one_hot for v in sorted(categories[c])]
print(json.dumps(list(set(columns).difference(set([sensitive, label])))))
"""


def authors_column_order(feature_names: list[str], hash_seed: int) -> list[str]:
    """Adult's feature names in the authors' column order under PYTHONHASHSEED = hash_seed.

    `feature_names` are the prepared one-hot names (continuous columns by name, dummies as
    "column_value", as pd.get_dummies names them); every name must be one of theirs."""
    categories = {c: [] for c in ADULT_HEADER if c not in ADULT_NORMALISED + (ADULT_SENSITIVE, ADULT_LABEL)}
    for name in feature_names:
        if name in ADULT_NORMALISED:
            continue
        column = next((c for c in categories if name.startswith(c + "_")), None)
        if column is None:
            raise ValueError(f"feature {name!r} is not one of the authors' Adult columns {ADULT_HEADER}")
        categories[column].append(name[len(column) + 1 :])
    payload = json.dumps([ADULT_HEADER, categories, ADULT_NORMALISED, ADULT_SENSITIVE, ADULT_LABEL])
    env = {**os.environ, "PYTHONHASHSEED": str(int(hash_seed))}
    done = subprocess.run(
        [sys.executable, "-c", _SET_ORDER], input=payload, capture_output=True, text=True, env=env, check=True
    )
    order = json.loads(done.stdout)
    if sorted(order) != sorted(feature_names):
        raise ValueError(
            f"the authors' columns {sorted(set(order) ^ set(feature_names))} differ from the prepared ones"
        )
    return order


def column_permutation(feature_names: list[str], hash_seed: int | None) -> list[int] | None:
    """Their column i is our feature perm[i]; None (hash_seed None) keeps the prepared order."""
    if hash_seed is None:
        return None
    position = {name: i for i, name in enumerate(feature_names)}
    return [position[name] for name in authors_column_order(feature_names, hash_seed)]
