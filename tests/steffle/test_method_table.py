"""The SteFFLe method table (fedrepro.algorithms.steffle.METHODS) against the schema, the
config and its readers: the planner, the report and the jobs take groups and labels from it."""

import shutil
import textwrap

import pytest
import yaml

from fedrepro.algorithms import Method, method_table, methods
from fedrepro.algorithms.steffle import METHODS, jobs, with_trait, without_trait
from fedrepro.experiments import steffle as plan
from fedrepro.report import steffle as report

from .helpers import ROOT, pipeline_config, prepared_synthetic

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
    for enum in (
        props["methods"]["items"]["enum"],
        comparison["methods"]["items"]["enum"],
        comparison["hide"]["items"]["enum"],
    ):
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


# README, "Add a method", on a toy SteFFLe-paper method: plain federated logistic regression
# (no noise, no fairness term). Step 1: its module.
TOY_MODULE = textwrap.dedent("""
    import torch

    from fedrepro.algorithms.steffle import jobs
    from fedrepro.algorithms.steffle.base import GridTrainer
    from fedrepro.algorithms.steffle.baselines import config


    class ToyTrainer(GridTrainer):
        def step(self, t, local, weight, noise):
            xb, yb, _, _ = self.batch(local)
            p1 = torch.sigmoid(torch.einsum("snmd,sgd->sgnm", xb, self.theta))
            resid = (p1 - yb[:, None]) * weight[:, None]
            grad = torch.einsum("sgnm,snmd->sgd", resid, xb) / (self.m * xb.shape[1])
            self.theta = self.theta - self.lr() * grad
            self.remember_iterate(t)


    def build(spec, data, seeds, settings, epsilons):
        cfg = config(spec)
        trainer = ToyTrainer(data, cfg, seeds, len(settings)) if settings else None
        return trainer, {**jobs.privacy_context(data, cfg), "per_eps": {"inf": {"eps": "inf"}}}


    def run_job(job):
        jobs.run_job(job)
""")


def test_a_toy_method_needs_its_module_one_table_line_its_config_block_and_its_schema_entry(tmp_path, monkeypatch):
    from fedrepro.algorithms import method_entry
    from fedrepro.config import ConfigError, check_config
    from fedrepro.pipeline import make_job

    (tmp_path / "toy_steffle.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    # step 2: one line in the table
    monkeypatch.setitem(
        METHODS,
        "toy",
        Method(
            entry="toy_steffle:run_job", label="Toy FL", traits=frozenset({"federated"}), config_keys=("clip_primal",)
        ),
    )
    # step 3: its config block
    config = pipeline_config("quick")
    config["steffle"]["methods"].append("toy")
    config["steffle"]["baselines"]["toy"] = {"clip_primal": 1.0}
    schemas = tmp_path / "schemas"
    shutil.copytree(ROOT / "workflow" / "schemas", schemas)
    with pytest.raises(ConfigError, match="toy"):
        check_config(config, schemas)
    # step 4: its schema entry
    schema = yaml.safe_load((schemas / "steffle.schema.yaml").read_text())
    for enum in (
        schema["properties"]["methods"]["items"]["enum"],
        schema["$defs"]["comparison"]["properties"]["methods"]["items"]["enum"],
        schema["$defs"]["comparison"]["properties"]["hide"]["items"]["enum"],
    ):
        enum.append("toy")
    schema["properties"]["baselines"]["properties"]["toy"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"clip_primal": {"type": "number"}},
    }
    (schemas / "steffle.schema.yaml").write_text(yaml.safe_dump(schema))
    check_config(config, schemas)

    runs = [r for r in plan.runs(config) if r.method == "toy"]
    assert runs and all(r.partition and r.spec["epsilons"] == ["inf"] and r.spec["lambdas"] == [0.0] for r in runs)
    assert {r.setting for r in runs} == {"N3_h0", "N3_h0.75"}  # not fair: no notion in the tag
    assert runs[0].spec["train"]["clip_primal"] == 1.0
    data, part = prepared_synthetic(tmp_path)
    spec = {**runs[0].spec, "train": {**runs[0].spec["train"], "epochs": 2, "batch": 64}}
    out = tmp_path / "steffle" / "runs" / "synthetic_tabular" / "toy" / runs[0].setting / "s0_1"
    job = make_job(
        spec,
        {"metrics": str(out / "metrics.parquet"), "summary": str(out / "summary.json")},
        {"data": str(data), "partition": str(part)},
        seeds=[0, 1],
    )
    method_entry("steffle", "toy")(job)
    points = report.load_points([str(out / "metrics.parquet")])
    assert len(points) == 2 and points["error"].between(0, 0.5).all()  # two seeds, better than chance
    panel = report.panel_points(points.assign(dataset="credit"), "credit", "eo", 3, runs[0].spec["h"], 1, ["toy"])
    assert set(panel["method"]) == {"toy"}  # a non-fair method shows in EO panels too
