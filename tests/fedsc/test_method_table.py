"""The FedSC method table (`fedrepro.algorithms.fedsc.METHODS`) against the paper, the schema and the configs."""

from pathlib import Path

import yaml

from fedrepro.algorithms import Method, method_entry
from fedrepro.algorithms.fedsc import METHODS
from fedrepro.experiments import fedsc as plan
from fedrepro.plan import load_config
from fedrepro.report.tables import published

ROOT = Path(__file__).resolve().parents[2]


def test_rows_are_table2_in_the_papers_order_with_its_labels():
    table2 = published("fedsc_table2")
    assert [row.label for row in METHODS.values()] == list(dict.fromkeys(table2["row"]))
    assert all(isinstance(row, Method) for row in METHODS.values())
    # Tables 3-5 and Figure 2 spell the two compared methods without spaces
    assert {plan.short_name(plan.PROPOSED), plan.short_name(plan.NO_SHARING)} == {"FedSC", "FedAvg+SC"}
    assert set(published("fedsc_table3")["row"]) >= {plan.short_name(plan.NO_SHARING)}


def test_traits_select_the_runs_of_each_kind():
    assert {name for name, row in METHODS.items() if "private" in row.traits} == {"fedsc"}
    assert {name for name, row in METHODS.items() if "centralized" in row.traits} == {"centralized_sc"}
    assert {name for name, row in METHODS.items() if "sc" in row.traits} == {"fedsc", "fedavg_sc", "centralized_sc"}


def test_every_entry_is_a_job_function_of_its_module():
    for name in METHODS:
        function = method_entry("fedsc", name)
        assert callable(function) and function.__name__ == f"run_{name}"


def test_config_keys_match_the_schema_and_every_config_block():
    schema = yaml.safe_load((ROOT / "workflow/schemas/fedsc.schema.yaml").read_text())["properties"]["methods"]
    assert set(schema["properties"]) == set(METHODS)
    quick = yaml.safe_load((ROOT / "config.yaml").read_text())
    paper = load_config([str(ROOT / "config.yaml"), str(ROOT / "configs/paper.yaml")])
    for config in (quick, paper):
        for name, block in config["fedsc"]["methods"].items():
            assert set(block) <= set(METHODS[name].config_keys), name
    for name, row in METHODS.items():
        assert set(row.config_keys) <= set(schema["properties"][name]["properties"]), name
