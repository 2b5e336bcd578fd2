"""Precise re-runs: after a change, a dry run plans exactly the jobs that depend on it.

The tiny FedAvg slice (2 rounds, 1 seed, both alphas) is run once for real in a private copy
of the pipeline (conftest.local_slice); every test then changes one thing, asserts the job
list of a dry run and undoes the change. tests/foundation/test_pipeline.py covers the
learning-rate and report-decimals cases on its own run; these add code edits (in the copy),
a single-alpha change, and exact outputs rather than rule counts.
"""

import os
from contextlib import contextmanager

import pytest
import yaml

from .conftest import planned_jobs, snakemake, write_config

pytestmark = pytest.mark.pipeline

RUNS = "results/fedavg/runs/digits/fedavg"
TRAIN_A03 = f"fedavg_train: {RUNS}/a0.3/s0/metrics.parquet"
TRAIN_A100 = f"fedavg_train: {RUNS}/a100/s0/metrics.parquet"
REPORTS = [
    "all",
    "fedavg_accuracy_figure: results/fedavg/figures/accuracy.png",
    "fedavg_accuracy_table: results/fedavg/tables/accuracy.md",
    "index: results/index.md",
]


def dry_run(work, config):
    result = snakemake("-n", "--configfile", config, cwd=work, snakefile=work / "Snakefile")
    jobs = planned_jobs(result.stdout)
    print("planned:", jobs)  # shown with -s / -rA: the job lists of the closing note
    return jobs, result.stdout + result.stderr


@contextmanager
def edited(path):
    """`path` gets a new line (and so a new checksum: Snakemake ignores a newer file time
    alone when the content is unchanged), then is restored with its old time."""
    text, times = path.read_text(), path.stat()
    path.write_text(text + "\n# an edit\n")
    try:
        yield
    finally:
        path.write_text(text)
        os.utime(path, (times.st_atime, times.st_mtime))


def changed_config(work, config, name, change):
    settings = yaml.safe_load(config.read_text())
    change(settings)
    return write_config(settings, work / name)


def test_no_op_rerun_plans_nothing(local_slice):
    work, config = local_slice
    jobs, output = dry_run(work, config)
    assert jobs == [] and "Nothing to be done" in output


def test_editing_the_paper_code_reruns_its_training_and_reports(local_slice):
    work, config = local_slice
    with edited(work / "src/fedrepro/algorithms/baselines/fedavg.py"):
        jobs, output = dry_run(work, config)
    assert jobs == sorted([TRAIN_A03, TRAIN_A100, *REPORTS])
    assert "Updated input files" in output and "fedavg.py" in output


def test_editing_another_papers_code_reruns_nothing(local_slice):
    work, config = local_slice
    other = sorted((work / "src/fedrepro/algorithms").glob("*/*.py"))
    other = [path for path in other if path.parent.name not in ("baselines", "__pycache__")]
    assert other, "no other paper's code to edit"
    with edited(other[0]):
        jobs, _ = dry_run(work, config)
    assert jobs == []


def test_editing_shared_federated_code_reruns_training_but_not_data(local_slice):
    work, config = local_slice
    with edited(work / "src/fedrepro/fl/runner.py"):
        jobs, _ = dry_run(work, config)
    assert jobs == sorted([TRAIN_A03, TRAIN_A100, *REPORTS])


def test_changing_one_alpha_reruns_only_its_partition_run_and_reports(local_slice):
    work, config = local_slice
    path = changed_config(work, config, "alpha.yaml",
                          lambda c: c["fedavg"]["partition"].update(alphas=[0.3, 50.0]))
    jobs, _ = dry_run(work, config=path)
    assert jobs == sorted([
        "partition: results/partitions/digits/dirichlet-a50-c10-s0.npz",
        f"fedavg_train: {RUNS}/a50/s0/metrics.parquet",
        *REPORTS,
    ])


def test_changing_a_report_option_reruns_only_reports(local_slice):
    work, config = local_slice
    path = changed_config(work, config, "decimals.yaml", lambda c: c["report"].update(decimals=4))
    jobs, _ = dry_run(work, config=path)
    assert jobs == REPORTS
