"""Re-run scope: the jobs `snakemake -n` plans for the default run after one code edit (issue 41).

    .venv/bin/python benchmarks/rerun_scope.py /tmp/scope/after /tmp/scope/results-after
    git worktree add /tmp/scope/before <commit>   # or `git archive <commit> | tar -x -C ...`
    .venv/bin/python benchmarks/rerun_scope.py /tmp/scope/before /tmp/scope/results-before

The first argument is a checkout of the pipeline (a copy: the edits are made there and undone, file times
restored), the second a results folder of its own. Planning does not read what outputs hold (the workflow
has no Snakemake checkpoints), so instead of a default run (about 13 CPU-minutes) every output is made as an
empty placeholder and `snakemake --touch` dates them in the order of the DAG; the folder then plans nothing.
Each edit is made, the dry run's jobs are counted by rule, the edit is undone, a dry run rewrites the code
fingerprints back and `--touch` dates the outputs again. Only the planned job lists are measured.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
from pathlib import Path


def code(text: str) -> str:
    return text + "\n_EDITED = 1\n"  # a new statement: the module's code changes, not only its text


EDITS = {  # name: (file in the checkout, the edit)
    "store.py message": ("src/fedrepro/store.py", lambda t: t.replace("recomputing it", "computing it again")),
    "fl/seeding.py code": ("src/fedrepro/fl/seeding.py", code),
    "data/tabular.py code": ("src/fedrepro/data/tabular.py", code),
    "dpzv/stacked.py code": ("src/fedrepro/algorithms/dpzv/stacked.py", code),
    "entry.py float64": (
        "workflow/scripts/entry.py",
        lambda t: t + "\nimport torch\ntorch.set_default_dtype(torch.float64)\n",
    ),
    "FedAvg label": (
        "src/fedrepro/algorithms/fedavg/__init__.py",
        lambda t: t.replace('label="FedAvg"', 'label="FedAvg, renamed"'),
    ),
}
TRAINING = re.compile(r"train|pretrain|probe|prefix|memory|^audit$|^prepare$|^partition$")  # jobs that compute


def snakemake(checkout: Path, results: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    command = [sys.executable, "-m", "snakemake", *args, "--config", f"results={results}"]
    return subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)


def planned(checkout: Path, results: str) -> collections.Counter:
    out = snakemake(checkout, results, "-n").stdout
    return collections.Counter(re.findall(r"^(?:local)?rule (\w+):$", out, re.M))


def touch(checkout: Path, results: str) -> None:
    done = snakemake(checkout, results, "-c1", "--touch")
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])


def up_to_date(checkout: Path, results: str) -> int:
    """Placeholders for every output of the default run, dated by --touch; returns the number of jobs."""
    everything = snakemake(checkout, results, "-n", "-F").stdout
    for line in re.findall(r"^    output: (.*)$", everything, re.M):
        for path in map(Path, line.split(", ")):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(exist_ok=True)
    touch(checkout, results)
    return len(re.findall(r"^(?:local)?rule \w+:$", everything, re.M))


def measure(checkout: Path, results: str, name: str) -> collections.Counter:
    relative, edit = EDITS[name]
    path = checkout / relative
    text, times = path.read_text(), path.stat()
    if edit(text) == text:
        raise ValueError(f"{name}: the edit does not apply to {relative}")
    path.write_text(edit(text))
    try:
        jobs = planned(checkout, results)
    finally:
        path.write_text(text)
        os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    snakemake(checkout, results, "-n")  # the fingerprints back to the code
    touch(checkout, results)
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path)
    parser.add_argument("results")
    args = parser.parse_args()
    total = up_to_date(args.checkout, args.results)
    assert not planned(args.checkout, args.results), "the results folder still plans jobs"
    print(f"edit\tplanned (of {total})\tcompute jobs\tby rule", flush=True)
    for name in EDITS:
        jobs = measure(args.checkout, args.results, name)
        compute = sum(n for rule, n in jobs.items() if TRAINING.search(rule))
        print(f"{name}\t{sum(jobs.values())}\t{compute}\t{dict(sorted(jobs.items()))}", flush=True)


if __name__ == "__main__":
    main()
