"""The SteFFLe method table (fedrepro.algorithms.steffle.METHODS) against the schema, the
config and its readers: the planner, the report and the jobs take groups and labels from it."""

import yaml

from fedrepro.algorithms import Method, method_table, methods
from fedrepro.algorithms.steffle import METHODS, jobs, with_trait, without_trait
from fedrepro.experiments import steffle as plan
from fedrepro.report import steffle as report

from .helpers import ROOT, pipeline_config

SCHEMA = yaml.safe_load((ROOT / "workflow/schemas/steffle.schema.yaml").read_text())


def test_rows_are_methods_with_one_setting_and_a_runnable_entry():
    assert method_table("steffle") is METHODS
    assert all(isinstance(row, Method) for row in METHODS.values())
    for name, row in METHODS.items():
        assert len(row.traits & {"federated", "central"}) == 1, name
        assert row.traits <= {"sgda", "federated", "central", "private", "fair"}, name
    entries = methods("steffle")
    assert set(entries) == set(METHODS)
    for name, entry in entries.items():
        module = jobs.method_module(name)
        assert entry == f"{module.__name__}:run_job" and callable(module.run_job), name
        assert callable(module.config) and callable(module.build), name


def test_schema_lists_exactly_the_table():
    props = SCHEMA["properties"]
    comparison = SCHEMA["$defs"]["comparison"]["properties"]
    for enum in (props["methods"]["items"]["enum"], comparison["methods"]["items"]["enum"],
                 comparison["hide"]["items"]["enum"]):
        assert enum == list(METHODS)


def test_config_keys_are_the_schema_blocks_and_cover_the_config():
    props = SCHEMA["properties"]
    config = pipeline_config("quick")["steffle"]
    for name, row in METHODS.items():
        if "sgda" in row.traits:
            assert set(row.config_keys) == set(props["train"]["properties"]), name
            assert set(config["train"]) <= set(row.config_keys)
        else:
            block = props["baselines"]["properties"][name]["properties"]
            assert set(row.config_keys) == set(block), name
            assert set(config["baselines"][name]) <= set(row.config_keys)
    assert set(config["methods"]) <= set(METHODS)
    assert set(props["baselines"]["properties"]) == set(without_trait("sgda"))


def test_readers_take_groups_and_labels_from_the_table():
    assert list(report.LABELS) == list(METHODS)
    assert [report.LABELS[m] for m in METHODS] == [row.label for row in METHODS.values()]
    assert report.FEDERATED == plan.FEDERATED == jobs.FEDERATED == with_trait("federated")
    assert jobs.CENTRAL == with_trait("central") and plan.SGDA_METHODS == with_trait("sgda")
    assert plan.NON_FAIR == report.NON_FAIR == ("fedavg", "erm")
    assert plan.PRIVATE == ("steffle", "dp_fermi", "tran2021", "ling2024", "ling2024_groupgap")


def test_traits_set_each_jobs_grid():
    spec = {"epsilons": [1, 3], "lambdas": [0.0, 2.0]}
    for name, row in METHODS.items():
        settings, epsilons = jobs.grid({**spec, "method": name})
        assert epsilons == ([1, 3] if "private" in row.traits else ["inf"]), name
        assert sorted({lam for _, lam in settings}) == ([0.0, 2.0] if "fair" in row.traits else [0.0]), name


def test_planner_routes_each_method_by_its_traits():
    runs = plan.runs(pipeline_config("quick"))
    for run in runs:
        traits = METHODS[run.method].traits
        assert (run.partition is not None) == ("federated" in traits), run.key
        assert ("eta_w" in run.spec["train"]) == ("sgda" in traits), run.key


def test_panel_titles_name_every_private_method():
    assert set(report.TITLE_NAMES) == set(with_trait("private"))
