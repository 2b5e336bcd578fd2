"""Checkpoint bytes written by one FedMD paper-scale run, before and after the wall-time policy (issue 16).

    .venv/bin/python benchmarks/checkpoint_bytes.py                    # 3 rounds on the CPU
    .venv/bin/python benchmarks/checkpoint_bytes.py --iterations 20

One FedMD training job at paper settings (config.yaml + configs/paper.yaml: Table VII's CIFAR-10 ResNet-18/34
pool, 15 clients, Adam state, batch 32) runs through Snakemake twice on generated CIFAR-10-format data
(tests/data/formats.py, random pixels: the state's size does not depend on the pixels); only the number of
iterations and the public set are cut, and the experiment runs FedMD alone:
  before: `checkpoint_minutes: null`: a checkpoint after every round (`checkpoint_every: 1`, FedMD's tau 1);
  after:  `checkpoint_minutes: 10` (configs/paper.yaml): at most one per 10 minutes, and the last round.
Both read what `fedrepro.fl.loop.run_rounds` logs ("N checkpoint(s), X MB written") and the seconds per round.
The whole run (Table VII's budget, 7000 iterations for the largest column) is extrapolated from the per-round
numbers: before = iterations x bytes per checkpoint; after = (floor(run time / 10 min) + 1) x bytes, for the
run time at this machine's seconds per iteration and at the H200's 4.4 s/iteration measured in issue 16.
Exact resume under either policy is tests/foundation/test_fl_loop.py's kill-and-resume tests.

Measured (2 CPU cores, issue 16): one checkpoint of this job is 2,862,710,380 bytes (15 models with
their Adam moments). A 7000-iteration run writes 7000 of them (20.0 TB) when checkpointing every round,
and 52 (149 GB, 135x fewer) by wall time at the H200's 4.4 s per iteration (8.6 h).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedrepro.data import sources  # noqa: E402
from tests.data.formats import make_cifar  # noqa: E402

WRITTEN = re.compile(r"(\d+) checkpoint\(s\), ([0-9.]+) MB written")
PER_ROUND = re.compile(r"rounds (\d+)-(\d+): ([0-9.]+) s per round")
PAPER_ITERATIONS = 7000  # Table VII's largest budget (configs/paper.yaml fedal.experiments.cifar)
H200_SECONDS_PER_ITERATION = 4.4  # FedMD, CIFAR-10 ResNet pool, one H200 (issue 16, checkpoint every round)


def _stage(data_root: Path, per_batch: int) -> Path:
    folder = data_root / "cifar10"
    folder.mkdir(parents=True, exist_ok=True)
    make_cifar(folder / sources.raw_files("cifar10")[0], 10, per_batch=per_batch, balanced=True, per_test=100)
    files = {name: {"md5": sources.file_digest(folder / name, "md5")} for name in sources.raw_files("cifar10")}
    overrides = data_root.parent / "checksums.json"
    overrides.write_text(json.dumps({"files": files}))
    return overrides


def _overrides(scratch: Path, iterations: int, public: int) -> Path:
    path = scratch / "fedmd.yaml"
    path.write_text(
        "device: cpu\n"
        "resources:\n  train: {gpu: 0, mem_mb: 8000, runtime: 60, threads: 2}\n"
        "fedal:\n  seeds: [0]\n  train: {evals: 1}\n"
        f"  experiments:\n    cifar: {{clients: [15], alphas: [1], public: [{public}], iterations: [{iterations}], "
        "methods: [fedmd]}\n"  # FedMD alone: the other methods' tau (5) would be the minimum budget
        "  outputs:\n    table7: {methods: [fedmd]}\n    fig9: {methods: [fedmd]}\n"
    )
    return path


def _run(label: str, scratch: Path, overrides: Path, env: dict, minutes: str, iterations: int, public: int) -> dict:
    results = scratch / f"results_{label}"
    setting = f"cifar_resnet-a1-c15-p{public}-i{iterations}"
    target = f"{results}/fedal/runs/cifar10/fedmd/{setting}/s0/summary.json"
    command = [
        str(Path(sys.executable).with_name("snakemake")),
        target,
        "-c2",
        "--nolock",
        "--config",
        f"results={results}",
        f"data_root={scratch / 'raw'}",
        f"checkpoint_minutes={minutes}",
        "--configfile",
        "config.yaml",
        "configs/paper.yaml",
        str(overrides),
    ]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    log = results / "logs" / "fedal" / "cifar10" / "fedmd" / setting / "s0.log"
    text = log.read_text() if log.exists() else ""
    written, per_round = WRITTEN.findall(text), PER_ROUND.findall(text)
    if done.returncode or not written or not per_round:
        raise SystemExit(
            f"{label}: the FedMD job failed or logged no checkpoint line (exit {done.returncode}); "
            f"{log}\n{done.stderr[-3000:]}\n{text[-3000:]}"
        )
    saves, megabytes = int(written[-1][0]), float(written[-1][1])
    return {
        "policy": label,
        "checkpoint_minutes": minutes,
        "rounds": iterations,
        "saves": saves,
        "bytes": megabytes * 1e6,
        "bytes_per_save": megabytes * 1e6 / saves,
        "seconds_per_round": float(per_round[-1][2]),
    }


def _whole_run(bytes_per_save: float, seconds_per_iteration: float) -> dict:
    hours = PAPER_ITERATIONS * seconds_per_iteration / 3600
    after_saves = math.floor(hours * 60 / 10) + 1  # every 10 minutes, and the last round
    return {
        "hours": hours,
        "before_GB": PAPER_ITERATIONS * bytes_per_save / 1e9,
        "after_GB": after_saves * bytes_per_save / 1e9,
        "after_saves": after_saves,
        "ratio": PAPER_ITERATIONS / after_saves,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3, help="FedMD iterations (= rounds, tau 1)")
    parser.add_argument("--public", type=int, default=100, help="public samples (Table VII: 1000)")
    parser.add_argument("--per-batch", type=int, default=100, help="generated CIFAR-10 images per training batch file")
    options = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="checkpoint_bytes_"))
    env = {
        **os.environ,
        sources.CHECKSUM_OVERRIDES_ENV: str(_stage(scratch / "raw", options.per_batch)),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
    }
    overrides = _overrides(scratch, options.iterations, options.public)
    rows = [
        _run(label, scratch, overrides, env, minutes, options.iterations, options.public)
        for label, minutes in (("before", "null"), ("after", "10"))
    ]
    for row in rows:
        print(
            f"{row['policy']:6s} checkpoint_minutes={row['checkpoint_minutes']:4s}: {row['rounds']} rounds, "
            f"{row['saves']} checkpoint(s), {row['bytes'] / 1e6:.1f} MB written "
            f"({row['bytes_per_save'] / 1e6:.1f} MB each), {row['seconds_per_round']:.2f} s per round"
        )
    before, after = rows
    print(f"this run: {before['bytes'] / after['bytes']:.1f}x fewer bytes after")
    size = before["bytes_per_save"]
    for where, seconds in (("this machine", after["seconds_per_round"]), ("one H200", H200_SECONDS_PER_ITERATION)):
        whole = _whole_run(size, seconds)
        print(
            f"whole run ({PAPER_ITERATIONS} iterations, {whole['hours']:.1f} h on {where}): before "
            f"{whole['before_GB']:.1f} GB in {PAPER_ITERATIONS} checkpoints, after {whole['after_GB']:.2f} GB in "
            f"{whole['after_saves']}: {whole['ratio']:.0f}x fewer"
        )
    print(f"scratch: {scratch}")


if __name__ == "__main__":
    main()
