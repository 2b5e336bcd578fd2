"""The SLURM profile on a real one-node SLURM cluster (.ci/slurm.sh).

The tiny FedAvg slice goes through `--profile profiles/slurm --profile profiles/slurm-ci`:
every job must be submitted with sbatch to its partition (training, which asks for a GPU, to
the GPU partition; data and reports, grouped, to the CPU partition), the results must equal a
local run, and a job that fails must end the run with an error instead of a hang. The cluster
tests skip, saying why, where SLURM cannot be installed (not root, no apt-get). The profile
tests at the top need no cluster.
"""

import os
import re
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from tests import limits
from tests.conftest import SLURM_PROFILES as PROFILES

from .conftest import ROOT, snakemake, tiny_config, write_config

pytestmark = pytest.mark.pipeline

SCRIPT = ROOT / ".ci/slurm.sh"
# idle-machine seconds (tests/limits.py): the slice took 185-217 s of wall time on 2 cores under load 12, over 420 s on
# 2026-11-26 (load 11-13), and hit a 600 s wall-clock limit at a load of 15-20; only a hang reaches this one
RUN_LIMIT = 600


def job_resources(dry_run: str) -> list[tuple[str, str]]:
    """(rule, resources line) of every job a dry run lists (jobs inside a group job are indented)."""
    return re.findall(r"rule (\w+):\n(?:\s+\w+: .*\n)*?\s+resources: (.*)", dry_run)


def test_profile_groups_name_existing_short_rules(paper_dry_run):
    """Every grouped rule is planned at paper scale (rules generated in a loop, like fedsc_table2-5, have
    no `rule name:` line to read) and none of its jobs holds a GPU."""
    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    jobs = job_resources(paper_dry_run["stdout"])
    for rule, group in profile["groups"].items():
        resources = [line for name, line in jobs if name == rule]
        assert resources, f"profiles/slurm groups: rule {rule!r} does not exist (no job of it at paper scale)"
        assert all("gpu=0" in line for line in resources), f"{rule} holds a GPU: do not group it"
        assert group in profile["group-components"], f"group {group!r} has no group-components"


