"""The SteFFLe grid: seconds per run when seeds and lambda values are batched, against one run at a time.

    .venv/bin/python benchmarks/steffle_speed.py [--quick]

Adult, demographic parity, N = 3 silos from Algorithm 3 (h = 0), the paper-scale job
of config.yaml + configs/paper.yaml: 15 seeds x 3 eps {1, 3, 9}
x 7 lambdas = 315 runs, with the epochs shortened to 4 (--quick) or 20 (the paper
trains 40). One row per method, SteFFLe (Algorithm 1) and the Ling 2024 baseline:

* ours: one trainer (`jobs.build`, the pipeline's own) over all 315 runs;
  seconds of `trainer.run()` divided by 315.
* reference: a trainer with one seed and one (eps, lambda) setting, run for 4
  (--quick) or 8 cells of the grid picked at random; mean seconds of `trainer.run()`.
* ratio = reference / ours, the speed-up of batching.

Building a trainer (noise calibration) is not timed on either side, which favours
the one-at-a-time reference (it would rebuild per run). Every timed single cell
must end with the same theta and final metrics as its cell of the batched run
(same seed -> same numbers); the benchmark raises otherwise. One torch thread.
Data are prepared from the shipped copies in a temporary directory.
Writes results/benchmarks/steffle_speed.{csv,md}.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from common import row, seconds, write
from steffle_grid import paper_config, prepare

from fedrepro.algorithms import method_table
from fedrepro.algorithms.steffle import jobs, sgda
from fedrepro.experiments import steffle as plan

DATASET, SETTING = "adult", "dp_N3_h0"
METHODS = {name: method_table("steffle")[name].label for name in ("steffle", "ling2024")}
THETA_TOL, METRIC_TOL = 1e-4, 1e-3  # metrics: a borderline test point may flip


def job_specs(epochs: int) -> tuple[dict, list[int]]:
    """Each method's Adult run (planner `Run`) at paper scale with `epochs` epochs, and the seeds."""
    cfg = paper_config()
    cfg["steffle"]["train"]["epochs"] = epochs
    return {
        r.method: r for r in plan.runs(cfg) if r.dataset == DATASET and r.setting == SETTING and r.method in METHODS
    }, cfg["steffle"]["seeds"]


def timed_run(spec: dict, data, seeds: list[int]):
    """Build the pipeline's trainer for `spec` (not timed), then time its run."""
    trainer, _, settings = jobs.build(spec, data, seeds)
    results = []
    secs = seconds(lambda: results.append(trainer.run()))
    return secs, results[0], settings


def check_same(batched, single, si: int, gi: int, label: str) -> None:
    """One cell of the batched run must equal the same cell run alone."""
    gap = (batched.theta[si, gi] - single.theta[0, 0]).abs().max().item()
    if gap > THETA_TOL:
        raise AssertionError(f"{label}: theta differs from the batched run by {gap:.3g}")
    for key, values in batched.final.items():
        if abs(values[si, gi] - single.final[key][0, 0]) > METRIC_TOL:
            raise AssertionError(f"{label}: {key} {values[si, gi]:.5f} batched vs {single.final[key][0, 0]:.5f} alone")


def bench_method(job, data, seeds: list[int], cells: int, epochs: int) -> dict:
    batched_s, batched, settings = timed_run(job.spec, data, seeds)
    total = len(seeds) * len(settings)
    picks = np.random.default_rng(0).choice(total, size=cells, replace=False)
    single_s = []
    for flat in picks:
        si, gi = divmod(int(flat), len(settings))
        eps, lam = settings[gi]
        spec = {**job.spec, "epsilons": [eps], "lambdas": [lam]}
        secs, single, _ = timed_run(spec, data, [seeds[si]])
        check_same(batched, single, si, gi, f"{job.method} seed {seeds[si]} eps {eps} lambda {lam}")
        single_s.append(secs)
    case = (
        f"{METHODS[job.method]}, Adult N=3, {epochs} epochs: {len(seeds)} seeds x {len(settings)} "
        f"(eps, lambda) = {total} runs batched vs {cells} runs one at a time"
    )
    return row("4 SteFFLe grid", case, "s/run", batched_s / total, float(np.mean(single_s)), "reference / ours")


def run(quick: bool) -> list[dict]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    logging.getLogger(sgda.__name__).setLevel(logging.ERROR)  # short runs break Thm 3.3's T bound: expected
    logging.getLogger("absl").setLevel(logging.ERROR)  # accountant's RDP-order notes while calibrating
    epochs, cells = (4, 4) if quick else (20, 8)
    specs, seeds = job_specs(epochs)
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for method in METHODS:
            arrays, partition = prepare(Path(tmp), DATASET, specs[method].partition)
            data = jobs.load_data(
                SimpleNamespace(spec=specs[method].spec, input={"data": arrays, "partition": partition})
            )
            rows.append(bench_method(specs[method], data, list(seeds), cells, epochs))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 epochs and 4 single cells per method")
    options = parser.parse_args()
    print(write(run(options.quick), "steffle_speed").to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
