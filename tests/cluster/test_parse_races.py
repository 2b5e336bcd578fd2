"""A parse of the workflow with other code while a job runs (issue 41): checkouts A and B share one results
folder; B's code differs in one module the job runs. A's training job is paused (SIGSTOP) once it has started
(its code recorded, its scratch claimed), B parses the workflow (a dry run, which rewrites the shared code
fingerprints), A's job resumes and finishes its training. Then A's job must fail without outputs (its results
are not B's code's), B must plan the job again, and B's forced run must reuse nothing A stored: FedAvg's seeds
(the seed store of fl.runner) and SteFFLe's (eps, lambda) cells (its cell store). Before, A's job finished
(rc 0) and B reused A's seeds, or all of A's cells, as its own.

Each checkout's jobs import its own source (PYTHONPATH); the time limits only guard against a hang
(tests/limits.py: idle-machine seconds)."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from tests import limits

from .conftest import SNAKEMAKE, copy_pipeline, planned_jobs, snakemake, tiny_config, write_config

pytestmark = pytest.mark.pipeline
GUARD = 600  # idle-machine seconds any one step may take before it counts as hung


def checkouts(tmp_path, module: str, old: str, new: str):
    """Checkouts A and B of the pipeline; B's `module` (a path under src/fedrepro) has `old` replaced by `new`."""
    a, b = copy_pipeline(tmp_path / "a"), copy_pipeline(tmp_path / "b")
    path = b / "src" / "fedrepro" / module
    assert old in path.read_text(), f"{module} no longer holds {old!r}: pick another edit"
    path.write_text(path.read_text().replace(old, new))
    return a, b


def env_of(checkout: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(checkout / "src"), "FEDREPRO_STRICT_IMPORTS": "1"}


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def job_process(snakemake_pid: int) -> int:
    """The process of the job Snakemake runs (its script, .snakemake/scripts/tmp*.entry.py)."""
    for pid in descendants(snakemake_pid):
        try:
            if b"entry.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    pytest.fail("no job process under the running Snakemake")


def wait_for(condition, process: subprocess.Popen, what: str) -> None:
    """Poll `condition` every 50 ms while `process` (Snakemake) runs; a hang past GUARD fails."""
    clock, polls = limits.LoadClock(process.pid), 0
    while not condition():
        if process.poll() is not None and not condition():
            pytest.fail(f"Snakemake ended (rc {process.returncode}) before {what}")
        polls += 1
        if polls % 40 == 0 and clock.elapsed() > GUARD:
            process.send_signal(signal.SIGINT)
            pytest.fail(f"no {what} within {GUARD} idle-machine seconds")
        time.sleep(0.05)


