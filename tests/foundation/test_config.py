"""Bad configs fail before any job runs, with a message that names the key."""

import copy
import re
from pathlib import Path

import pytest
import yaml

from fedrepro.config import ConfigError, check_config, coerce_overrides, load_yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "workflow" / "schemas"


@pytest.fixture
def config() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def deep_merge(base: dict, override: dict) -> dict:
    """How Snakemake merges a second --configfile into the first."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        merged[key] = (
            deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def error_of(config: dict) -> str:
    with pytest.raises(ConfigError) as info:
        check_config(config, SCHEMAS)
    return str(info.value)


def test_default_and_paper_configs_are_valid(config):
    check_config(config, SCHEMAS)
    check_config(deep_merge(config, yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())), SCHEMAS)


@pytest.mark.parametrize(
    "mutate, key, words",
    [
        (lambda c: c["fedavg"]["partition"]["alphas"].__setitem__(0, 0), "fedavg.partition.alphas[0]", "minimum"),
        (lambda c: c["fedavg"]["partition"]["alphas"].__setitem__(0, -1.5), "fedavg.partition.alphas[0]", "minimum"),
        (lambda c: c["fedavg"].__setitem__("dataset", "imagenet"), "fedavg.dataset", "cifar10"),
        (lambda c: c["fedavg"]["methods"].__setitem__("fedprox", {}), "fedavg.methods", "fedprox"),
        (lambda c: c["fedavg"]["methods"]["fedavg"].__setitem__("lr", "fast"), "fedavg.methods.fedavg.lr", "number"),
        (
            lambda c: c["fedavg"]["methods"]["fedavg"].__setitem__("participation", 1.5),
            "fedavg.methods.fedavg.participation",
            "maximum",
        ),
        (lambda c: c.__setitem__("devise", "cpu"), "<top level>", "devise"),
        (lambda c: c.__setitem__("device", "tpu"), "device", "cuda"),
        (lambda c: c["resources"]["train"].__setitem__("gpu", -1), "resources.train.gpu", "minimum"),
        (lambda c: c["fedavg"].__setitem__("seeds", []), "fedavg.seeds", "non-empty"),
    ],
)
def test_schema_errors_name_the_key_and_what_is_allowed(config, mutate, key, words):
    mutate(config)
    message = error_of(config)
    assert f"config key '{key}'" in message
    assert words in message


@pytest.mark.parametrize(
    "mutate, key, words",
    [
        (lambda c: c["dpzv"]["eps_grid"].__setitem__(0, 0), "dpzv.eps_grid[0]", "inf"),
        (lambda c: c["dpzv"]["eps_grid"].__setitem__(1, -2), "dpzv.eps_grid[1]", "inf"),
        (lambda c: c["dpzv"].__setitem__("delta", 1.0), "dpzv.delta", "maximum"),
        (lambda c: c["dpzv"].__setitem__("delta", 0), "dpzv.delta", "minimum"),
        (lambda c: c["dpzv"]["methods"].append("dp_sgd"), "dpzv.methods[4]", "vfl_czofo"),
        (lambda c: c["dpzv"]["shared"].__setitem__("clip_mode", "both"), "dpzv.shared.clip_mode", "one_sided"),
    ],
)
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


# Issue 15, item 6: values no schema type catches, YAML files, --config overrides.


@pytest.mark.parametrize(
    "mutate, key, words",
    [
        (
            lambda c: c["fedavg"]["methods"]["fedavg"].__setitem__("lr", float("nan")),
            "fedavg.methods.fedavg.lr",
            "finite",
        ),
        (
            lambda c: c["fedavg"]["methods"]["fedavg"].__setitem__("lr", float("inf")),
            "fedavg.methods.fedavg.lr",
            "finite",
        ),
        (
            lambda c: c["fedavg"]["methods"]["fedavg"].__setitem__("rounds", 10**12),
            "fedavg.methods.fedavg.rounds",
            "at most",
        ),
        (
            lambda c: c["fedavg"]["methods"]["fedavg"].__setitem__("rounds", 30.0),
            "fedavg.methods.fedavg.rounds",
            "integer",
        ),
        (
            lambda c: c["fedavg"]["methods"]["fedavg"].__setitem__("batch_size", 32.5),
            "fedavg.methods.fedavg.batch_size",
            "whole number",
        ),
        (lambda c: c["fedavg"].__setitem__("seeds", [0, 1, 0]), "fedavg.seeds", "twice"),
        (lambda c: c["fedavg"]["partition"].__setitem__("alphas", [0.3, 100, 0.3]), "fedavg.partition.alphas", "twice"),
        (lambda c: c["fedavg"]["partition"].__setitem__("alphas", [1, 1.0]), "fedavg.partition.alphas", "twice"),
        (lambda c: c["dpzv"].__setitem__("eps_grid", [1, 1.0000001]), "dpzv.eps_grid", "share one results folder"),
        (lambda c: c["steffle"]["figures"]["fig1"].__setitem__("h", [0.75, 0.75]), "steffle.figures.fig1.h", "twice"),
        (
            lambda c: c["datasets"]["synthetic_text"].__setitem__("n_train", 0),
            "datasets.synthetic_text.n_train",
            "at least 1",
        ),
        (
            lambda c: c["fedavg"]["methods"]["fedavg"]["model_options"].__setitem__("in_features", 10),
            "fedavg.methods.fedavg.model_options.in_features",
            "64 features",
        ),
        (
            lambda c: c["fedavg"]["methods"]["fedavg"]["model_options"].__setitem__("num_classes", 3),
            "fedavg.methods.fedavg.model_options.num_classes",
            "10 classes",
        ),
    ],
)
def test_bad_values_fail_naming_the_key(config, mutate, key, words):
    mutate(config)
    message = error_of(config)
    assert f"config key '{key}'" in message and words in message


def test_inf_is_allowed_only_as_a_privacy_budget(config):
    config["dpzv"]["eps_grid"] = [1, float("inf")]
    check_config(config, SCHEMAS)
    config["dpzv"]["delta"] = float("inf")
    assert "config key 'dpzv.delta'" in error_of(config)


def test_duplicate_yaml_key_names_file_and_line(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("report:\n  decimals: 2\nfedavg:\n  seeds: [0]\n  seeds: [1]\n")
    with pytest.raises(ConfigError, match=r"dup.yaml, line 5: key 'seeds' given twice.*line 4"):
        load_yaml(path)


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("fedavg:\n  seeds: [0, 1\n  dataset: digits\n")
    with pytest.raises(ConfigError, match=r"bad.yaml, line 3, column \d+: malformed YAML"):
        load_yaml(path)


def test_config_files_of_the_repository_load_strictly():
    for path in [ROOT / "config.yaml", *sorted((ROOT / "configs").rglob("*.yaml"))]:
        load_yaml(path)


def test_command_line_overrides_get_yaml_types(config):
    """Snakemake keeps `--config channels_last=true` (and values nested in a mapping) as strings."""
    config.update(channels_last="true", checkpoint_every="2")
    config["fedavg"]["partition"]["alphas"] = ["0.3", "1e2"]
    config["dpzv"]["eps_grid"] = ["1", "inf"]
    coerce_overrides(
        config,
        {
            "channels_last": "true",
            "checkpoint_every": "2",
            "fedavg": {"partition": {"alphas": ["0.3", "1e2"]}},
            "dpzv": {"eps_grid": ["1", "inf"]},
        },
    )
    assert config["channels_last"] is True and config["checkpoint_every"] == 2
    assert config["fedavg"]["partition"]["alphas"] == [0.3, 100.0] and config["dpzv"]["eps_grid"] == [1, "inf"]
    check_config(config, SCHEMAS)


def snakemake_overrides(config: dict, *entries: str) -> dict:
    """`config` as the Snakefile sees it after `snakemake --config ENTRIES`: parsed by Snakemake's own
    command-line parser, merged into the config file's values, then typed by `coerce_overrides`."""
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    overrides = parse_config(list(entries))
    update_config(config, overrides)
    coerce_overrides(config, overrides)
    return config


