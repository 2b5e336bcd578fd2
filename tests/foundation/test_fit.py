"""Model/data fit of every paper fails before any job, naming the key (fedrepro.experiments.fit).

Each case was a job failure before (matrix shapes, IndexError, a partition that cannot be cut).
"""

import json

import pytest
import yaml

from fedrepro.experiments import fit
from tests.foundation.test_config import ROOT, error_of


@pytest.fixture
def config() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def set_in(config: dict, path: str, value) -> None:
    """set_in(c, "fedsc.datasets.digits.clients", 3); integers index lists."""
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    for part in parents:
        config = config[part]
    config[last] = value


@pytest.mark.parametrize(
    "path, value, key, words",
    [
        # FedAvg: a CNN sized for 16x16 images on 8x8 digits (its linear layer gets the wrong width)
        ("fedavg.methods.fedavg.model", "small_cnn", "fedavg.methods.fedavg.model_options", "small_cnn"),
        # FedSC: the encoder's image size, and clients that cannot hold equal class blocks
        ("fedsc.datasets.digits.encoder.kwargs.image_size", 32, "fedsc.datasets.digits.encoder", "digits"),
        # 6 clients: one a round at partial 0.2 (the count check passes), but 6 does not divide 10 classes
        ("fedsc.datasets.digits.clients", 6, "fedsc.datasets.digits.clients", "must divide 10"),
        # DPZV: more row strips than rows, views that are not one per client, a text encoder too small
        ("dpzv.datasets.digits.partition.clients", 9, "dpzv.datasets.digits.partition", "8 along axis 1"),
        (
            "dpzv.datasets.synthetic_multiview.partition.clients",
            6,
            "dpzv.datasets.synthetic_multiview.partition",
            "views",
        ),
        (
            "dpzv.figures.fig6.datasets.1.model.options.vocab_size",
            500,
            "dpzv.figures.fig6.datasets[1].model.options.vocab_size",
            "token ids up to 999",
        ),
        (
            "dpzv.figures.fig6.datasets.1.model.options.max_len",
            8,
            "dpzv.figures.fig6.datasets[1].model.options.max_len",
            "16 tokens",
        ),
        (
            "dpzv.figures.fig6.datasets.0.model.options",
            {"norm": "group", "in_channels": 3},
            "dpzv.figures.fig6.datasets[0].model",
            "vfl_resnet18",
        ),
        # FedAL: a three-channel CNN and a wrong MLP width in the digits pool
        ("fedal.pools.digits_het.2.options.in_channels", 3, "fedal.pools.digits_het[2]", "small_cnn"),
        ("fedal.pools.digits_hom.0.options.in_features", 784, "fedal.pools.digits_hom[0]", "mlp"),
        # a data set's own options change the sample: 6 views for 12 clients of one view each
        ("datasets.synthetic_multiview.views", 6, "dpzv.datasets.synthetic_multiview.partition", "(6, 1, 16, 16)"),
    ],
)
def test_a_model_that_does_not_fit_its_data_fails_naming_the_key(config, path, value, key, words):
    if path == "fedavg.methods.fedavg.model":
        set_in(config, "fedavg.methods.fedavg.model_options", {"num_classes": 10, "image_size": 16})
    set_in(config, path, value)
    message = error_of(config)
    assert f"config key '{key}" in message and words in message, message


def test_the_fit_check_runs_the_model_the_job_builds(config):
    """A fitting model passes; the output width is the model's, not a copy of the config's."""
    data = fit.Data(config, "digits")
    assert fit.forward_errors("k", "mlp", {"in_features": 64, "num_classes": 10}, data.shape, 10, data, "x") == []
    wrong = fit.forward_errors("k", "mlp", {"in_features": 64, "num_classes": 7}, data.shape, 10, data, "x")
    assert wrong and "gives (7,) outputs" in wrong[0]


def test_model_runs_are_kept_in_the_cache_file(config, tmp_path, monkeypatch):
    cache = tmp_path / "fit.json"
    assert fit.fit_errors(config, ["fedavg"], cache) == []
    kept = json.loads(cache.read_text())
    assert any('"mlp"' in key for key in kept)
    # a second parse reads the cache and runs no model
    monkeypatch.setattr(fit, "RESULTS", fit.Results())
    monkeypatch.setattr(fit, "_run_model", lambda *a: pytest.fail("ran a model the cache holds"))
    assert fit.fit_errors(config, ["fedavg"], cache) == []
    cache.write_text("{broken")  # a broken cache is rebuilt, not an error
    monkeypatch.setattr(fit, "RESULTS", fit.Results())
    monkeypatch.undo()
    assert fit.fit_errors(config, ["fedavg"], cache) == []


def test_the_cpu_shape_check_agrees_with_the_meta_device(config, monkeypatch):
    """Small models are checked on the CPU with zero weights (fit.CPU_CHECK_BYTES), which needs none of the
    meta device's Python kernels: every model of the default config gives the meta device's output shape,
    feature width and parameter count, and a model that does not fit fails on both."""
    papers = ["fedavg", "fedsc", "dpzv", "fedal"]
    runs = {}
    for limit in (fit.CPU_CHECK_BYTES, 0):  # 0: every model on the meta device
        monkeypatch.setattr(fit, "CPU_CHECK_BYTES", limit)
        monkeypatch.setattr(fit, "RESULTS", fit.Results())
        assert fit.fit_errors(config, papers) == []
        runs[limit] = fit.RESULTS.saved
    assert runs[0] == runs[fit.CPU_CHECK_BYTES] and len(runs[0]) >= 8
    for limit in (fit.CPU_CHECK_BYTES, 0):
        monkeypatch.setattr(fit, "CPU_CHECK_BYTES", limit)
        assert "error" in fit._run_model("mlp", {"in_features": 63, "num_classes": 10}, (1, 8, 8), False)


def test_the_snakefile_s_cache_lies_beside_the_byte_code(monkeypatch, tmp_path):
    """One cache for every working folder of the installation (each test's Snakemake runs elsewhere)."""
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path))
    assert fit.shared_cache() == tmp_path / "fedrepro" / "fit.json"
    assert "fit_cache=shared_cache()" in (ROOT / "workflow" / "Snakefile").read_text()
