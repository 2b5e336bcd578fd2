"""Wall time of the default pipeline, of a no-op re-run and of a re-run after one method's setting changed.

    .venv/bin/python benchmarks/pipeline_speed.py [--quick] [--cores 2]

Runs `snakemake -c<cores>` from scratch into a separate results folder (`results_bench`),
then again (which must do nothing), then with one method's setting changed through an
extra config file (FedAL's FD `fd_weight` 1.0 -> 0.5; `--quick`: the FedAvg slice only and
its `lr` 0.05 -> 0.1), which must re-run only that method's runs and the reports that read them.
Rows: each wall time against the full run (ratio = share of the full run) with its
job count; the start-up floor of a training job (a fresh interpreter importing torch,
pandas, snakemake.script and fedrepro, measured here) against the mean training job
(ratio = the share of training-job time spent starting processes); the largest process.
Writes results/benchmarks/pipeline_speed.{csv,md} and pipeline_rules.{csv,md} (job-seconds
per rule, from the Snakemake log).
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml
from common import OUT, ROOT, row, write

RESULTS = "results_bench"
CHANGE = {
    "full": {"fedal": {"methods": {"fd": {"fd_weight": 0.5}}}},
    "quick": {"fedavg": {"methods": {"fedavg": {"lr": 0.1}}}},
}
STARTUP = "import torch, pandas, snakemake.script, fedrepro.pipeline"
TRAINING_RULES = ("_train", "_pretrain", "_probe", "_memory")  # the jobs that import torch
GNU_TIME = Path("/usr/bin/time")  # Debian package `time`


def snakemake(cores: int, extra: list[str]) -> tuple[float, Path, float]:
    """Wall seconds of one `snakemake` call, the log it wrote, and its largest process in MB.

    The peak comes from GNU time, a small parent: measured from this process, a child's peak
    would count the pages it shares with this (possibly large) benchmark process at fork."""
    if not GNU_TIME.exists():
        raise SystemExit(f"benchmark 5 measures memory with GNU time: install Debian's `time` ({GNU_TIME})")
    logs = ROOT / ".snakemake" / "log"
    before = set(logs.glob("*.log")) if logs.exists() else set()
    peak_file = ROOT / RESULTS / "peak_kb.txt"
    peak_file.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    subprocess.run(
        [GNU_TIME, "-f", "%M", "-o", str(peak_file), sys.executable, "-m", "snakemake", f"-c{cores}", *extra],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - start
    new = sorted(set(logs.glob("*.log")) - before)
    return seconds, new[-1], int(peak_file.read_text().split()[-1]) / 1024


def job_seconds(log: Path) -> pd.DataFrame:
    """(rule, seconds) of every finished job, from the timestamps of a Snakemake log (1 s resolution)."""
    started, rows, stamp, rule = {}, [], None, None
    for line in log.read_text().splitlines():
        if m := re.match(r"\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]", line):
            stamp = dt.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        elif m := re.match(r"(?:local)?rule (\w+):", line):
            rule, rule_stamp = m.group(1), stamp
        elif (m := re.match(r"\s+jobid: (\d+)", line)) and rule:
            started[m.group(1)], rule = (rule, rule_stamp), None
        elif (m := re.match(r"Finished jobid: (\d+)", line)) and m.group(1) in started:
            name, begun = started.pop(m.group(1))
            rows.append({"rule": name, "seconds": (stamp - begun).total_seconds()})
    return pd.DataFrame(rows, columns=["rule", "seconds"])


def startup_floor(repeats: int = 5) -> float:
    """Median seconds for a fresh interpreter to import what every pipeline job imports."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", STARTUP], cwd=ROOT, check=True)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def per_rule(jobs: pd.DataFrame) -> pd.DataFrame:
    table = jobs.groupby("rule")["seconds"].agg(jobs="count", job_seconds="sum", mean_s="mean")
    return table.sort_values("job_seconds", ascending=False).reset_index()


def run(quick: bool, cores: int = 2) -> list[dict]:
    shutil.rmtree(ROOT / RESULTS, ignore_errors=True)
    common = ["--config", f"results={RESULTS}"] + (["papers=[fedavg]"] if quick else [])
    change = ROOT / RESULTS / "changed_setting.yaml"
    full_s, full_log, peak_mb = snakemake(cores, common)
    noop_s, noop_log, _ = snakemake(cores, common)
    change.write_text(yaml.safe_dump(CHANGE["quick" if quick else "full"]))
    changed_s, changed_log, _ = snakemake(cores, ["--configfile", "config.yaml", str(change), *common])
    full, noop, changed = job_seconds(full_log), job_seconds(noop_log), job_seconds(changed_log)
    floor = startup_floor()
    rules = per_rule(full)
    OUT.mkdir(parents=True, exist_ok=True)
    rules.to_csv(OUT / "pipeline_rules.csv", index=False)
    (OUT / "pipeline_rules.md").write_text(rules.to_markdown(index=False, floatfmt=".3g") + "\n")
    what = "FedAvg slice" if quick else "default run"
    training = full[full["rule"].str.endswith(TRAINING_RULES)]
    return [
        row("5 pipeline", f"{what}: {len(full)} jobs, {cores} cores", "s", full_s, full_s, "ours / reference"),
        row(
            "5 pipeline",
            f"no-op re-run: {len(noop)} jobs",
            "s",
            noop_s,
            full_s,
            "ours / reference",
            "0 jobs",
            len(noop) == 0,
        ),
        row(
            "5 pipeline",
            f"re-run after {_describe(CHANGE['quick' if quick else 'full'])}: {len(changed)} jobs "
            f"({', '.join(sorted(set(changed['rule'])))})",
            "s",
            changed_s,
            full_s,
            "ours / reference",
        ),
        row(
            "5 pipeline",
            f"start-up floor of a training job ({STARTUP}) vs the mean training job ({len(training)} jobs)",
            "s",
            floor,
            training["seconds"].mean(),
            "ours / reference",
        ),
        row(
            "5 pipeline",
            "largest process of the run (Snakemake or one job) vs a 24 GiB machine",
            "MB",
            peak_mb,
            24 * 1024,
            "ours / reference",
        ),
    ]


def _describe(change: dict, prefix: str = "") -> str:
    key, value = next(iter(change.items()))
    return _describe(value, f"{prefix}{key}.") if isinstance(value, dict) else f"{prefix}{key}={value}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the FedAvg slice instead of the default run")
    parser.add_argument("--cores", type=int, default=2)
    options = parser.parse_args()
    table = write(run(options.quick, options.cores), "pipeline_speed")
    print(table.to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