def test_snakemake_command_line_true_1_and_null_validate(config):
    """Snakemake's parser keeps 'true', 'null' and every value inside a mapping as strings; the schema
    wants a boolean, null and integers there."""
    config = snakemake_overrides(
        config,
        "channels_last=true",
        "compile=False",
        "checkpoint_every=1",
        "checkpoint_minutes=null",
        "fedavg={seeds: [0, 1], seeds_per_job: 1}",
        "results=/tmp/true",
    )
    assert config["channels_last"] is True and config["compile"] is False
    assert config["checkpoint_every"] == 1 and config["checkpoint_minutes"] is None
    assert config["fedavg"]["seeds"] == [0, 1] and config["fedavg"]["seeds_per_job"] == 1
    assert config["results"] == "/tmp/true" and config["fedavg"]["dataset"] == "digits"
    check_config(config, SCHEMAS)


def test_a_command_line_value_of_the_wrong_type_names_its_key(config):
    config = snakemake_overrides(config, "channels_last=maybe")
    assert "config key 'channels_last': 'maybe' is not of type 'boolean'" in error_of(config)


def test_config_check_command_names_file_and_line_and_validates_the_merge(tmp_path, capsys):
    """`python -m fedrepro.config FILES`: what Snakemake's own `--configfile` reader cannot say."""
    from fedrepro.config import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("fedavg:\n  seeds: [0, 1\n  dataset: digits\n")
    assert main([str(ROOT / "config.yaml"), str(bad)]) == 1
    assert re.search(r"bad.yaml, line 3, column \d+: malformed YAML", capsys.readouterr().err)
    override = tmp_path / "override.yaml"
    override.write_text("fedavg:\n  seeds: [0, 0]\n")
    assert main([str(ROOT / "config.yaml"), str(override)]) == 1
    assert "config key 'fedavg.seeds'" in capsys.readouterr().err
    assert main([str(ROOT / "config.yaml"), str(ROOT / "configs" / "paper.yaml")]) == 0
