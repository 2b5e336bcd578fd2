"""CPU cost of one seed of a FedSC stand-in run on one thread: its rounds and the kNN monitor at the last one,
as the pipeline's pretraining job runs them (no checkpoints, no probe).

    nice /usr/bin/time -v .venv/bin/python benchmarks/fedsc_seed_cost.py RESULTS shapes fedsc/full_epsinf 0

RESULTS: the results folder of a finished `fedsc_standin` (its prepared data, partition and the run's
summary.json, whose spec runs here). Prints the last round's metrics (the job's metrics.parquet has the same
loss and kNN accuracy) and the training loop's CPU seconds; /usr/bin/time adds the process's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedrepro.algorithms.fedsc.fedsc import FedSC  # noqa: E402
from fedrepro.algorithms.fedsc.jobs import load_data  # noqa: E402
from fedrepro.fl import seeding  # noqa: E402


def run_arguments(parser: argparse.ArgumentParser) -> None:
    """The stored run a script re-runs: RESULTS DATASET RUN SEED."""
    parser.add_argument("results", type=Path, help="results folder of a finished fedsc_standin")
    parser.add_argument("dataset", help="a stand-in: shapes or textures")
    parser.add_argument("run", help="method/setting, e.g. fedsc/full_epsinf or fedavg_sc/full")
    parser.add_argument("seed", type=int)


def stored_run(results: Path, dataset: str, run: str, seed: int, change: dict | None = None):
    """The run's spec (with `change` merged, one level deep) and a job naming its prepared data and partition."""
    folder = results / "fedsc" / "runs" / dataset / run / f"s{seed}"
    spec = json.loads((folder / "summary.json").read_text())["spec"]
    for key, value in (change or {}).items():
        both = isinstance(value, dict) and isinstance(spec.get(key), dict)
        spec[key] = {**spec[key], **value} if both else value
    partition = next((results / "partitions" / dataset).glob("classes-c*-s0.npz"))
    data = str(results / "data" / dataset / "arrays.npz")
    return spec, types.SimpleNamespace(input={"data": data, "partition": str(partition)}, spec=spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    run_arguments(parser)
    args = parser.parse_args()
    spec, job = stored_run(args.results, args.dataset, args.run, args.seed)
    torch.set_num_threads(1)
    seeding.seed_everything(args.seed)
    algorithm = FedSC(spec, load_data(job, "cpu"), args.seed, "cpu")
    start = time.process_time()
    for t in range(1, int(spec["rounds"]) + 1):
        last = algorithm.round(t)
    last.update(algorithm.evaluate(int(spec["rounds"])))
    print(json.dumps({**last, "training_cpu_s": round(time.process_time() - start, 1)}))


if __name__ == "__main__":
    main()