def test_paper_scale_dry_run_routes_training_to_the_gpu_partition(paper_dry_run):
    """No cluster needed: the profiles parse, and a paper-scale dry run (tests/conftest.paper_dry_run,
    through both SLURM profiles) shows each job's resources as they would go to sbatch, with the short
    jobs in group jobs."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    assert paper_dry_run["rc"] == 0, (paper_dry_run["stdout"] + paper_dry_run["stderr"])[-3000:]
    stdout = paper_dry_run["stdout"]
    blocks = job_resources(stdout)
    cluster = config["cluster"]
    for rule, resources in blocks:
        if rule.endswith("_train"):
            assert f"gpu=1, slurm_partition={cluster['gpu_partition']}" in resources, rule
        elif rule in ("prepare", "partition"):
            assert f"gpu=0, slurm_partition={cluster['cpu_partition']}" in resources, rule
    assert any(rule.endswith("_train") for rule, _ in blocks)
    assert "Group job data" in stdout and "Group job reports" in stdout


def partitions_up(names) -> bool:
    if shutil.which("sinfo") is None:
        return False
    result = limits.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, timeout=20)
    return result.returncode == 0 and set(names) <= set(result.stdout.split())


@pytest.fixture(scope="session")
def slurm_cluster():
    """The CPU and GPU partition names of a running cluster. Started here (and stopped at the
    end of the test session) unless one with these partitions already answers; left running
    during the session, because with the SLURM client installed and no controller every
    Snakemake start waits about 10 s for `scontrol show config`."""
    cluster = yaml.safe_load((ROOT / "config.yaml").read_text())["cluster"]
    names = (cluster["cpu_partition"], cluster["gpu_partition"])
    started = not partitions_up(names)
    if started:
        env = {"SLURM_CPU_PARTITION": names[0], "SLURM_GPU_PARTITION": names[1]}
        result = limits.run(
            ["bash", SCRIPT, "start"], capture_output=True, text=True, timeout=600, env={**os.environ, **env}
        )
        if result.returncode not in (0, 3):
            stop_cluster()  # leave no half-started cluster behind
        if result.returncode == 3:
            pytest.skip(f"no SLURM cluster for this test: {result.stderr.strip()}")
        assert result.returncode == 0, f".ci/slurm.sh failed:\n{result.stdout}\n{result.stderr}"
    yield names
    if started:
        stop_cluster()


def stop_cluster():
    limits.run(["bash", SCRIPT, "stop"], capture_output=True, timeout=120)


def slurm_jobs(run_id: str) -> list[dict]:
    """SLURM's record of the jobs a Snakemake run submitted (their job name is its run id).
    There is no accounting database: finished jobs stay with the controller (MinJobAge)."""
    result = limits.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True, timeout=30, check=True)
    jobs = [dict(re.findall(r"(\w+)=(\S*)", line)) for line in result.stdout.splitlines()]
    return [job for job in jobs if job.get("JobName") == run_id]


def run_on_slurm(work: Path, config: Path, limit: int):
    start = time.monotonic()
    result = snakemake(
        "--configfile",
        config,
        *PROFILES,
        cwd=work,
        snakefile=ROOT / "workflow" / "Snakefile",
        check=False,
        timeout=limit,
    )
    output = result.stdout + result.stderr
    run_id = re.search(r"SLURM run ID: (\S+)", output)
    jobs = slurm_jobs(run_id.group(1)) if run_id else []
    return SimpleNamespace(rc=result.returncode, output=output, jobs=jobs, seconds=time.monotonic() - start)


@pytest.fixture(scope="module")
def slurm_slice(slurm_cluster, tmp_path_factory):
    work = tmp_path_factory.mktemp("slurm_slice")
    config = write_config(tiny_config(), work / "tiny.yaml")
    run = run_on_slurm(work, config, RUN_LIMIT)
    print(
        f"SLURM slice: {run.seconds:.0f} s, jobs "
        f"{[(job['JobId'], job['Partition'], job['Comment']) for job in run.jobs]}"
    )
    assert run.rc == 0, f"the SLURM run failed (rc {run.rc}, 124: timed out):\n{run.output[-4000:]}"
    return SimpleNamespace(work=work, partitions=slurm_cluster, **vars(run))


def test_every_job_went_through_sbatch_to_its_partition(slurm_slice):
    cpu, gpu = slurm_slice.partitions
    jobs = slurm_slice.jobs
    train = [job for job in jobs if job["Comment"].startswith("rule_fedavg_train")]
    others = [job for job in jobs if job not in train]
    assert len(train) == 2, "one SLURM job per training run"
    assert all(job["Partition"] == gpu and job.get("TresPerJob") == "gres:gpu:1" for job in train)
    # prepare + both partitions in one group job, the table and the figure in another
    assert len(others) == 2 and all(job["Partition"] == cpu for job in others)
    assert all("gpu" not in job.get("TresPerJob", "") for job in others)
    assert {job["JobState"] for job in jobs} == {"COMPLETED"}
    logs = slurm_slice.work / ".snakemake/slurm_logs"
    for job in jobs:
        assert list(logs.rglob(f"{job['JobId']}.log")), f"no plugin log of SLURM job {job['JobId']}"


def test_outputs_equal_a_local_run(slurm_slice, local_slice):
    local, _ = local_slice
    folder = slurm_slice.work / "results/fedavg/runs"
    # the jobs' outputs, not the copies the store of finished work keeps (`.seeds/`, fedrepro.fl.runner)
    runs = sorted(path for path in folder.rglob("metrics.parquet") if ".seeds" not in path.relative_to(folder).parts)
    assert len(runs) == 2
    for path in runs:
        relative = path.relative_to(slurm_slice.work)
        pd.testing.assert_frame_equal(pd.read_parquet(path), pd.read_parquet(local / relative))
    table = "results/fedavg/tables/accuracy.csv"
    pd.testing.assert_frame_equal(pd.read_csv(slurm_slice.work / table), pd.read_csv(local / table))


def test_a_failing_job_fails_the_run_instead_of_hanging(slurm_slice, tmp_path):
    """`device: cuda` on nodes without CUDA (the CI's stand-in GPUs) passes validation, since only
    the node can tell whether it has a GPU, and fails at run time in its SLURM job; Snakemake must
    notice through squeue and stop with an error well within the limit. (A model option the
    architecture does not take no longer reaches a job: the model/data fit check rejects it.)"""
    for folder in ("data", "partitions", ".fedrepro"):  # with the code record: only training is left to run
        shutil.copytree(slurm_slice.work / "results" / folder, tmp_path / "results" / folder)
    config = tiny_config()
    config["device"] = "cuda"
    limit = 240  # it took 73-77 s under load 12; a hang would run into the limit
    run = run_on_slurm(tmp_path, write_config(config, tmp_path / "broken.yaml"), limit)
    print(f"failing run: rc {run.rc}, {run.seconds:.0f} s")
    assert run.rc not in (0, 124, 137) and run.seconds < limit - 5, run.output[-3000:]
    assert re.search(r"SLURM-job '\d+' failed", run.output), run.output[-3000:]
    # The copied data and code record leave only the training jobs to run (no data group job first),
    # and the failing training job ran on the GPU partition.
    training = [job for job in run.jobs if "fedavg_train" in job.get("StdOut", "")]
    assert training and {job["Partition"] for job in training} == {slurm_slice.partitions[1]}, run.jobs
    assert not list((tmp_path / "results/fedavg").rglob("metrics.parquet"))
