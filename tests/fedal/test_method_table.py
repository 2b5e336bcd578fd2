"""FedAL's method table (algorithms/fedal/__init__.py) against the schema, the configs and its readers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from fedrepro.algorithms import method_table, methods
from fedrepro.experiments import fedal as plan
from fedrepro.plan import load_config
from fedrepro.registry import resolve

ROOT = Path(__file__).resolve().parents[2]
TABLE = method_table("fedal")
SCHEMA = yaml.safe_load((ROOT / "workflow/schemas/fedal.schema.yaml").read_text())


def _schema_keys(method: str) -> set[str]:
    block = SCHEMA["properties"]["methods"]["properties"][method]
    if "$ref" in block:  # "#fedal_plain_method" -> the $defs entry with that $anchor
        anchor = block["$ref"].removeprefix("#")
        block = next(d for d in SCHEMA["$defs"].values() if d.get("$anchor") == anchor)
    return set(block["properties"])


def test_schema_lists_the_table_methods_in_order_with_their_config_keys():
    assert SCHEMA["$defs"]["method"]["enum"] == list(TABLE)
    assert set(SCHEMA["properties"]["methods"]["properties"]) == set(TABLE)
    for name, row in TABLE.items():
        assert _schema_keys(name) == set(row.config_keys), name


@pytest.mark.parametrize("files", [["config.yaml"], ["config.yaml", "configs/paper.yaml"]], ids=["quick", "paper"])
def test_config_method_blocks_hold_only_table_keys(files):
    blocks = load_config([str(ROOT / f) for f in files])["fedal"]["methods"]
    assert set(blocks) == set(TABLE)
    for name, block in blocks.items():
        assert set(block) <= set(TABLE[name].config_keys), name


def test_every_entry_resolves_and_labels_reach_the_report():
    from fedrepro.report import fedal as report

    for name, entry in methods("fedal").items():
        assert callable(resolve(entry)), name
    assert report.NAMES == {name: row.label for name, row in TABLE.items()}
    assert plan.METHODS == tuple(TABLE)


def test_traits_decide_the_discriminator_and_the_pool_checks(monkeypatch):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["fedal"]["experiments"]["homogeneous"]["methods"].append("feddf_al")
    assert "homogeneous.methods': feddf_al needs at least two architectures" in "\n".join(plan.check(config))
    exp, point = config["fedal"]["experiments"]["blackbox"], {"iterations": 30}
    assert {m for m in TABLE if "discriminator" in plan.run_spec(config, exp, m, point)} == {"fedal", "feddf_al"}
    # the trait, not the method's name, gives a run the discriminator
    changed = dict(TABLE, fd=dataclasses.replace(TABLE["fd"], traits=TABLE["fd"].traits | {"adversarial"}))
    monkeypatch.setattr(plan, "method_table", lambda paper: changed)
    assert "discriminator" in plan.run_spec(config, exp, "fd", point)


def test_only_the_fedal_family_depends_on_fedals_own_module():
    """An edit to FedAL's loss re-runs only FedAL's jobs: no baseline's code inputs hold fedal.py (issue 32)."""
    from fedrepro.codedeps import closure

    own = "fedrepro.algorithms.fedal.fedal"
    for name, row in TABLE.items():
        depends = own in closure(row.entry)
        assert depends == row.entry.startswith(own + ":"), name
