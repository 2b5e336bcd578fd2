"""FedSC's stand-in settings fail in the config check (before any job), naming the key at fault and what is
allowed."""

import copy

import pytest
import yaml

from tests.foundation.test_config import ROOT, error_of

BASE = yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.fixture
def config() -> dict:
    return copy.deepcopy(BASE)


@pytest.mark.parametrize("methods", [["fedavg_sc", "centralized_sc"], ["fedsc", "centralized_sc"]])
@pytest.mark.parametrize("extras", ["kept", "dropped"])
def test_standin_methods_without_fedsc_or_fedavg_sc_name_the_key(config, methods, extras):
    """The stand-in's table and claims are Table 3's (FedSC against FedAvg+SC): without either, the error is
    `fedsc.standin.methods`'s, whether or not more_seeds and the ablations name FedSC claims too."""
    standin = config["fedsc"]["standin"]
    standin["methods"] = methods
    if extras == "dropped":
        for key in ("more_seeds", "ablations", "ablations_more_seeds"):
            standin.pop(key)
    message = error_of(config)
    missing = sorted({"fedsc", "fedavg_sc"} - set(methods))
    assert f"fedsc.standin.methods: {methods} lacks {missing}" in message
    assert "allowed values: fedsc, fedavg_sc" in message
    assert "more_seeds" not in message and "ablations" not in message  # not blamed on the keys that follow


@pytest.mark.parametrize("dataset", ["shapes", "textures"])
def test_standin_clients_that_do_not_divide_the_classes_name_clients_not_partial(config, dataset):
    """3 clients of 10 classes: the fault is `clients` (equal blocks of classes), not the `partial` 0.2 that
    asks for 0.6 clients a round with it."""
    config["fedsc"]["datasets"][dataset]["clients"] = 3
    message = error_of(config)
    assert f"config key 'fedsc.datasets.{dataset}.clients': 3 clients cannot hold" in message
    assert "clients must divide 10" in message
    assert ".partial'" not in message


def test_partial_below_one_client_a_round_is_still_named_where_clients_divide_the_classes(config):
    config["fedsc"]["datasets"]["shapes"].update(clients=5, partial=0.1)
    message = error_of(config)
    assert "config key 'fedsc.datasets.shapes.partial': 0.1 of 5 clients is 0.5 clients a round" in message
    assert ".clients'" not in message


def test_collapse_counted_on_a_data_set_not_a_standin_names_the_key_and_the_standins(config):
    config["fedsc"]["standin"]["collapse_counted"] = ["digits"]
    message = error_of(config)
    assert "fedsc.standin.collapse_counted: 'digits' is not a stand-in; allowed: shapes, textures" in message


def test_a_more_seeds_claim_whose_own_seeds_overlap_the_standins_names_its_entry(config):
    config["fedsc"]["standin"]["more_seeds"]["claims"][0]["seeds"] = [2, 3]
    message = error_of(config)
    assert "more_seeds.claims[0].seeds: [2] already in fedsc.seeds" in message
