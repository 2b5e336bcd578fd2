"""FedSC's DP tables name the delta their job was given (fedsc.tables.<table>.delta), not a copy in the code."""

import pytest

from fedrepro.pipeline import make_job
from fedrepro.report import fedsc as report
from tests.fedsc.test_report import _write_run


@pytest.mark.parametrize(("table", "delta", "label"), [("table3", 1e-3, "1e-3"), ("table5", 2.5e-5, "2.5e-05")])
def test_dp_table_caption_carries_the_configured_delta(tmp_path, table, delta, label):
    private = {"sigma": 0.05, "mu": 2.0, "shares": [3, 5]}
    cells = [{"path": _write_run(tmp_path / "eps3", {0: 0.5}, privacy=private), "row": "ε=3", "column": "digits"}]
    spec = {"table": table, "cells": cells, "scale": "quick", "decimals": 2, "delta": delta}
    report.probe_table(make_job(spec, {k: str(tmp_path / f"t.{k}") for k in ("md", "csv", "tex")}))
    title = (tmp_path / "t.md").read_text().split("\n")[0]
    assert f"FedSC {table.replace('table', 'Table ')}: FedSC under DP (δ = {label}" in title, title
    assert "1e-2" not in title and "1e-4" not in title
