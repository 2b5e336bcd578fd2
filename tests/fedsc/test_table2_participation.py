"""Table 2 honours `tables.table2.participation` (the smoke run lists partial only): no full-participation run of
a federated method is requested, and Centralized SC keeps its row in the paper's full-participation column."""

import copy

from fedrepro.algorithms.fedsc import METHODS
from fedrepro.experiments import fedsc as plan
from tests.fedsc.test_pipeline import _config


def _table2(participation=None):
    config = _config()
    if participation is not None:
        config = copy.deepcopy(config)
        config["fedsc"]["tables"]["table2"]["participation"] = participation
    return config, plan.table2_cells(config)


def test_both_participations_listed_are_the_default():
    assert _table2(["full", "partial"])[1] == _table2()[1]


def test_partial_only_requests_no_full_participation_run_but_keeps_centralized_sc():
    config, cells = _table2(["partial"])
    central = plan.row_name("centralized_sc")
    assert {c["row"] for c in cells} == {row.label for row in METHODS.values()} | {plan.RANDOM_ROW}
    assert {c["column"] for c in cells if c["row"] != central} == {"digits 2/10"}
    central_cells = [c for c in cells if c["row"] == central]
    assert central_cells and all(c["column"] == "digits 10/10" and "/central/" in c["path"] for c in central_cells)
    assert not any("/full" in c["path"] for c in cells)  # every federated run is a partial one
    claims = plan.claims(config)  # Table 2's claims follow its columns
    assert {c["column"] for c in claims if "(Table 2)" in c["claim"]} == {"digits 2/10"}


def test_full_only_has_no_partial_participation_cell():
    _, cells = _table2(["full"])
    assert {c["column"] for c in cells} == {"digits 10/10"}
