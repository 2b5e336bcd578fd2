"""Precise re-runs: after a change, a dry run plans exactly the jobs that depend on it.

The tiny FedAvg slice (2 rounds, 1 seed, both alphas) is run once for real in a private copy
of the pipeline (conftest.local_slice, shared with the SLURM test); every test then changes one
thing, asserts the job list of a dry run and undoes the change. tests/foundation/test_pipeline.py
covers the learning-rate case on its own run; these cover the no-op re-run, code edits (in the
copy), a single-alpha change and a report option, with exact outputs rather than rule counts.
"""

import os
import re
import shutil
from contextlib import contextmanager

import pytest
import yaml

from .conftest import copy_pipeline, planned_jobs, snakemake, write_config

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
    result = snakemake("-n", "--configfile", config, cwd=work, snakefile=work / "workflow" / "Snakefile")
    jobs = planned_jobs(result.stdout)
    print("planned:", jobs)  # shown with -s / -rA: the job lists of the closing note
    return jobs, result.stdout + result.stderr


BEHAVIOUR = "\n_EDITED = 1\n"  # a new statement: the module's code (not just its text) changes


@contextmanager
def edited(path, addition=BEHAVIOUR):
    """`path` gets `addition`, then is restored with its old time. Code inputs are
    fingerprints of the code without comments or docstrings (fedrepro.codedeps), refreshed
    whenever Snakemake parses the workflow; the restore makes them change back."""
    text, times = path.read_text(), path.stat()
    path.write_text(addition(text) if callable(addition) else text + addition)
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


def test_a_results_folder_copied_into_a_fresh_checkout_reruns_nothing(local_slice, tmp_path):
    """The code record (fingerprints) travels with the results; a clone renews the unchanged
    entry script's file time, which re-runs nothing (profiles/default drops Snakemake's own code trigger).
    It runs before the tests that edit and restore code in the slice: a restored module's fingerprint is
    rewritten after the outputs, which only Snakemake's own checksum records (not copied) forgive."""
    work, config = local_slice
    fresh = copy_pipeline(tmp_path / "clone")
    shutil.copytree(work / "results", fresh / "results")  # file times kept, as cp -a or rsync -a keep them
    (fresh / "workflow/scripts/entry.py").touch()
    jobs, output = dry_run(fresh, shutil.copy(config, fresh / "tiny.yaml"))
    assert jobs == [] and "Nothing to be done" in output


def test_a_checkout_with_other_code_never_accepts_a_shared_results_folders_numbers(local_slice, tmp_path):
    """Two checkouts share one results folder: the one whose training code differs re-plans training."""
    work, config = local_slice
    settings = yaml.safe_load(config.read_text())
    settings["results"] = str(tmp_path / "shared")
    shutil.copytree(work / "results", settings["results"])
    first, second = copy_pipeline(tmp_path / "first"), copy_pipeline(tmp_path / "second")
    assert dry_run(first, write_config(settings, first / "tiny.yaml"))[0] == []
    with edited(second / "src/fedrepro/algorithms/fedavg/fedavg.py"):
        jobs, _ = dry_run(second, write_config(settings, second / "tiny.yaml"))
    assert {job.split(":")[0] for job in jobs} >= {"fedavg_train", "fedavg_accuracy_table"}


def test_editing_the_paper_code_reruns_its_training_and_reports(local_slice):
    work, config = local_slice
    with edited(work / "src/fedrepro/algorithms/fedavg/fedavg.py"):
        jobs, output = dry_run(work, config)
    assert jobs == sorted([TRAIN_A03, TRAIN_A100, *REPORTS])
    assert "Updated input files" in output and "fedrepro.algorithms.fedavg.fedavg-run_job.code" in output
    assert re.search(
        r"fedrepro: code changed since the fingerprints in .* were written: fedrepro.algorithms.fedavg.fedavg\n",
        output,
    )


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
    with edited(work / "src/fedrepro/fl/loop.py"):
        jobs, _ = dry_run(work, config)
    assert jobs == sorted([TRAIN_A03, TRAIN_A100, *REPORTS])


def test_a_comment_or_docstring_edit_reruns_nothing(local_slice):
    work, config = local_slice

    def docstring_and_layout(text):
        return text.replace('"""', '"""Edited docstring. ', 1).replace("\n\n\n", "\n\n\n\n") + "# a comment\n"

    with edited(work / "src/fedrepro/fl/loop.py", docstring_and_layout):
        with edited(work / "src/fedrepro/algorithms/fedavg/fedavg.py", "\n\n# only a comment\n"):
            jobs, output = dry_run(work, config)
    assert jobs == [] and "Nothing to be done" in output


def test_editing_the_entry_script_reruns_every_job(local_slice):
    """workflow/scripts/entry.py runs in every job's process (a default dtype set there changes every
    number) and profiles/default drops Snakemake's own code trigger: its fingerprint line plans them all."""
    work, config = local_slice
    every = planned_jobs(
        snakemake("-n", "-F", "--configfile", config, cwd=work, snakefile=work / "workflow" / "Snakefile").stdout
    )
    with edited(work / "workflow/scripts/entry.py", "\nimport torch\ntorch.set_default_dtype(torch.float64)\n"):
        jobs, _ = dry_run(work, config)
    assert jobs == every and TRAIN_A03 in jobs and any(job.startswith("prepare:") for job in jobs)


