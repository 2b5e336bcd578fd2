"""tools/privacy_epsilons.py: every printed epsilon of a results folder or of a stored run record.

The record route rebuilds the tables from a run record (`tools/run_record.py`), whose text keys are sorted
and whose repeated text rows are numbered; a fake results folder read both ways must give the same rows.
"""

import gzip
import importlib.util
import json
import math
from pathlib import Path

import pandas as pd
import pytest

TOOLS = Path(__file__).parents[2] / "tools"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = _load("privacy_epsilons")
run_record = _load("run_record")
RECORD = TOOLS / "records" / "default_run.json.gz"


def _steffle_table() -> pd.DataFrame:
    """SteFFLe's privacy table as the report writes it: Ling's two rows of one setting share every text
    cell (their eps labels are numbers), a non-private run has eps inf."""
    rows = [
        ("steffle", "dp_N3_h0", 1.0, 0.985, 7.56, "the server and every other silo", "attribute; P_S public"),
        ("steffle_sound", "dp_N3_h0", 1.0, 0.985, 0.985, "the server and every other silo", "attribute; P_S public"),
        ("ling2024", "dp_N3_h0", 1.0, 0.939, 0.939, "the server", "a whole record"),
        ("ling2024", "dp_N3_h0", 3.0, 2.72, 2.72, "the server", "a whole record"),
        ("fermi", "dp_central", math.inf, math.inf, math.inf, "anyone", "none (not private)"),
    ]
    columns = ["method", "setting", "eps", "paper_accounting_pld", "bound_for_what_is_sent", "adversary"]
    table = pd.DataFrame([r[:6] for r in rows], columns=columns)
    return table.assign(dataset="credit", privacy_unit=[r[6] for r in rows], why="text", private="yes")


def _fedsc_table() -> pd.DataFrame:
    return pd.DataFrame(
        {"dataset": ["digits"] * 2, "run": ["full_eps3", "partial_eps3"], "label ε": [3.0, 3.0]}
        | {"eps_paper_max": [2.04, 9.81], "eps_pld_max": [1.91, 12.8]}
    )


def _dpzv_summary(sigma: float, eps: float) -> dict:
    privacy = {"sigma": sigma, "eps": eps, "eps_pld": 1.03 * eps, "eps_known_pooled": 6.46 * eps}
    privacy |= {"eps_known_one_client": 2.89 * eps, "eps_sent_one_client": 598.0 * eps}
    return {"seeds": {"0": {"privacy": privacy, "final": {"test_acc": 0.5}}}}


def _results(root: Path) -> Path:
    """A results folder with the three privacy tables and DPZV's per-cell run summaries."""
    for paper, name, table in (
        ("steffle", "privacy.csv", _steffle_table()),
        ("fedsc", "privacy_realised.csv", _fedsc_table()),
    ):
        (root / paper / "tables").mkdir(parents=True)
        table.to_csv(root / paper / "tables" / name, index=False)
    for method, cell, sigma, eps in (
        ("dpzv", "eps1-C10", 1.25, 1.0),
        ("vafl", "eps1", 4.0, 1.0),
        ("vafl", "epsinf", 0.0, math.inf),
    ):
        folder = root / "dpzv" / "runs" / "digits" / method / "cells" / "s0_1_2" / ".checkpoint" / cell
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(_dpzv_summary(sigma, eps)).replace("Infinity", '"inf"'))
    return root


def test_baseline_bound_prints_the_sent_bound_with_the_fixed_model_one_beside():
    assert tool._baseline_bound("VAFL", 2.89, 598.0).startswith("598 (client trains on its raw features")
    assert tool._baseline_bound("VAFL", 2.89, 598.0).endswith("fixed client model 2.89)")
    older = tool._baseline_bound("ZOO-VFL", 2.89, float("nan"))  # a run from before eps_sent_one_client
    assert older.startswith("2.89 known batch") and older.endswith(": inf")


def test_dpzv_reads_the_pooled_bound_for_dpzv_and_the_sent_bound_for_the_baselines():
    summaries = {
        "dpzv/runs/digits/dpzv/c/s0/.checkpoint/eps1-C10/summary.json": _flat(_dpzv_summary(1.25, 1.0)),
        "dpzv/runs/digits/vafl/c/s0/.checkpoint/eps1/summary.json": _flat(_dpzv_summary(4.0, 1.0)),
    }
    rows = tool.dpzv(tool._dpzv_from_summaries(summaries)).set_index("mechanism")
    assert rows.loc["DPZV", "bound_for_what_is_sent"] == "6.46 known batch; label channel inf"
    assert rows.loc["DPZV", "label"] == "C = 10.0" and rows.loc["VAFL", "label"] == ""
    assert rows.loc["VAFL", "bound_for_what_is_sent"].startswith("598 (")
    assert rows.loc["VAFL", "paper_accounting"] == pytest.approx(1.03)