def race(a: Path, b: Path, config: dict, target: str, claimed: Path) -> tuple[int, str, str]:
    """A runs `target`; paused once `claimed` (the job's scratch marker) exists, B parses; A resumes.
    Returns A's exit status, A's output and B's dry run's stderr."""
    config_a, config_b = write_config(config, a / "race.yaml"), write_config(config, b / "race.yaml")
    log = a / "a.log"
    with open(log, "w") as stream:
        run = subprocess.Popen(
            [*SNAKEMAKE, "-s", str(a / "workflow" / "Snakefile"), target, "-c1", "--configfile", str(config_a)],
            cwd=a,
            env=env_of(a),
            stdout=stream,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(claimed.exists, run, f"job started ({claimed})")
        job = job_process(run.pid)
        os.kill(job, signal.SIGSTOP)
        try:
            parse = snakemake(
                target, "-n", "--configfile", config_b, cwd=b, snakefile=b / "workflow" / "Snakefile", env=env_of(b)
            )
        finally:
            os.kill(job, signal.SIGCONT)
        wait_for(lambda: run.poll() is not None, run, "A's run ended")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    return run.returncode, log.read_text(), parse.stderr


def b_replans_and_reuses_nothing(b: Path, config: dict, target: str) -> str:
    """B's dry run plans the job again; B's forced run trains it; returns B's job log."""
    config_b = b / "race.yaml"
    dry = snakemake(
        target, "-n", "--configfile", config_b, cwd=b, snakefile=b / "workflow" / "Snakefile", env=env_of(b)
    )
    assert any(job.endswith(target) for job in planned_jobs(dry.stdout)), dry.stdout[-2000:]
    snakemake(
        target, "-f", "-c1", "--configfile", config_b, cwd=b, snakefile=b / "workflow" / "Snakefile", env=env_of(b)
    )
    return dry.stdout


def test_a_parse_with_other_code_during_a_fedavg_job_leaves_no_seed_to_reuse(tmp_path):
    a, b = checkouts(tmp_path, "eval/classify.py", "correct / len(y)", "correct / (len(y) + 1)")
    config = tiny_config()
    config["results"] = str(tmp_path / "shared")
    config["fedavg"].update(seeds=[0, 1], seeds_per_job=2)
    config["fedavg"]["partition"]["alphas"] = [0.3]
    config["fedavg"]["methods"]["fedavg"]["rounds"] = 10
    run = Path(config["results"]) / "fedavg/runs/digits/fedavg/a0.3/s0_1"
    target = str(run / "metrics.parquet")
    rc, out, parse = race(a, b, config, target, run / ".checkpoint" / "fingerprint.json")
    assert "fedrepro: code changed since the fingerprints" in parse and "fedrepro.eval.classify" in parse
    job_log = (Path(config["results"]) / "logs/fedavg/digits/fedavg/a0.3/s0_1.log").read_text()
    assert rc != 0 and "changed while this job ran" in job_log, out[-3000:]
    assert not (run / "metrics.parquet").exists()
    b_replans_and_reuses_nothing(b, config, target)
    job_log = (Path(config["results"]) / "logs/fedavg/digits/fedavg/a0.3/s0_1.log").read_text()
    assert "already finished, reusing" not in job_log.split("changed while this job ran")[-1]
    ours = pd.read_parquet(run / "metrics.parquet")
    for seed in (0, 1):  # A's seed entries stay, under A's key, beside B's
        entries = sorted((run.parent / ".seeds" / f"seed{seed}").iterdir())
        assert len(entries) == 2
        accuracies = {pd.read_parquet(e / "metrics.parquet")["test_acc"].dropna().iloc[-1] for e in entries}
        assert len(accuracies) == 2  # A's numbers and B's
        assert ours[ours.seed == seed]["test_acc"].dropna().iloc[-1] in accuracies


def steffle_config(results: Path) -> dict:
    """One SteFFLe training job: SteFFLe on credit, 3 silos at h = 0, eps {1, 3} x lambda {0, 1, 2} (6 cells),
    seeds 0 and 1."""
    config = tiny_config()
    config.update(papers=["steffle"], results=str(results))
    section = config["steffle"]
    section.update(seeds=[0, 1], seeds_per_job=2, methods=["steffle"], lambdas=[0.0, 1.0, 2.0])
    for name, figure in section["figures"].items():
        figure["enabled"] = name == "fig1"
        if "methods" in figure:  # a figure's own method list must stay within steffle.methods
            figure["methods"], figure["hide"] = ["steffle"], []
    section["figures"]["fig1"]["h"] = [0.0]
    section["eta_w_check"]["enabled"] = False
    return config


def test_a_parse_with_other_code_during_a_steffle_job_leaves_no_cell_to_reuse(tmp_path):
    a, b = checkouts(tmp_path, "algorithms/steffle/jobs.py", "**{k: float(v[si, gi])", "**{k: float(v[si, gi]) + 1.0")
    config = steffle_config(tmp_path / "shared")
    run = Path(config["results"]) / "steffle/runs/credit/steffle/dp_N3_h0/s0_1"
    target = str(run / "metrics.parquet")
    rc, out, parse = race(a, b, config, target, run / ".checkpoint" / "fingerprint.json")
    assert "fedrepro.algorithms.steffle.jobs" in parse
    (job_log,) = (Path(config["results"]) / "logs/steffle/train").glob("*/s0_1.log")
    assert rc != 0 and "changed while this job ran" in job_log.read_text(), out[-3000:]
    assert not (run / "metrics.parquet").exists()
    b_replans_and_reuses_nothing(b, config, target)
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["cells_trained"], summary["cells_cached"]) == (6, 0)
    cells = sorted((run / ".cells").iterdir())
    assert len(cells) == 6 and all(len(list(cell.iterdir())) == 2 for cell in cells)  # A's and B's entries
