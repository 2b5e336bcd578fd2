"""Every speed benchmark, one command, one table: results/benchmarks/summary.{csv,md}.

    .venv/bin/python benchmarks/run.py            # about 16 min on 2 cores (the default pipeline is 10 of them)
    .venv/bin/python benchmarks/run.py --quick    # a smoke version, about 3 min
    .venv/bin/python benchmarks/run.py --only fl_speed steffle_speed

Each benchmark measures the project's code and a reference in the same process and reports
their ratio (see each module's docstring): 1-2 `fl_speed`, 3 `dpzv_speed`, 4 `steffle_speed`,
5 `pipeline_speed`, the GPU options of fedrepro.fl.precision `precision_speed`, and 7
`paper_scale` (without a GPU: a trial of `make bench-costs` at smoke sizes, which writes nothing; on a GPU
only its lever rows: `make bench-costs` refreshes benchmarks/unit_costs.csv). Each also writes its own
table beside the summary.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import time

import pandas as pd
import torch
from common import OUT, write

BENCHMARKS = ["fl_speed", "dpzv_speed", "steffle_speed", "pipeline_speed", "precision_speed", "paper_scale"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short versions of every benchmark")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=BENCHMARKS,
        default=BENCHMARKS,
        metavar="NAME",
        help=f"run only these (allowed: {', '.join(BENCHMARKS)})",
    )
    options = parser.parse_args()
    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
        f"{'quick' if options.quick else 'full'} mode"
    )
    seconds = {}
    for name in options.only:
        start = time.perf_counter()
        write(importlib.import_module(name).run(options.quick), name)
        seconds[name] = time.perf_counter() - start
    # the summary keeps the latest table of every benchmark, so `--only` refreshes just those
    rows = [
        r
        for name in BENCHMARKS
        if (OUT / f"{name}.csv").exists()
        for r in pd.read_csv(OUT / f"{name}.csv", keep_default_na=False).to_dict("records")
    ]
    write(rows, "summary")
    timing = ", ".join(f"{name} {s:.0f} s" for name, s in seconds.items())
    (OUT / "summary.md").write_text(
        f"Machine: {machine}. Refreshed now (wall time): {timing}.\n\n" + (OUT / "summary.md").read_text()
    )
    print((OUT / "summary.md").read_text())


if __name__ == "__main__":
    main()