def _flat(summary: dict) -> dict:
    """A summary's leaves as the record keeps them ('seeds.0.privacy.sigma')."""
    return dict(run_record._leaves(summary))


def test_dpzv_cell_names_the_data_set_method_and_cell_of_a_per_cell_summary():
    path = "dpzv/runs/digits/vafl/eps0.1+eps1/s0_1_2/.checkpoint/eps1/summary.json"
    assert tool._dpzv_cell(path) == ("digits", "vafl", "eps1")
    assert tool._dpzv_cell("dpzv/runs/digits/vafl/eps1/s0_1_2/metrics.parquet") is None
    assert tool._dpzv_cell("fedsc/runs/digits/fedsc/full/s0/summary.json") is None


def test_dpzv_from_summaries_keeps_only_private_cells_with_their_clip(tmp_path):
    empty = tool._dpzv_from_summaries({})
    assert empty.empty and list(empty.columns) == tool.DPZV_SUMMARY_COLUMNS
    table = tool._dpzv_from_summaries(run_record.record(_results(tmp_path)))
    assert list(table["label"]) == ["DPZV", "VAFL"]  # the eps = inf cell (sigma 0) is not private
    assert table["clip"].iloc[0] == 10.0 and math.isnan(table["clip"].iloc[1])
    assert table["eps_known_pooled"].iloc[0] == pytest.approx(6.46)
    assert table["eps_pld_sound"].iloc[0] == math.inf and math.isnan(table["eps_pld_sound"].iloc[1])


def test_fedsc_reads_the_realised_shares():
    rows = tool.fedsc(_fedsc_table())
    assert list(rows["paper_accounting"]) == [2.04, 9.81]
    from fedrepro.privacy.fedsc import SERVER_EPSILON, SERVER_REASON

    # the weights cross in clear: no finite bound against the server; the realised shares' bound beside it
    sent = rows["bound_for_what_is_sent"].iloc[1]
    assert sent == f"{SERVER_EPSILON} ({SERVER_REASON}); matrices alone: 12.8 (tight PLD of the realised shares)"
    assert sent.startswith("inf (")


def test_steffle_keeps_the_private_runs_with_their_unit():
    rows = tool.steffle(_steffle_table())
    assert list(rows["mechanism"]) == ["steffle", "steffle_sound", "ling2024", "ling2024"]
    assert list(rows["bound_for_what_is_sent"]) == ["7.56", "0.985", "0.939", "2.72"]
    assert rows["unit"].iloc[0] == "attribute; P_S public"


def test_rebuilt_gives_every_row_its_numbers_even_when_text_cells_repeat(tmp_path):
    values = run_record.record(_results(tmp_path))["steffle/tables/privacy.csv"]
    table = tool._rebuilt(values)
    ling = table[table["method"] == "ling2024"]
    assert list(ling["eps"]) == [1.0, 3.0] and list(ling["bound_for_what_is_sent"]) == [0.939, 2.72]
    assert table["paper_accounting_pld"].notna().all()


def test_a_results_folder_and_its_run_record_give_the_same_epsilons(tmp_path):
    results = _results(tmp_path / "results")
    path = tmp_path / "record.json.gz"
    with gzip.open(path, "wt") as stream:
        json.dump(run_record.record(results), stream, sort_keys=True)
    from_folder, from_record = tool.epsilons(results), tool.epsilons_of_record(path)
    assert set(from_folder["paper"]) == {"SteFFLe", "FedSC"}  # this folder has no DPZV privacy table
    assert set(from_record["paper"]) == {"SteFFLe", "FedSC", "DPZV"}  # the record reads DPZV's summaries
    assert list(from_folder.columns) == tool.COLUMNS == list(from_record.columns)
    shared = from_record[from_record["paper"] != "DPZV"].reset_index(drop=True)
    pd.testing.assert_frame_equal(from_folder.astype(str), shared.astype(str))


def test_epsilons_of_an_empty_folder_is_an_empty_table(tmp_path):
    assert tool.epsilons(tmp_path).empty and list(tool.epsilons(tmp_path).columns) == tool.COLUMNS


def test_the_stored_default_run_record_gives_every_private_mechanism_a_number():
    table = tool.epsilons_of_record(RECORD)
    assert {"DPZV", "FedSC", "SteFFLe"} <= set(table["paper"])
    steffle = table[table["paper"] == "SteFFLe"]
    assert steffle["paper_accounting"].notna().all()  # Ling's rows share their text cells: matched by order
    assert (steffle["bound_for_what_is_sent"].str.lower() != "nan").all()


def test_main_prints_a_markdown_table_of_a_record_or_a_folder(tmp_path):
    text = tool.main([str(_results(tmp_path))])
    assert text.splitlines()[0].startswith("| paper") and "steffle_sound" in text
    assert "| DPZV" in tool.main([str(RECORD)])
