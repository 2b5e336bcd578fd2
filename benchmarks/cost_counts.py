"""Count the FLOPs and kernel launches of every step the cost planner composes (CPU, no GPU needed).

    .venv/bin/python benchmarks/cost_counts.py            # rewrites benchmarks/unit_counts.csv
    .venv/bin/python benchmarks/cost_counts.py --missing  # adds the steps it lacks, keeps the other rows

Walks the planner (`fedrepro.plan.jobs`) over config.yaml alone and over config.yaml + configs/paper.yaml,
collects each step it asks for (a registered model at a batch and input shape, forward or training step)
and counts it with `fedrepro.experiments.cost.count_step` (meta device; BERT on the CPU at batch 2).
The planner reads the table; a step missing from it is counted when the planner runs (slower).
It then writes into benchmarks/unit_costs.csv the counted work (flops, launches) of the unit each
measured row timed (the first paper-scale run matching its paper, unit, data set, model, method and
setting prefix), so every configuration fits the same constants. A row whose `counted` says where its
work came from keeps it: `timed run` (benchmarks/paper_scale.py --costs counted the unit it timed, on its
staged data and with the code it ran) or `as measured` (the older rows, counted with the code they timed:
DPZV's per-tensor directions, FedAL's per-client loop, FedSC without the shared prefix). An `as measured` row
of a kind `fedrepro.plan.AS_RAN` describes is re-counted here with the code it ran (`plan.as_ran_work`: FedAL's
per-tensor Adam, FedSC's DP-CalR at eps = inf); the others keep their numbers.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import csv  # noqa: E402

from fedrepro.experiments.cost import Counts, load_counts, write_counts  # noqa: E402
from fedrepro.plan import COSTS, COUNTS, _measured_runs, as_ran_work, jobs, load_config, load_costs  # noqa: E402

CONFIGS = [["config.yaml"], ["config.yaml", "configs/paper.yaml"]]


def steps() -> set[str]:
    keys: set[str] = set()
    for files in CONFIGS:
        counts, config = Counts(), load_config([str(ROOT / f) for f in files])
        jobs(config, counts)
        for cost in load_costs(COSTS):  # the steps of the measured rows counted as they ran
            as_ran_work(config, cost, counts)
        keys |= counts.missing
    return keys


COLUMNS = [
    "paper",
    "unit",
    "dataset",
    "model",
    "method",
    "device",
    "seconds",
    "source",
    "setting",
    "flops",
    "launches",
    "counted",
]
TIMED = "timed run"  # `counted`: flops and launches are the timed unit's, counted by the bench that timed it
AS_MEASURED = "as measured"  # `counted`: counted earlier with the code the row timed; a re-count would see today's


def fill_costs(path: Path = COSTS) -> int:
    """Write each measured row's counted work into the cost table, except the rows whose `counted` names
    where their work came from (TIMED, AS_MEASURED); returns how many rows got one."""
    config, counts = load_config([str(ROOT / f) for f in CONFIGS[-1]]), load_counts(COUNTS)
    planned = jobs(config, counts)
    costs = load_costs(path)
    measured = _measured_runs([j for per in planned.values() for j in per["all runs"]], costs)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    filled = 0
    for row, c in zip(rows, costs):
        recount = as_ran_work(config, c, counts) if row.get("counted") == AS_MEASURED else None
        if row.get("counted") in (TIMED, AS_MEASURED) and recount is None:
            continue
        work = recount or (measured[c].work if c in measured else None)
        row["flops"] = f"{work.flops:.6g}" if work else ""
        row["launches"] = f"{work.launches:.6g}" if work else ""
        row["setting"] = c.setting
        filled += work is not None
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows([{c: r.get(c) or "" for c in COLUMNS} for r in rows])
    return filled


def main(argv: list[str]) -> None:
    start = time.perf_counter()
    stored = load_counts(COUNTS).table if "--missing" in argv else {}
    n = write_counts(COUNTS, steps() - set(stored), stored)
    print(f"counted {n} steps into {COUNTS} in {time.perf_counter() - start:.0f} s")
    print(f"wrote the counted work of {fill_costs()} measured rows into {COSTS}")


if __name__ == "__main__":
    main(sys.argv[1:])
