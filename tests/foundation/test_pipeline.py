"""The Snakemake pipeline itself: lint, paper-scale DAG, a tiny end-to-end run, a precise re-run.

The no-op re-run and the report-option re-run are tests/cluster/test_reruns.py's (exact job lists on
the slice it shares with the SLURM test); this file keeps the learning-rate case on its own run.
"""

import re
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests import limits

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
pytestmark = pytest.mark.pipeline


def snakemake(*args, cwd=ROOT, check=True):
    result = limits.run(
        [*SNAKEMAKE, "-s", str(ROOT / "workflow" / "Snakefile"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check and result.returncode != 0:
        pytest.fail(f"snakemake {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def scheduled_rules(output: str) -> dict[str, int]:
    """Rule -> job count of a dry run, read from its job-stats table."""
    table = output.split("Job stats:")[-1]
    counts = re.findall(r"^(\w+)\s+(\d+)\s*$", table, flags=re.MULTILINE)
    return {rule: int(n) for rule, n in counts if rule != "total"}


def test_lint_is_clean():
    result = snakemake("--lint", "--configfile", str(ROOT / "config.yaml"))
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr


def test_paper_scale_dag_builds(paper_dry_run):
    """tests/conftest.paper_dry_run: config.yaml + configs/paper.yaml, every paper (shared with the
    SLURM, cost-planner and BERT-staging tests)."""
    assert paper_dry_run["rc"] == 0, (paper_dry_run["stdout"] + paper_dry_run["stderr"])[-3000:]
    rules = scheduled_rules(paper_dry_run["stdout"])
    assert {"fedavg_train", "fedsc_pretrain", "dpzv_train", "fedal_train"} <= set(rules)
    assert any(rule.startswith("steffle_train_") for rule in rules)  # one rule per SteFFLe training job


def test_bad_config_fails_before_any_job_and_names_the_key(tmp_path):
    result = snakemake("-n", "--configfile", str(ROOT / "config.yaml"), "--config", "device=tpu", check=False)
    assert result.returncode != 0
    assert "config key 'device'" in result.stdout + result.stderr
    assert "Job stats" not in result.stdout


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The FedAvg slice with 3 rounds, run for real in a scratch working directory."""
    work = tmp_path_factory.mktemp("pipeline")
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["papers"] = ["fedavg"]
    config["fedavg"]["methods"]["fedavg"]["rounds"] = 3
    override = work / "tiny.yaml"
    override.write_text(yaml.safe_dump(config))
    snakemake("-c2", "--configfile", str(override), cwd=work)
    return work, override, config


def test_tiny_run_builds_the_table_the_figure_and_resumable_runs(tiny_run):
    work, _, config = tiny_run
    results = work / "results"
    for name in (
        "tables/accuracy.md",
        "tables/accuracy.csv",
        "tables/accuracy.tex",
        "figures/accuracy.png",
        "figures/accuracy.pdf",
    ):
        assert (results / "fedavg" / name).stat().st_size > 0, name
    metrics = pd.read_parquet(next(results.glob("fedavg/runs/digits/fedavg/a0.3/*/metrics.parquet")))
    assert sorted(metrics["seed"].unique()) == config["fedavg"]["seeds"]
    assert metrics.groupby("seed")["round"].max().tolist() == [3, 3]
    table = pd.read_csv(results / "fedavg/tables/accuracy.csv")
    assert set(table["column"]) == {"alpha=0.3", "alpha=100"} and (table["seeds"] == 2).all()
    assert "NOT the paper's setting" in (results / "fedavg/tables/accuracy.md").read_text()
    assert (results / "index.md").exists()


def test_changing_one_setting_reruns_only_its_jobs_and_reports(tiny_run):
    work, override, config = tiny_run
    changed = yaml.safe_load(override.read_text())
    changed["fedavg"]["methods"]["fedavg"]["lr"] = 0.02
    path = work / "changed.yaml"
    path.write_text(yaml.safe_dump(changed))
    rules = scheduled_rules(snakemake("-n", "--configfile", str(path), cwd=work).stdout)
    assert rules == {"fedavg_train": 2, "fedavg_accuracy_table": 1, "fedavg_accuracy_figure": 1, "index": 1, "all": 1}


def test_html_report_builds_with_captions(tiny_run):
    work, override, _ = tiny_run
    snakemake("--configfile", str(override), "--report", str(work / "report.html"), cwd=work)
    assert (work / "report.html").stat().st_size > 10_000


def test_the_catalog_test_configuration_builds_the_fedavg_chain_from_its_own_folder():
    """`snakemake -d .test` (the workflow catalog's convention) reads the root config.yaml and then
    .test/config.yaml's overrides, and plans the FedAvg chain only."""
    rules = set(snakemake("--rulegraph", "-d", str(ROOT / ".test")).stdout.split('label = "')[1:])
    rules = {rule.split('"')[0] for rule in rules}
    assert {"prepare", "partition", "fedavg_train", "fedavg_accuracy_table"} <= rules
    assert not [rule for rule in rules if rule.startswith(("fedsc", "dpzv", "fedal", "steffle"))]
