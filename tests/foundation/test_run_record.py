"""tools/run_record.py: a refactor's proof that it changed no number (a run's tables and summaries
as data, compared with a stored record)."""

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

SPEC = importlib.util.spec_from_file_location("run_record", Path(__file__).parents[2] / "tools" / "run_record.py")
run_record = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(run_record)


def fake_results(root: Path, accuracy: float = 0.91, seconds: float = 12.0, label: str = "FedAvg") -> Path:
    (root / "fedavg" / "tables").mkdir(parents=True)
    pd.DataFrame({"row": [label], "column": ["alpha=1"], "ours_mean": [accuracy], "seconds": [seconds]}).to_csv(
        root / "fedavg" / "tables" / "accuracy.csv", index=False
    )
    run = root / "fedavg" / "runs" / "digits" / "fedavg" / "a1" / "s0"
    run.mkdir(parents=True)
    summary = {"spec": {"lr": 0.1}, "seeds": {"0": {"final": {"test_acc": accuracy}, "seconds": seconds}}}
    (run / "summary.json").write_text(json.dumps(summary))
    return root


def test_the_same_numbers_agree_whatever_the_time_and_spec(tmp_path):
    a = run_record.record(fake_results(tmp_path / "a"))
    b = run_record.record(fake_results(tmp_path / "b", seconds=99.0))
    assert run_record.differences(a, b) == []
    assert a["fedavg/tables/accuracy.csv"] == {
        "0:row": "FedAvg",
        "0:column": "alpha=1",
        "FedAvg/alpha=1:ours_mean": 0.91,
    }


@pytest.mark.parametrize("change", [{"accuracy": 0.9100001}, {"label": "fedavg"}])
def test_a_changed_number_or_label_is_named_with_its_file_and_place(tmp_path, change):
    a = run_record.record(fake_results(tmp_path / "a"))
    b = run_record.record(fake_results(tmp_path / "b", **change))
    lines = run_record.differences(a, b)
    assert any(line.startswith("fedavg/tables/accuracy.csv") for line in lines)
    if "accuracy" in change:
        assert "fedavg/runs/digits/fedavg/a1/s0/summary.json: seeds.0.final.test_acc 0.91 != 0.9100001" in lines


def test_rows_with_the_same_text_columns_are_each_recorded(tmp_path):
    """A table whose text columns repeat (DPZV's privacy rows differ only in numbers) keeps every row:
    a change in the second row is named, not overwritten by the first."""
    tables = tmp_path / "dpzv" / "tables"
    tables.mkdir(parents=True)
    frame = pd.DataFrame({"method": ["VAFL", "VAFL"], "eps": [1.0, 10.0], "eps_known": [2.9, 35.2]})
    frame.to_csv(tables / "privacy.csv", index=False)
    before = run_record.record(tmp_path)
    assert before["dpzv/tables/privacy.csv"]["VAFL#2:eps_known"] == 35.2
    frame.loc[1, "eps_known"] = 35.3
    frame.to_csv(tables / "privacy.csv", index=False)
    assert run_record.differences(before, run_record.record(tmp_path)) == [
        "dpzv/tables/privacy.csv: VAFL#2:eps_known 35.2 != 35.3"
    ]


def test_the_store_of_finished_work_is_left_out(tmp_path):
    """Store entries sit under a hash of code and inputs (fedrepro.store): recorded, they would differ
    after any code edit although no number did."""
    results = fake_results(tmp_path)
    run = results / "fedavg" / "runs" / "digits" / "fedavg" / "a1" / "s0"
    entry = run / ".seeds" / "seed0" / "9baa99a4"
    entry.mkdir(parents=True)
    (entry / "summary.json").write_text((run / "summary.json").read_text())
    (entry / "state.json").write_text("{}")
    assert not [name for name in run_record.record(results) if ".seeds" in name]


def test_check_exits_nonzero_on_a_missing_file(tmp_path, capsys):
    results = fake_results(tmp_path / "a")
    stored = tmp_path / "record.json"
    stored.write_text(json.dumps(run_record.record(results)))
    assert run_record.main(["check", str(results), str(stored)]) == 0
    (results / "fedavg" / "tables" / "accuracy.csv").unlink()
    assert run_record.main(["check", str(results), str(stored)]) == 1
    assert "only in the second: fedavg/tables/accuracy.csv" in capsys.readouterr().out


def test_the_stored_default_run_record_holds_every_papers_tables_and_agrees_with_itself():
    stored = run_record.load(Path(__file__).parents[2] / "tools" / "records" / "default_run.json.gz")
    papers = {path.split("/")[0] for path in stored if "/tables/" in path}
    assert papers >= {"fedsc", "dpzv", "fedal", "steffle", "fedavg"}
    assert any(path.endswith("claims.csv") for path in stored)
    assert run_record.differences(stored, stored) == []
