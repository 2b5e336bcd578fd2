"""Where a default run's CPU-seconds go (a benchmark, not a test; docs/benchmarks.md, "Run cost").

    .venv/bin/python benchmarks/run_cost.py                          # the default run, into a fresh folder
    .venv/bin/python benchmarks/run_cost.py --results DIR -- -c1 fedavg   # more Snakemake arguments after --

Runs `snakemake --profile profiles/local --config results=<folder>` (the folder must not exist: every job
runs) and splits the run's CPU time (user + system) into
* the Snakemake main process (parse, DAG, scheduling rounds, preparing each job): its own time from
  /proc/<pid>/stat, read every second until it exits;
* the jobs' process start and imports: the part of each job's `cpu-seconds:` log line
  (fedrepro.pipeline.run_job) up to its entry function (the interpreter, Snakemake's script preamble, the
  package, the entry module's imports, the code check);
* the jobs' own work: the rest of that line (imports inside the work count as work);
* the rest: the run's total (every process Snakemake waited for) less those three, e.g. failed jobs.
Prints the table, per entry point too, and writes results/benchmarks/run_cost.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "benchmarks"
SNAKEMAKE = ROOT / ".venv" / "bin" / "snakemake"
TICK = os.sysconf("SC_CLK_TCK")
CPU_LINE = re.compile(r"cpu-seconds: start\+imports ([\d.]+), work ([\d.]+)")
ENTRY_LINE = re.compile(r"INFO entry (\S+),")


def own_cpu(pid: int) -> float | None:
    """utime + stime of process `pid` alone (not its children), or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # fields 14 and 15 of proc(5)


def run(results: Path, extra: list[str]) -> dict:
    """Run Snakemake; its wall seconds, exit status, total CPU (rusage of it and its waited-for
    processes) and the main process's own CPU (last reading before it exited)."""
    command = [str(SNAKEMAKE), "--profile", "profiles/local", *extra, "--config", f"results={results}"]
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT)
    main = {"cpu": 0.0}

    def sample():
        while (cpu := own_cpu(process.pid)) is not None and process.returncode is None:
            main["cpu"] = cpu
            time.sleep(1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return {
        "wall": time.monotonic() - start,
        "rc": process.returncode,
        "total": usage.ru_utime + usage.ru_stime,
        "main": main["cpu"],
    }


def job_costs(results: Path) -> dict[str, list[tuple[float, float]]]:
    """(start+imports, work) CPU-seconds of every finished job, by entry point, from the job logs."""
    costs = defaultdict(list)
    for log in sorted((results / "logs").rglob("*.log")):
        text = log.read_text(errors="replace")
        entry, cpu = ENTRY_LINE.search(text), CPU_LINE.findall(text)
        if entry and cpu:
            start, work = cpu[-1]
            costs[entry.group(1)].append((float(start), float(work)))
    return costs


def table(summary: dict, costs: dict[str, list[tuple[float, float]]]) -> str:
    total = summary["total"]
    starts = sum(s for jobs in costs.values() for s, _ in jobs)
    works = sum(w for jobs in costs.values() for _, w in jobs)
    rest = total - summary["main"] - starts - works
    jobs = sum(len(j) for j in costs.values())
    lines = [
        f"# Run cost: {summary['command']}",
        "",
        f"rc {summary['rc']}, {summary['wall'] / 60:.1f} min wall, {total:,.0f} CPU-s, {jobs} jobs with a "
        f"cpu-seconds line, load average at the end {summary['load']}",
        "",
        "| part | CPU-s | share |",
        "|---|---|---|",
    ]
    for name, value in [
        ("Snakemake main process", summary["main"]),
        ("jobs: process start + imports", starts),
        ("jobs: own work", works),
        ("rest (failed jobs, other processes)", rest),
    ]:
        lines.append(f"| {name} | {value:,.1f} | {value / total:.1%} |")
    lines += ["", "| entry point | jobs | start + imports (CPU-s) | work (CPU-s) |", "|---|---|---|---|"]
    for entry, pairs in sorted(costs.items(), key=lambda item: -sum(s + w for s, w in item[1])):
        lines.append(f"| {entry} | {len(pairs)} | {sum(s for s, _ in pairs):,.1f} | {sum(w for _, w in pairs):,.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results_run_cost", help="a folder that does not exist")
    parser.add_argument("snakemake", nargs="*", help="more Snakemake arguments (after --)")
    args = parser.parse_args(argv)
    results = args.results.resolve()
    if results.exists():
        raise SystemExit(f"--results {results} exists: give a new folder, so that every job runs")
    summary = run(results, args.snakemake)
    summary["command"] = " ".join(
        ["snakemake --profile profiles/local", *args.snakemake, f"--config results={results}"]
    )
    summary["load"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    costs = job_costs(results)
    text = table(summary, costs)
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "run_cost.md").write_text(text)
    (OUT / "run_cost.json").write_text(json.dumps({**summary, "jobs": costs}, indent=1))
    return summary["rc"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
