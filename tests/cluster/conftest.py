"""Shared by the cluster and re-run tests: a private copy of the pipeline and one tiny
FedAvg slice run locally in it (the reference for the SLURM run, the base for re-runs)."""

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import limits
from tests.conftest import once_per_session, shared_folder

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
PIPELINE_FILES = ["config.yaml", "configs", "profiles", "workflow", "src"]
TIMED_OUT = 124  # the exit status of a run stopped at its time limit, as coreutils' timeout reports it


def snakemake(*args, cwd, snakefile, check=True, timeout=300, env=None):
    """Run Snakemake, for at most `timeout` idle-machine seconds (tests/limits.py): then SIGINT, because a
    hung run ignores SIGTERM (it would wait for its running jobs), and SIGKILL 10 s later; rc 124 as
    `timeout` gives. `env`: its environment (default this process's)."""
    command = [*SNAKEMAKE, "-s", str(snakefile), *args]
    try:
        result = limits.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=timeout, interrupt=signal.SIGINT, env=env
        )
    except subprocess.TimeoutExpired as error:
        result = subprocess.CompletedProcess(command, TIMED_OUT, error.stdout or "", error.stderr or "")
    if check and result.returncode != 0:
        pytest.fail(
            f"snakemake {' '.join(map(str, args))} failed (rc {result.returncode}):\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def planned_jobs(output: str) -> list[str]:
    """The jobs of a dry run as sorted 'rule: first output' strings ('rule' when it has none)."""
    jobs, rule = [], None
    for line in output.splitlines():
        start = re.match(r"^(?:local)?rule (\w+):$", line)
        if start:
            if rule:
                jobs.append(rule)
            rule = start.group(1)
        elif rule and line.startswith("    output: "):
            jobs.append(f"{rule}: {line.removeprefix('    output: ').split(', ')[0]}")
            rule = None
    if rule:
        jobs.append(rule)
    return sorted(jobs)


def tiny_config() -> dict:
    """The FedAvg slice: both alphas, 2 rounds, 1 seed; training asks for one GPU (so on
    SLURM it goes to the GPU partition; locally and on the CI cluster it runs on the CPU)."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["papers"] = ["fedavg"]
    config["fedavg"].update(seeds=[0], seeds_per_job=1)
    config["fedavg"]["methods"]["fedavg"]["rounds"] = 2
    config["resources"]["train"]["gpu"] = 1
    return config


def write_config(config: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def copy_pipeline(dest: Path) -> Path:
    """A private copy of the pipeline's files: tests may change file times there without
    touching the checkout others work in (the jobs still import the installed fedrepro)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in PIPELINE_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="session")
def local_slice(tmp_path_factory):
    """(folder, config file) of the tiny slice run locally in a copy of the pipeline: run once per test
    session, by the first xdist worker that asks (the re-run tests' and the SLURM test's run on two
    workers); the SLURM test only reads its outputs."""

    def run() -> list[str]:
        work = copy_pipeline(shared_folder(tmp_path_factory) / "local_slice")
        config = write_config(tiny_config(), work / "tiny.yaml")
        snakemake("-c2", "--configfile", config, cwd=work, snakefile=work / "workflow" / "Snakefile")
        return [str(work), str(config)]

    work, config = once_per_session(tmp_path_factory, "local_slice", run)
    return Path(work), Path(config)
