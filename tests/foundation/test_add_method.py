"""README, "Add a method", followed step by step on a toy method of every paper.

The four steps are the method's module, one line in the paper's method table, its config block
and its schema entry. Nothing else is touched. For the `fedavg` key the config check, the planner,
the job (run through `fedrepro.pipeline.run_job`, as the workflow's entry script does) and the report
take it in; for FedAvg, DPZV, FedSC and FedAL the four steps as file edits in one copy of the repository
make Snakemake plan each toy method's training jobs; a DPZV method needs no paper-scale rates of its own.
SteFFLe's toy method: tests/steffle/test_method_table.py.
"""

import filecmp
import json
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from fedrepro.algorithms import Method, method_table, methods
from fedrepro.config import PAPER_SECTIONS, ConfigError, check_config
from fedrepro.data.partition import Partition, save_partition
from fedrepro.experiments import fedavg as fedavg_plan
from fedrepro.pipeline import make_job, run_job
from tests import limits
from tests.foundation.test_config import ROOT, SCHEMAS

# Step 1: the method's module. A FedAvg with a server step size: the new global model moves
# `server_lr` of the way from the old one to the clients' average.
TOY_MODULE = '''
"""FedAvg with a server step size (the toy method of tests/foundation/test_add_method.py)."""
from pathlib import Path

import torch

from fedrepro.algorithms.fedavg.fedavg import FedAvg
from fedrepro.data.arrays import load_prepared
from fedrepro.data.partition import load_partition
from fedrepro.data.tensors import to_tensors
from fedrepro.fl.device import pick_device
from fedrepro.fl.runner import run_seeds


class ServerStepFedAvg(FedAvg):
    def round(self, t):
        before = {name: p.detach().clone() for name, p in self.model.named_parameters()}
        stats = super().round(t)
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                p.copy_(before[name] + self.spec["server_lr"] * (p - before[name]))
        return stats


def run_job(job):
    device = pick_device(job.spec.get("device", "auto"))
    data = to_tensors(load_prepared(Path(job.input["data"]).parent), device)
    clients = load_partition(job.input["partition"]).clients
    run_seeds(job, lambda seed: ServerStepFedAvg(job.spec, data, clients, seed, device), job.spec["rounds"],
              eval_every=job.spec.get("eval_every", 1))
'''
TOY = "server_step"


