"""The smoke test's own checks catch what they name (fast; no Snakemake run)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from tests.paperscale import test_smoke as smoke
from tests.rules import workflow_rules


@pytest.fixture(autouse=True)
def no_known_failures(monkeypatch):
    monkeypatch.setattr(smoke, "KNOWN", {})


def _run_folder(root, metrics, status="ok"):
    folder = root / "steffle" / "runs" / "credit" / "steffle" / "dp" / "s0"
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(metrics).to_parquet(folder / "metrics.parquet")
    (folder / "summary.json").write_text(json.dumps({"seeds": {"0": {"status": status, "status_reason": status}}}))


@pytest.mark.parametrize(
    "loss, status, caught",
    [
        ([0.5, 0.4, 0.3], "ok", False),
        ([0.5, np.inf, 0.3], "ok", True),
        ([0.5, 0.4, np.nan], "ok", True),
        ([0.5, 0.4, 0.3], "diverged", True),
    ],
)
def test_a_non_finite_loss_or_a_diverged_seed_fails_the_loss_check(tmp_path, monkeypatch, loss, status, caught):
    monkeypatch.setattr(smoke, "SELECTED", ["steffle"])
    _run_folder(
        tmp_path, {"seed": 0, "round": [1, 2, 3], "train_loss": loss, "test_loss": [np.nan, np.nan, 0.2]}, status
    )
    if caught:
        with pytest.raises(AssertionError, match="non-finite"):
            smoke.test_every_loss_is_finite({"results": tmp_path}, "steffle")
    else:
        smoke.test_every_loss_is_finite({"results": tmp_path}, "steffle")


def test_a_table_without_a_row_of_the_papers_table_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke, "SELECTED", ["fedal"])
    tables = tmp_path / "fedal" / "tables"
    tables.mkdir(parents=True)
    for published in sorted(smoke.PUBLISHED.glob("fedal_table*.csv")):
        pd.read_csv(published).to_csv(tables / f"{published.stem.removeprefix('fedal_')}.csv", index=False)
    smoke.test_every_table_has_the_rows_of_the_papers_table({"results": tmp_path}, "fedal")
    frame = pd.read_csv(tables / "table9.csv")  # a bracketed note after the row name is not another row
    frame["row"] = frame["row"] + " [realised PLD ε: CIFAR10 2/10 3.00]"
    frame.to_csv(tables / "table9.csv", index=False)
    smoke.test_every_table_has_the_rows_of_the_papers_table({"results": tmp_path}, "fedal")
    frame = pd.read_csv(tables / "table7.csv")
    frame[frame["row"] != "FedMD"].to_csv(tables / "table7.csv", index=False)
    with pytest.raises(AssertionError, match="FedMD"):
        smoke.test_every_table_has_the_rows_of_the_papers_table({"results": tmp_path}, "fedal")


def test_a_privacy_row_is_left_out_only_where_smoke_yaml_leaves_its_level_out(tmp_path, monkeypatch):
    """FedSC's Table 5 runs eps = 8 only (smoke.yaml): its eps = 3 row may be absent, its eps = 8 row may not."""
    monkeypatch.setattr(smoke, "SELECTED", ["fedsc"])
    tables = tmp_path / "fedsc" / "tables"
    tables.mkdir(parents=True)
    for published in sorted(smoke.PUBLISHED.glob("fedsc_table*.csv")):
        frame = pd.read_csv(published)
        frame = frame[
            ~frame["row"].isin(smoke.left_out_rows("fedsc", published.stem.removeprefix("fedsc_"), {*frame["row"]}))
        ]
        frame.to_csv(tables / f"{published.stem.removeprefix('fedsc_')}.csv", index=False)
    assert set(pd.read_csv(tables / "table5.csv")["row"]) == {"FedAvg+SC", "ε=8", "ε=∞"}
    assert set(pd.read_csv(tables / "table4.csv")["row"]) == {"FedAvg+SC", "ε=6", "ε=∞"}
    smoke.test_every_table_has_the_rows_of_the_papers_table({"results": tmp_path}, "fedsc")
    frame = pd.read_csv(tables / "table5.csv")
    frame[frame["row"] != "ε=8"].to_csv(tables / "table5.csv", index=False)
    with pytest.raises(AssertionError, match="ε=8"):
        smoke.test_every_table_has_the_rows_of_the_papers_table({"results": tmp_path}, "fedsc")


