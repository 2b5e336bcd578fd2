"""Time the paper-scale SteFFLe grid on this machine (2 CPU cores), without Snakemake.

Plans the runs of config.yaml overridden by configs/paper.yaml (the same merge
Snakemake does), keeps the
families of the chosen data sets and methods, prepares Adult / Credit Card from
the shipped copies and the Algorithm 3 silos, and runs every job with
`--workers` processes (like `snakemake -c2`), one torch thread each. Prints the
seconds of every job and the wall time of the whole grid, and writes them as JSON.

    .venv/bin/python benchmarks/steffle_grid.py                       # SteFFLe family, Adult + Credit
    .venv/bin/python benchmarks/steffle_grid.py --methods all --out /tmp/grid.json
    .venv/bin/python benchmarks/steffle_grid.py --epochs 2            # a fast smoke version
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from fedrepro.config import load_yaml, merge_configs

ROOT = Path(__file__).resolve().parents[1]
SGDA_FAMILY = ["steffle", "steffle_nonprivate", "dp_fermi", "fermi"]


def paper_config() -> dict:
    """config.yaml with configs/paper.yaml merged over it, as `snakemake --configfile config.yaml
    configs/paper.yaml` reads them."""
    return merge_configs(load_yaml(ROOT / "config.yaml"), load_yaml(ROOT / "configs" / "paper.yaml"))


def prepare(cache: Path, dataset: str, tag: str | None) -> tuple[str, str | None]:
    from fedrepro.data.arrays import load_prepared
    from fedrepro.data.partition import make_partition, parse_tag, save_partition
    from fedrepro.data.prepare import prepare_dataset

    folder = cache / "data" / dataset
    if not (folder / "arrays.npz").exists():
        prepare_dataset(dataset, folder, cache / "raw", {"source": "shipped"})
    if tag is None:
        return str(folder / "arrays.npz"), None
    part = cache / "partitions" / dataset / f"{tag}.npz"
    if not part.exists():
        scheme, params = parse_tag(tag)
        arrays = load_prepared(folder)
        save_partition(make_partition(scheme, {"age_train": arrays.extras["age_train"]}, **params), part)
    return str(folder / "arrays.npz"), str(part)


def run_one(args) -> dict:
    import torch

    from fedrepro.algorithms.steffle import jobs
    from fedrepro.pipeline import make_job

    torch.set_num_threads(1)
    key, spec, seeds, data, part, out = args
    shutil.rmtree(out, ignore_errors=True)  # no checkpoint to resume from: time a fresh run
    job = make_job(
        spec,
        {"metrics": f"{out}/metrics.parquet", "summary": f"{out}/summary.json"},
        {"data": data, **({"partition": part} if part else {})},
        seeds=seeds,
        threads=1,
    )
    start = time.time()
    jobs.run_job(job)
    return {"run": "/".join(key), "seconds": time.time() - start, "models": len(seeds) * len(jobs.grid(spec)[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["adult", "credit"])
    parser.add_argument("--methods", nargs="+", default=SGDA_FAMILY, help="method names or 'all'")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=None, help="override the epochs (smoke test)")
    parser.add_argument("--cache", default="/tmp/steffle_bench")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from fedrepro.algorithms import method_table
    from fedrepro.experiments import steffle as plan

    cfg = paper_config()
    if args.epochs:
        cfg["steffle"]["train"]["epochs"] = args.epochs
    methods = list(method_table("steffle")) if args.methods == ["all"] else args.methods
    runs = [r for r in plan.main_runs(cfg) if r.dataset in args.datasets and r.method in methods]
    cache = Path(args.cache)
    seeds = list(cfg["steffle"]["seeds"])
    tasks = []
    for run in runs:
        data, part = prepare(cache, run.dataset, run.partition)
        tasks.append((run.key, run.spec, seeds, data, part, str(cache / "runs" / "/".join(run.key))))
    print(f"{len(tasks)} jobs, {len(seeds)} seeds each, {args.workers} workers")
    start = time.time()
    with ProcessPoolExecutor(args.workers) as pool:
        results = []
        for res in pool.map(run_one, tasks):
            print(f"{res['seconds']:8.1f} s  {res['models']:4d} models  {res['run']}", flush=True)
            results.append(res)
    wall = time.time() - start
    total = {
        "wall_seconds": wall,
        "jobs": len(results),
        "models": sum(r["models"] for r in results),
        "job_seconds": sum(r["seconds"] for r in results),
        "workers": args.workers,
        "runs": results,
    }
    print(f"grid wall time {wall:.1f} s for {total['models']} models ({total['job_seconds']:.1f} job-seconds)")
    if args.out:
        Path(args.out).write_text(json.dumps(total, indent=1))


if __name__ == "__main__":
    main()
