"""Bad configs fail before any job runs, with a message that names the key."""

import copy
from pathlib import Path

import pytest
import yaml

from fedrepro.config import ConfigError, check_config

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "workflow" / "schemas"


@pytest.fixture
def config() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def deep_merge(base: dict, override: dict) -> dict:
    """How Snakemake merges a second --configfile into the first."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        merged[key] = deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def error_of(config: dict) -> str:
    with pytest.raises(ConfigError) as info:
        check_config(config, SCHEMAS)
    return str(info.value)


def test_default_and_paper_configs_are_valid(config):
    check_config(config, SCHEMAS)
    check_config(deep_merge(config, yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())), SCHEMAS)


@pytest.mark.parametrize("mutate, key, words", [
    (lambda c: c["fedavg"]["partition"]["alphas"].__setitem__(0, 0), "fedavg.partition.alphas[0]", "minimum"),
    (lambda c: c["fedavg"]["partition"]["alphas"].__setitem__(0, -1.5), "fedavg.partition.alphas[0]", "minimum"),
    (lambda c: c["fedavg"].__setitem__("dataset", "imagenet"), "fedavg.dataset", "cifar10"),
    (lambda c: c["fedavg"]["methods"].__setitem__("fedprox", {}), "fedavg.methods", "fedprox"),
    (lambda c: c["fedavg"]["methods"]["fedavg"].__setitem__("lr", "fast"), "fedavg.methods.fedavg.lr", "number"),
    (lambda c: c["fedavg"]["methods"]["fedavg"].__setitem__("participation", 1.5), "fedavg.methods.fedavg.participation", "maximum"),
    (lambda c: c.__setitem__("devise", "cpu"), "<top level>", "devise"),
    (lambda c: c.__setitem__("device", "tpu"), "device", "cuda"),
    (lambda c: c["resources"]["train"].__setitem__("gpu", -1), "resources.train.gpu", "minimum"),
    (lambda c: c["fedavg"].__setitem__("seeds", []), "fedavg.seeds", "non-empty"),
])
def test_schema_errors_name_the_key_and_what_is_allowed(config, mutate, key, words):
    mutate(config)
    message = error_of(config)
    assert f"config key '{key}'" in message
    assert words in message


@pytest.mark.parametrize("mutate, key, words", [
    (lambda c: c["dpzv"]["eps_grid"].__setitem__(0, 0), "dpzv.eps_grid[0]", "inf"),
    (lambda c: c["dpzv"]["eps_grid"].__setitem__(1, -2), "dpzv.eps_grid[1]", "inf"),
    (lambda c: c["dpzv"].__setitem__("delta", 1.0), "dpzv.delta", "maximum"),
    (lambda c: c["dpzv"].__setitem__("delta", 0), "dpzv.delta", "minimum"),
    (lambda c: c["dpzv"]["methods"].append("dp_sgd"), "dpzv.methods[4]", "vfl_czofo"),
    (lambda c: c["dpzv"]["shared"].__setitem__("clip_mode", "both"), "dpzv.shared.clip_mode", "one_sided"),
])
def test_privacy_and_method_errors_name_the_key(config, mutate, key, words):
    if "dpzv" not in config:
        pytest.skip("no dpzv section in config.yaml")
    mutate(config)
    message = error_of(config)
    assert f"config key '{key}'" in message and words in message


def test_more_clients_than_samples_is_rejected(config):
    config["fedavg"]["partition"]["num_clients"] = 5000
    message = error_of(config)
    assert "config key 'fedavg.partition.num_clients'" in message and "1347 training samples" in message


def test_unknown_dataset_option_is_rejected(config):
    config["datasets"]["digits"] = {"test_fraktion": 0.5}
    message = error_of(config)
    assert "config key 'datasets.digits'" in message and "test_fraktion" in message


def test_unknown_paper_lists_allowed_values(config):
    config["papers"] = ["fedavg", "fedprox"]
    message = error_of(config)
    assert "'papers'" in message and "fedsc" in message


def test_every_error_is_reported_at_once(config):
    config["fedavg"]["partition"]["alphas"] = [-1]
    config["device"] = "tpu"
    message = error_of(config)
    assert "alphas[0]" in message and "'device'" in message