@pytest.mark.parametrize(
    "pending, failing",
    [
        ({}, set()),
        ({"fedal_train": 2, "fedal_table": 1, "index": 1, "all": 1}, {"fedal"}),
        ({"index": 1, "all": 1}, set(smoke.PAPERS)),
    ],
)
def test_a_job_left_to_run_fails_its_papers_output_check(monkeypatch, pending, failing):
    monkeypatch.setattr(smoke, "SELECTED", list(smoke.PAPERS))
    for paper in smoke.PAPERS:
        if paper in failing:
            with pytest.raises(AssertionError, match="still to run"):
                smoke.test_every_output_of_the_paper_target_exists({"log": ""}, pending, paper)
        else:
            smoke.test_every_output_of_the_paper_target_exists({"log": ""}, pending, paper)


# Rules that run package code and that the smoke run leaves out, each with the reason.
NOT_IN_SMOKE = {
    "fedsc_prefix": "smoke.yaml's FedSC runs 1 round, so no round comes before sharing and no run shares a prefix; "
    "tests/fedsc/test_prefix.py runs run_prefix and the runs resumed from it",
    "audit_full": "a fixed-size privacy audit (make audit), no paper-scale setting; `audit` runs its code at small n",
    "stage_pretrained": "the smoke run's Amazon uses the hash tokenizer and a small random encoder; "
    "tests/dpzv/test_bert.py stages a tiny BERT (pinned and custom) and runs the BERT text path",
    **dict.fromkeys(
        ("fedsc_standin_table", "fedsc_standin_claims", "fedsc_standin_samples", "fedsc_ablations_table"),
        "targets fedsc_standin and fedsc_ablations: FedSC's claims and ablations on the generated data sets "
        "`shapes` and `textures`, quick-scale targets with no paper-scale setting; their runs are "
        "fedsc_pretrain/fedsc_probe/fedsc_random_probe jobs (scheduled), their tables the probe_table and "
        "claims_table code of fedsc_table3 and fedsc_claims (scheduled), and tests/fedsc/test_report.py runs "
        "samples_figure and the ablation table",
    ),
}


# Rules generated in a loop (`rule: name: f"fedsc_{_table}"`), which a reading of the rule files' text misses.
GENERATED = {"fedsc_table2", "fedsc_table3", "fedsc_table4", "fedsc_table5"}


def test_the_smoke_run_schedules_every_rule_that_runs_package_code(tmp_path):
    """A rule added to the workflow (or left out of smoke.yaml's settings) must show up here. The rules are
    the workflow's as Snakemake parsed them under the smoke configuration (generated ones included)."""
    dry = smoke._snakemake(
        tmp_path / "results", tmp_path / "raw", *smoke.smoke_targets(smoke.PAPERS), "-n", "--quiet", "rules"
    )
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
    scheduled = set(re.findall(r"^(\w+)\s+\d+$", dry.stdout, re.M))
    rules = workflow_rules(
        smoke.CONFIGFILES, {"results": str(tmp_path / "results"), "data_root": str(tmp_path / "raw")}
    )
    running_code = {rule for rule, params in rules.items() if "entry" in params}
    assert GENERATED <= running_code, "the rule listing misses rules generated in a loop"
    assert NOT_IN_SMOKE.keys() <= running_code, "NOT_IN_SMOKE names a rule that no longer runs package code"
    assert running_code - NOT_IN_SMOKE.keys() - scheduled == set()