@pytest.fixture
def toy_module(tmp_path, monkeypatch) -> str:
    package = tmp_path / "toy_methods"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / f"{TOY}.py").write_text(textwrap.dedent(TOY_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"toy_methods.{TOY}:run_job"


def add_table_line(monkeypatch, entry: str) -> None:
    """Step 2: one line in algorithms/fedavg/__init__.py."""
    fedavg = method_table("fedavg")["fedavg"]
    row = Method(entry=entry, label="FedAvg, server step 0.5", config_keys=(*fedavg.config_keys, "server_lr"))
    monkeypatch.setitem(method_table("fedavg"), TOY, row)


def fedavg_only_config() -> dict:
    """config.yaml with only the `fedavg` paper (the other papers' checks are theirs)."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    for paper in PAPER_SECTIONS:
        if paper != "fedavg":
            config.pop(paper, None)
    config["papers"] = ["fedavg"]
    return config


def add_config_block(config: dict) -> None:
    """Step 3: its block under `fedavg.methods` in config.yaml."""
    config["fedavg"]["methods"][TOY] = {**config["fedavg"]["methods"]["fedavg"], "server_lr": 0.5}


def add_schema_entry(schema: dict) -> None:
    """Step 4: its entry in fedavg.schema.yaml (the schema as loaded)."""
    entries = schema["properties"]["methods"]["properties"]
    toy = json.loads(json.dumps(entries["fedavg"]))
    toy["properties"]["server_lr"] = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
    toy["required"].append("server_lr")
    entries[TOY] = toy


def edit_schema(schemas: Path, paper: str, step) -> None:
    """Applies `step` to `<paper>.schema.yaml` in `schemas` (a copy of workflow/schemas)."""
    path = schemas / f"{paper}.schema.yaml"
    schema = yaml.safe_load(path.read_text())
    step(schema)
    path.write_text(yaml.safe_dump(schema, sort_keys=False))


def config_error(config: dict, schemas) -> str:
    with pytest.raises(ConfigError) as info:
        check_config(config, schemas)
    return str(info.value)


def write_digits_shaped_data(folder, num_clients: int) -> dict:
    """Random data of the digits' shape (64 features, 10 classes), so the planned spec runs as is."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(120, 64)).astype(np.float32), np.arange(120) % 10
    folder.mkdir(parents=True)
    np.savez(folder / "arrays.npz", x_train=x[:100], y_train=y[:100], x_test=x[100:], y_test=y[100:])
    (folder / "meta.json").write_text(json.dumps({"kind": "tabular", "num_classes": 10}))
    save_partition(
        Partition("horizontal", clients=np.array_split(np.arange(100), num_clients)), folder / "partition.npz"
    )
    return {"data": str(folder / "arrays.npz"), "partition": str(folder / "partition.npz")}


def run_planned(run, inputs: dict, results) -> str:
    """One job of a planned run, as the fedavg_train rule runs it (3 rounds, one seed)."""
    spec = {**run.spec, "rounds": 3, "device": "cpu"}
    folder = Path(run.folder(str(results), "fedavg", "s0"))
    job = make_job(
        spec,
        {"metrics": str(folder / "metrics.parquet"), "summary": str(folder / "summary.json")},
        input=inputs,
        seeds=[0],
    )
    run_job(job, methods("fedavg")[run.method])
    return job.output["summary"]


def test_the_four_steps_add_a_method_to_checks_plan_jobs_and_report(tmp_path, monkeypatch, toy_module):
    config = fedavg_only_config()
    add_config_block(config)
    assert "config key 'fedavg.methods'" in config_error(config, SCHEMAS)  # no schema entry yet
    schemas = shutil.copytree(SCHEMAS, tmp_path / "schemas")
    edit_schema(schemas, "fedavg", add_schema_entry)
    assert "not in the method table" in config_error(config, schemas)  # no table line yet
    add_table_line(monkeypatch, toy_module)
    check_config(config, schemas)

    runs = fedavg_plan.runs(config)
    alphas = config["fedavg"]["partition"]["alphas"]
    assert [run.method for run in runs] == ["fedavg"] * len(alphas) + [TOY] * len(alphas)  # table order
    toy_run = next(run for run in runs if run.method == TOY)
    assert toy_run.spec["server_lr"] == 0.5

    inputs = write_digits_shaped_data(tmp_path / "data", config["fedavg"]["partition"]["num_clients"])
    first = next(run for run in runs if run.method == "fedavg")
    summaries = [run_planned(first, inputs, tmp_path / "results"), run_planned(toy_run, inputs, tmp_path / "results")]
    metrics = pd.read_parquet(Path(summaries[1]).with_name("metrics.parquet"))
    assert metrics["round"].tolist() == [1, 2, 3]

    from fedrepro.report.fedavg import accuracy_table

    out = tmp_path / "results" / "fedavg" / "tables" / "accuracy"
    table = make_job(
        {"scale": "quick", "decimals": 2},
        {"md": f"{out}.md", "csv": f"{out}.csv", "tex": f"{out}.tex"},
        input={"summaries": summaries},
    )
    accuracy_table(table)
    rows = pd.read_csv(f"{out}.csv")["row"].tolist()
    assert rows[:2] == ["FedAvg", "FedAvg, server step 0.5"]


def test_the_fedavg_table_matches_its_schema_and_config():
    """Each method's `config_keys` are its schema entry's keys, and every configured method is a row."""
    schema = yaml.safe_load((SCHEMAS / "fedavg.schema.yaml").read_text())["properties"]["methods"]["properties"]
    config = yaml.safe_load((ROOT / "config.yaml").read_text())["fedavg"]["methods"]
    table = method_table("fedavg")
    assert set(schema) == set(table) and set(config) <= set(table)
    for name, row in table.items():
        assert set(row.config_keys) == set(schema[name]["properties"]), name


# The same four steps on a toy method of DPZV, FedSC and FedAL, as file edits (tests below). Each module
# subclasses the paper's own code; each method is a small variation, enough for the workflow to plan it.
TOY_DPZV = """
\"\"\"VAFL whose server answers with the sign of dL/dh (the toy DPZV method of tests/foundation/test_add_method.py).\"\"\"
import torch

from fedrepro.algorithms.dpzv.vafl import VAFL


class SignVAFL(VAFL):
    method = "toy"

    def server_answer(self, m, msg):
        grad, stats = super().server_answer(m, msg)
        return torch.sign(grad), stats


def run_job(job):
    from fedrepro.algorithms.dpzv.jobs import run_vfl_job

    run_vfl_job(job, SignVAFL)
"""
TOY_FEDSC = """
\"\"\"FedAvg + SC at half the local step (the toy FedSC method of tests/foundation/test_add_method.py).\"\"\"
from fedrepro.algorithms.fedsc.fedsc import FedSC
from fedrepro.algorithms.fedsc.jobs import pretrain


class HalfStepSC(FedSC):
    def client_update(self, j, weights, t, lr):
        return super().client_update(j, weights, t, lr / 2)


def run_toy(job):
    pretrain(job, HalfStepSC)
"""
TOY_FEDAL = """
\"\"\"FedMD-LF built directly (the toy FedAL method of tests/foundation/test_add_method.py).\"\"\"
from fedrepro.algorithms.fedal.fedal import FedAL


def build(data, pool, cfg, seed, spec):
    return FedAL(data, pool, cfg, seed, use_al=False, use_lf=True)


def run_job(job):
    from fedrepro.algorithms.fedal.jobs import run

    run(job, build)
"""


def add_dpzv_config(config: dict) -> None:
    """Step 3 for DPZV: its name in `dpzv.methods` and its quick-scale rates (VAFL's) per data set; at paper
    scale it trains at each data set's `lr.default`, so configs/paper.yaml is not touched."""
    config["dpzv"]["methods"].append("toy")
    for dataset in config["dpzv"]["datasets"].values():
        dataset["lr"]["toy"] = dict(dataset["lr"]["vafl"])


def add_dpzv_schema(schema: dict) -> None:
    schema["properties"]["methods"]["items"]["enum"].append("toy")
    rates = schema["properties"]["datasets"]["additionalProperties"]["properties"]["lr"]["properties"]
    rates["toy"] = json.loads(json.dumps(rates["vafl"]))


def add_fedsc_config(config: dict) -> None:
    config["fedsc"]["methods"]["toy"] = {"lr": 0.03, "grad_clip": 3.0}


def add_fedsc_schema(schema: dict) -> None:
    entries = schema["properties"]["methods"]["properties"]
    entries["toy"] = json.loads(json.dumps(entries["fedavg_sc"]))


def add_fedal_config(config: dict) -> None:
    """Its block, and its name in the black-box experiment and in Figure 8 (the outputs name their methods)."""
    section = config["fedal"]
    section["methods"]["toy"] = {"tau": 5}
    section["experiments"]["blackbox"]["methods"].append("toy")
    section["outputs"]["fig8"]["methods"].append("toy")


def add_fedal_schema(schema: dict) -> None:
    schema["$defs"]["method"]["enum"].append("toy")
    entries = schema["properties"]["methods"]["properties"]
    entries["toy"] = json.loads(json.dumps(entries["fedmd"]))


_FEDAVG_KEYS = (*method_table("fedavg")["fedavg"].config_keys, "server_lr")
# paper -> (method name, module folder, module text, table line, config step, schema step)
TOYS = {
    "fedavg": (
        TOY,
        "fedavg",
        TOY_MODULE,
        f'"{TOY}": Method(entry="fedrepro.algorithms.fedavg.{TOY}:run_job", label="Toy", config_keys={_FEDAVG_KEYS}),',
        add_config_block,
        add_schema_entry,
    ),
    "dpzv": (
        "toy",
        "dpzv",
        TOY_DPZV,
        '"toy": Method(entry="fedrepro.algorithms.dpzv.toy:run_job", label="Toy", '
        'traits=frozenset({"first_order"}), config_keys=("embed_clip", "momentum")),',
        add_dpzv_config,
        add_dpzv_schema,
    ),
    "fedsc": (
        "toy",
        "fedsc",
        TOY_FEDSC,
        '"toy": _row("toy:run_toy", "Toy", ("sc",)),',
        add_fedsc_config,
        add_fedsc_schema,
    ),
    "fedal": (
        "toy",
        "fedal",
        TOY_FEDAL,
        '"toy": _row("toy", "Toy", {"baseline"}, ()),',
        add_fedal_config,
        add_fedal_schema,
    ),
}


def add_methods_in_a_copy(copy: Path) -> dict[str, list[str]]:
    """The four steps of every paper in TOYS as file edits in `copy`; returns each paper's four files."""
    for name in ("config.yaml",):
        shutil.copy(ROOT / name, copy / name)
    for name in ("src", "workflow"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    config = yaml.safe_load((copy / "config.yaml").read_text())
    files = {}
    for paper, (method, folder, module, line, add_config, add_schema) in TOYS.items():
        package = copy / "src" / "fedrepro" / "algorithms" / folder
        (package / f"{method}.py").write_text(textwrap.dedent(module))  # step 1
        table = package / "__init__.py"
        text = table.read_text()
        end = text.rindex("}")
        table.write_text(text[:end] + f"    {line}\n" + text[end:])  # step 2
        add_config(config)  # step 3
        edit_schema(copy / "workflow" / "schemas", paper, add_schema)  # step 4
        files[paper] = [
            f"src/fedrepro/algorithms/{folder}/{method}.py",
            f"src/fedrepro/algorithms/{folder}/__init__.py",
            "config.yaml",
            f"workflow/schemas/{paper}.schema.yaml",
        ]
    (copy / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return files


def changed_files(copy: Path) -> list[str]:
    return sorted(
        str(path.relative_to(copy))
        for path in copy.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and not (
            (ROOT / path.relative_to(copy)).exists() and filecmp.cmp(path, ROOT / path.relative_to(copy), shallow=False)
        )
    )


@pytest.mark.pipeline
def test_four_files_add_a_method_to_the_workflow_in_every_paper(tmp_path, monkeypatch):
    """The four steps as file edits in a copy of the repository, for a toy method of FedAvg, DPZV, FedSC and
    FedAL at once (SteFFLe's: tests/steffle/test_method_table.py): no other file differs from the original,
    and one Snakemake dry run plans every toy method's training jobs (their code inputs included)."""
    copy = tmp_path / "repo"
    copy.mkdir()
    files = add_methods_in_a_copy(copy)
    assert all(len(paper_files) == 4 for paper_files in files.values())
    assert changed_files(copy) == sorted({name for paper_files in files.values() for name in paper_files})

    papers = list(TOYS)
    # the model/data fit check, run here (this process has torch already) into the cache file the copy's
    # Snakefile reads, so that Snakemake's parse does not import torch again: the check itself is unchanged
    from fedrepro.experiments import fit

    monkeypatch.setattr(fit, "RESULTS", fit.Results())
    config = yaml.safe_load((copy / "config.yaml").read_text())
    assert fit.fit_errors({**config, "papers": papers}, papers, fit.shared_cache()) == []
    result = limits.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            *papers,
            "--config",
            f"papers=[{','.join(papers)}]",
            f"results={tmp_path / 'results'}",
        ],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(copy / "src")},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    alphas = len(config["fedavg"]["partition"]["alphas"])
    assert re.search(rf"^fedavg_train\s+{2 * alphas}\s*$", output, flags=re.MULTILINE), output[-3000:]
    for paper, (method, *_) in TOYS.items():
        runs = set(re.findall(rf"{paper}/runs/([^/\s]+)/{method}/([^/\s]+)/", output))
        assert runs, f"no {paper} training job of {method!r} planned:\n{output[-3000:]}"
    assert output.count(f"method={TOY},") == alphas


def test_a_new_dpzv_method_needs_no_paper_scale_edit(monkeypatch):
    """Paper scale: a DPZV method without rates of its own trains at each data set's `lr.default`
    (configs/paper.yaml untouched); a data set with neither names the method."""
    from fedrepro.config import load_yaml, merge_configs
    from fedrepro.experiments import dpzv as dpzv_plan

    config = merge_configs(load_yaml(ROOT / "config.yaml"), load_yaml(ROOT / "configs" / "paper.yaml"))
    row = Method(entry="fedrepro.algorithms.dpzv.vafl:run_job", label="Toy", config_keys=("embed_clip", "momentum"))
    monkeypatch.setitem(method_table("dpzv"), "toy", row)
    config["dpzv"]["methods"].append("toy")
    assert dpzv_plan.check(config) == []
    datasets = dpzv_plan.training_datasets(config)
    toy_runs = [run for run in dpzv_plan.runs(config) if run.method == "toy"]
    assert sorted({run.dataset for run in toy_runs}) == sorted(datasets)
    for run in toy_runs:
        rates = config["dpzv"]["datasets"][run.dataset]["lr"]
        assert (run.spec["lr_server"], run.spec["lr_client"]) == (
            rates["default"]["server"],
            rates["default"]["client"],
        )
        assert "toy" not in rates
    dpzv_run = next(run for run in dpzv_plan.runs(config) if run.method == "dpzv" and run.dataset == datasets[0])
    assert dpzv_run.spec["lr_client"] == config["dpzv"]["datasets"][datasets[0]]["lr"]["dpzv"]["client"]

    del config["dpzv"]["datasets"][datasets[0]]["lr"]["default"]
    assert f"dpzv.datasets.{datasets[0]}.lr lacks toy" in dpzv_plan.check(config)


def add_fedal_paper_scale(copy: Path) -> None:
    """FedAL's fifth edit: its paper-scale experiments list their own methods (configs/paper.yaml), and
    Figure 8 there reads the SVHN experiment, so the toy joins it."""
    path = copy / "configs" / "paper.yaml"
    paper = yaml.safe_load(path.read_text())
    paper["fedal"]["experiments"]["svhn"]["methods"].append("toy")
    path.write_text(yaml.safe_dump(paper, sort_keys=False))


CHECK_PAPER_SCALE = """
import sys
from fedrepro.config import ConfigError, check_config, load_yaml, merge_configs
config = merge_configs(load_yaml("config.yaml"), load_yaml("configs/paper.yaml"))
try:
    check_config(config, "workflow/schemas", fit_cache=sys.argv[1])
except ConfigError as error:
    sys.exit(str(error))
"""


@pytest.mark.pipeline
def test_the_same_edits_pass_the_paper_scale_check(tmp_path):
    """The toy methods of every paper pass the paper-scale config check (config.yaml with configs/paper.yaml,
    the model/data fit check included) with configs/paper.yaml untouched except FedAL's experiment list."""
    copy = tmp_path / "repo"
    copy.mkdir()
    add_methods_in_a_copy(copy)
    shutil.copytree(ROOT / "configs", copy / "configs")

    def check():
        return limits.run(
            [sys.executable, "-c", CHECK_PAPER_SCALE, str(tmp_path / "fit")],
            cwd=copy,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": str(copy / "src")},
        )

    before = check()
    assert before.returncode == 1 and "config key 'fedal.outputs.fig8.methods': ['toy']" in before.stderr
    add_fedal_paper_scale(copy)
    after = check()
    assert after.returncode == 0, after.stderr[-3000:]
