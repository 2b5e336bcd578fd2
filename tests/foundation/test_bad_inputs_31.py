"""Issue 31's bad inputs: each fails in the config check (before any job), naming its key and what is
allowed, or is warned about (a run far beyond its runtime)."""

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedrepro.config import check_config, data_count_errors, duplicate_run_errors
from fedrepro.data.sizes import train_size
from fedrepro.plan import print_duration_warnings
from tests.foundation.test_config import ROOT, SCHEMAS, error_of

BASE = yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.fixture
def config() -> dict:
    return copy.deepcopy(BASE)


def _set(path: str, value):
    """A mutation setting config[path] (dots and [i])."""

    def mutate(config):
        *parents, last = path.replace("[", ".").replace("]", "").split(".")
        node = config
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return mutate


BAD = {
    "fig2 class out of range": (
        _set("fedal.outputs.fig2.class", 10),
        "fedal.outputs.fig2.class",
        "allowed: 0 to 9",
    ),
    "test_fraction 1": (
        _set("datasets.digits.test_fraction", 1.0),
        "datasets.digits",
        "strictly between 0 and 1",
    ),
    "more SteFFLe silos than samples": (
        _set("steffle.figures.fig1.num_silos", 30000),
        "steffle.figures.fig1.num_silos",
        "allowed: 1 to 22500",
    ),
    "more SteFFLe silos in a fig2 panel": (
        _set("steffle.figures.fig2.panels[2].num_silos", [1, 22501]),
        "steffle.figures.fig2.panels[2].num_silos",
        "allowed: 1 to 22500",
    ),
    "more FedAL public samples than the data": (
        _set("fedal.experiments.blackbox.public", [1344]),
        "fedal.experiments.blackbox.public",
        "allowed: clients + public <= 1347",
    ),
    "more FedAL clients than the data": (
        _set("fedal.experiments.blackbox.clients", [1148]),
        "fedal.experiments.blackbox.clients",
        "allowed: clients + public <= 1347",
    ),
    "a 10^8-unit hidden layer (FedAL pool)": (
        _set("fedal.pools.digits_het[0].options.hidden", [10**8]),
        "fedal.pools.digits_het[0]",
        "resources.train.mem_mb = 4000; allowed: at most 1,048,576,000 parameters",
    ),
    "a 10^8-unit hidden layer (FedAvg)": (
        _set("fedavg.methods.fedavg.model_options.hidden", [10**8]),
        "fedavg.methods.fedavg.model_options",
        "allowed: at most 1,048,576,000 parameters",
    ),
    "partial below one client a round": (
        _set("fedsc.datasets.digits.partial", 0.01),
        "fedsc.datasets.digits.partial",
        "allowed: 0.1 <= p < 1",
    ),
    "two FedAL experiments plan one run with different settings": (
        _set("fedal.experiments.public_size.lr", 0.01),
        "fedal.experiments.public_size",
        "different ['lr']",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_fails_in_the_config_check_naming_key_and_allowed_values(config, case):
    mutate, key, allowed = BAD[case]
    mutate(config)
    message = error_of(config)
    assert f"'{key}" in message and "config key" in message
    assert allowed in message


def test_the_counts_at_their_limits_are_accepted(config):
    """clients + public == n, silos == n and the last class pass (the checks are not off by one)."""
    config["fedal"]["experiments"]["blackbox"]["public"] = [1343]
    config["fedal"]["outputs"]["fig2"]["class"] = 9
    config["steffle"]["figures"]["fig1"]["num_silos"] = 22500
    config["fedsc"]["datasets"]["digits"]["partial"] = 0.1
    assert data_count_errors(config, ["fedal", "steffle", "fedsc"]) == []
    config["fedal"]["experiments"]["blackbox"]["public"] = [1344]
    config["steffle"]["figures"]["fig1"]["num_silos"] = 22501
    config["fedsc"]["datasets"]["digits"]["partial"] = 0.09
    assert len(data_count_errors(config, ["fedal", "steffle", "fedsc"])) == 3


def test_a_disabled_steffle_figure_is_not_checked(config):
    config["steffle"]["figures"]["fig4"].update(enabled=False, num_silos=10**6)
    assert data_count_errors(config, ["steffle"]) == []


def test_duplicate_runs_with_equal_settings_are_one_run(config):
    """blackbox and public_size plan the same alpha-1 runs with the same settings: no error."""
    assert duplicate_run_errors(config, ["fedal"]) == []


@pytest.mark.parametrize("test_fraction", [0.25, 0.5, 0.1])
def test_train_size_is_what_sklearns_split_gives(config, test_fraction):
    """digits' training samples under its test_fraction, against the split images.py makes."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    y = load_digits().target
    train, _ = train_test_split(np.arange(len(y)), test_size=test_fraction, stratify=y, random_state=0)
    config["datasets"]["digits"] = {"test_fraction": test_fraction}
    assert train_size(config, "digits") == len(train)


def test_train_size_of_the_tabular_and_generated_sets(config):
    """The catalog's counts at the default options; pandas' sample(frac) rounds frac * n."""
    assert train_size(config, "adult") == 33916 and train_size(config, "credit") == 22500
    config["datasets"]["credit"] = {"train_fraction": 0.5}
    assert train_size(config, "credit") == 15000
    config["datasets"]["synthetic_tabular"] = {"n": 1001, "train_fraction": 0.5}
    assert train_size(config, "synthetic_tabular") == round(0.5 * 1001)
    assert train_size(config, "synthetic_text") == 600  # config.yaml's n_train
    assert train_size(config, "shapes") == 200 * 10


def test_a_run_far_beyond_its_runtime_is_warned_naming_the_key(config, capsys):
    """rounds: 999999 (a day per FedAvg job at the planner's 0.05 s a round) is priced and warned on stderr
    (where Snakemake shows it; it hides Python warnings raised while it reads the Snakefile)."""
    config["fedavg"]["methods"]["fedavg"]["rounds"] = 999999
    check_config(config, SCHEMAS)
    print_duration_warnings(config)
    message = capsys.readouterr().err
    assert "config warning: config key 'fedavg.methods.fedavg.rounds'" in message
    hours = 999999 * 0.05 * 2 / 3600
    assert f"{hours:.1f} h" in message and "resources.train.runtime (30 min)" in message


def test_the_default_config_starts_without_a_warning(config, capsys):
    check_config(config, SCHEMAS)
    print_duration_warnings(config)
    assert "warning" not in capsys.readouterr().err


def natural_celeba(config: dict, results: Path, clients: list[int], groups: int, **options) -> dict:
    """A FedAL experiment on CelebA's natural split, with the data set prepared (meta.json only) under
    `results` with `options` and `groups` natural groups."""
    import json

    from fedrepro.data.prepared import resolve_options

    meta = results / "data" / "celeba" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"options": resolve_options("celeba", options), "groups": {"count": groups}}))
    config["results"] = str(results)
    config["fedal"]["experiments"] = {"celeba": {"dataset": "celeba", "partition": "natural", "clients": clients}}
    config["fedal"]["outputs"] = {}
    return config


def test_more_natural_clients_than_the_prepared_groups_fail_naming_the_key(config, tmp_path):
    errors = data_count_errors(natural_celeba(config, tmp_path, [20, 31], groups=30), ["fedal"])
    assert len(errors) == 1 and "'fedal.experiments.celeba.clients': 31 clients" in errors[0]
    assert "allowed: 1 to 30" in errors[0]
    assert data_count_errors(natural_celeba(config, tmp_path / "b", [20, 30], groups=30), ["fedal"]) == []


def test_natural_groups_prepared_under_other_options_are_not_trusted(config, tmp_path):
    """Data prepared with other options is prepared again before the partition job, which checks then."""
    stale = natural_celeba(config, tmp_path, [31], groups=30, min_images=10)
    assert data_count_errors(stale, ["fedal"]) == []
    assert data_count_errors({**stale, "results": str(tmp_path / "none")}, ["fedal"]) == []


def test_the_partition_job_names_the_key_when_the_groups_were_not_known_before():
    from fedrepro.data.partition import natural_partition

    with pytest.raises(ValueError, match=r"fedal\.experiments\.<name>\.clients.*allowed 1 to 3"):
        natural_partition(np.array([0, 0, 1, 2, 2]), clients=4)