def test_editing_the_store_reruns_nothing(local_slice):
    """fedrepro.store decides what a job reuses, not what it computes (codedeps.BOOKKEEPING): a message
    edit there plans no job (it planned every training job and report before)."""
    work, config = local_slice

    def message(text):
        assert "recomputing it" in text, "store.py no longer holds the message this test edits"
        return text.replace("recomputing it", "computing it again")

    with edited(work / "src/fedrepro/store.py", message):
        jobs, output = dry_run(work, config)
    assert jobs == [] and "Nothing to be done" in output


def test_editing_the_partition_code_rebuilds_partitions_and_everything_downstream(local_slice):
    work, config = local_slice
    with edited(work / "src/fedrepro/data/partition.py"):
        jobs, _ = dry_run(work, config)
    assert jobs == sorted(
        [
            "partition: results/partitions/digits/dirichlet-a0.3-c10-s0.npz",
            "partition: results/partitions/digits/dirichlet-a100-c10-s0.npz",
            TRAIN_A03,
            TRAIN_A100,
            *REPORTS,
        ]
    )


def test_editing_another_data_sets_builder_reprepares_nothing(local_slice):
    """digits' prepare job runs the image builders, not the synthetic generator (it did before:
    prepare.py imported every builder, so a synthetic.py edit re-prepared and re-trained digits)."""
    work, config = local_slice
    with edited(work / "src/fedrepro/data/synthetic.py"):
        jobs, output = dry_run(work, config)
    assert jobs == [] and "Nothing to be done" in output


def test_editing_the_image_builders_reprepares_digits_and_everything_downstream(local_slice):
    work, config = local_slice
    with edited(work / "src/fedrepro/data/images.py"):
        jobs, _ = dry_run(work, config)
    assert "prepare: results/data/digits/arrays.npz" in jobs
    assert TRAIN_A03 in jobs and TRAIN_A100 in jobs and set(REPORTS) <= set(jobs)


def test_editing_the_report_code_reruns_only_reports(local_slice):
    work, config = local_slice
    with edited(work / "src/fedrepro/report/fedavg.py"):
        jobs, _ = dry_run(work, config)
    assert jobs == sorted(REPORTS)


def test_changing_one_alpha_reruns_only_its_partition_run_and_reports(local_slice):
    work, config = local_slice
    path = changed_config(work, config, "alpha.yaml", lambda c: c["fedavg"]["partition"].update(alphas=[0.3, 50.0]))
    jobs, _ = dry_run(work, config=path)
    assert jobs == sorted(
        [
            "partition: results/partitions/digits/dirichlet-a50-c10-s0.npz",
            f"fedavg_train: {RUNS}/a50/s0/metrics.parquet",
            *REPORTS,
        ]
    )


def test_changing_a_report_option_reruns_only_reports(local_slice):
    work, config = local_slice
    path = changed_config(work, config, "decimals.yaml", lambda c: c["report"].update(decimals=4))
    jobs, _ = dry_run(work, config=path)
    assert jobs == REPORTS


def test_no_job_imported_a_module_it_does_not_declare(local_slice):
    """Every job of the slice (data, partition, training, reports, index) compared, after it
    ran, the fedrepro modules in sys.modules with its code inputs (run_snakemake_job)."""
    work, _ = local_slice
    logs = sorted((work / "results" / "logs").rglob("*.log"))
    assert len(logs) >= 7
    assert all("INFO entry fedrepro." in log.read_text() for log in logs)
    assert not [log for log in logs if "missing from its code inputs" in log.read_text()]


def test_adding_a_seed_runs_only_the_new_seed(local_slice, tmp_path, monkeypatch):
    """seeds [0] -> [0, 1] in one job (s0_1): seed 0 comes from the seed store of the s0 run,
    bit for bit, and only seed 1 trains; every job checks its imports strictly. It runs in a copy
    of the slice: the SLURM test compares its outputs with the slice's."""
    shared, _ = local_slice
    work = tmp_path / "slice"
    shutil.copytree(shared, work, symlinks=True)
    config = work / "tiny.yaml"
    monkeypatch.setenv("FEDREPRO_STRICT_IMPORTS", "1")
    path = changed_config(work, config, "two_seeds.yaml", lambda c: c["fedavg"].update(seeds=[0, 1], seeds_per_job=2))
    jobs, _ = dry_run(work, config=path)
    assert jobs == sorted(
        [f"fedavg_train: {RUNS}/a0.3/s0_1/metrics.parquet", f"fedavg_train: {RUNS}/a100/s0_1/metrics.parquet", *REPORTS]
    )
    snakemake("-c1", "--configfile", path, cwd=work, snakefile=work / "workflow" / "Snakefile")
    log = (work / "results/logs/fedavg/digits/fedavg/a0.3/s0_1.log").read_text()
    assert "seed 0 already finished" in log and "seed 1 already finished" not in log
    import pandas as pd

    old = pd.read_parquet(work / RUNS / "a0.3/s0/metrics.parquet")
    new = pd.read_parquet(work / RUNS / "a0.3/s0_1/metrics.parquet")
    pd.testing.assert_frame_equal(new[new.seed == 0].reset_index(drop=True), old)
    assert set(new.seed) == {0, 1}
