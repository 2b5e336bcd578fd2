"""A run's key numbers as data, to show that a refactor changed none of them.

    python tools/run_record.py write results > record.json      # the numbers of a finished run
    python tools/run_record.py check results record.json         # exit 1 and list what differs
    python tools/run_record.py check results tools/records/default_run.json.gz   # against the stored default run

`tools/records/default_run.json.gz` is the default run's record (`snakemake -c2` of config.yaml on 2 CPU
cores; its commit says which code made it): a refactor that should change no number re-runs the default
configuration and checks against it. Another CPU or library build may differ in the last digits: pass
`--rtol` and read what differs.

The record holds every number of every table (`*/tables/*.csv`) and of every run summary
(`*/runs/**/summary.json`, but not the copies in the store of finished work), keyed by the file's path inside the results folder and the number's
place in the file (a table's row by its text columns, the k-th repeat of the same text as
`<text>#k`). Time, memory and byte counts of the machine are left out (they differ between
two runs of the same code); a job's spec is left out (it is the input, not a result). Two records
agree when they hold the same files and places, equal strings, and numbers within `--rtol`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from pathlib import Path

import pandas as pd

from fedrepro.store import STATE as STORE_STATE

# a number whose place contains one of these words measures the machine, not the method
MACHINE_WORDS = ("seconds", "time", "wall", "rss", "memory", "peak_", "per_second", "elapsed")


def record(results: str | Path) -> dict[str, dict[str, float | str]]:
    """{path inside `results`: {place: value}} for every table and run summary."""
    results = Path(results)
    out = {}
    for path in sorted(results.glob("*/tables/*.csv")):
        out[str(path.relative_to(results))] = _table_values(path)
    for path in sorted(results.glob("*/runs/**/summary.json")):
        if (path.parent / STORE_STATE).exists():  # a store entry's copy, under a hash of code and inputs
            continue
        summary = json.loads(path.read_text())
        summary.pop("spec", None)
        out[str(path.relative_to(results))] = dict(_leaves(summary))
    return out


def differences(ours: dict, theirs: dict, rtol: float = 1e-9) -> list[str]:
    """Every file, place and value in which two records differ, one line each."""
    lines = [f"only in the first: {name}" for name in sorted(set(ours) - set(theirs))]
    lines += [f"only in the second: {name}" for name in sorted(set(theirs) - set(ours))]
    for name in sorted(set(ours) & set(theirs)):
        a, b = ours[name], theirs[name]
        lines += [f"{name}: {place} only in the first" for place in sorted(set(a) - set(b))]
        lines += [f"{name}: {place} only in the second" for place in sorted(set(b) - set(a))]
        lines += [
            f"{name}: {place} {a[place]!r} != {b[place]!r}"
            for place in sorted(set(a) & set(b))
            if not _same(a[place], b[place], rtol)
        ]
    return lines


def _table_values(path: Path) -> dict[str, float | str]:
    table = pd.read_csv(path)
    keys = [c for c in table.columns if not pd.api.types.is_numeric_dtype(table[c])]
    values, seen = {}, {}
    for i, row in table.iterrows():
        label = "/".join(str(row[k]) for k in keys) or str(i)
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:  # rows whose text columns repeat (a privacy table's rows per seed) keep apart
            label = f"{label}#{seen[label]}"
        for column in table.columns:
            if column not in keys and not _machine(column):
                values[f"{label}:{column}"] = _plain(row[column])
            elif column in keys:
                values[f"{i}:{column}"] = str(row[column])
    return values


def _leaves(value, place: str = ""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{place}.{key}" if place else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{place}[{i}]")
    elif not _machine(place):
        yield place, _plain(value)


def _machine(place: str) -> bool:
    last = place.rsplit(".", 1)[-1].lower()
    return any(word in last for word in MACHINE_WORDS)


def _plain(value):
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _same(a, b, rtol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=rtol, abs_tol=rtol)
    return a == b


def load(path: str | Path) -> dict:
    """A stored record, plain or gzipped JSON."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as stream:
        return json.load(stream)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("write").add_argument("results")
    check = sub.add_parser("check")
    check.add_argument("results")
    check.add_argument("record")
    check.add_argument("--rtol", type=float, default=1e-9)
    args = parser.parse_args(argv)
    if args.command == "write":
        json.dump(record(args.results), sys.stdout, indent=1, sort_keys=True)
        return 0
    lines = differences(record(args.results), load(args.record), args.rtol)
    print("\n".join(lines) or f"{args.results} matches {args.record}")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
