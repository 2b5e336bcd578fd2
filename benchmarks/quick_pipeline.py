"""Wall time and peak memory of the default (quick-scale) pipeline, and of a no-op re-run.

    .venv/bin/python benchmarks/quick_pipeline.py [--cores 2] [--results results_bench]

Runs `snakemake -c<cores>` from scratch into a separate results folder, then once more
(which must do nothing), and writes results/benchmarks/quick_pipeline.json. Peak memory is
the largest resident set of any single process the run started (getrusage of children).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_run(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--results", default="results_bench")
    options = parser.parse_args()
    shutil.rmtree(ROOT / options.results, ignore_errors=True)
    common = [f"-c{options.cores}", "--config", f"results={options.results}"]
    full = timed_run(common)
    noop = timed_run(common)
    jobs = len(list((ROOT / options.results / "logs").rglob("*.log")))
    record = {"cores": options.cores, "full_run_s": round(full, 1), "noop_rerun_s": round(noop, 1),
              "jobs": jobs, "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)}
    out = ROOT / "results" / "benchmarks" / "quick_pipeline.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2))
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
