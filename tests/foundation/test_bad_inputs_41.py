"""Issue 41's late bad inputs: each fails in the config check (before any job), naming its key and what is
allowed, where before it failed inside a training, memory or audit job, or passed with fewer samples than
the figure says."""

import copy

import pytest
import yaml

from fedrepro.config import check_config, data_count_errors
from fedrepro.experiments import dpzv as dpzv_planner
from tests.foundation.test_config import ROOT, SCHEMAS, error_of

BASE = yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.fixture
def config() -> dict:
    return copy.deepcopy(BASE)


BAD = {
    "rng refcode under poisson sampling": (
        lambda c: c["steffle"]["train"].update(rng="refcode"),
        "steffle.train.rng",
        "allowed: streams, or refcode where both hold",
    ),
    "rng refcode on the eo runs": (
        lambda c: c["steffle"]["refcode_grid"].update(fairness="eo"),
        "steffle.refcode_grid.train.rng",
        "fairness 'eo'",
    ),
    "refcode_hash_seed with rng streams": (
        lambda c: c["steffle"]["train"].update(rng="streams", refcode_hash_seed=0),
        "steffle.train.refcode_hash_seed",
        "allowed: null, or an integer with rng: refcode",
    ),
    "refcode grid on credit": (
        lambda c: c["steffle"]["refcode_grid"].update(dataset="credit"),
        "steffle.refcode_grid.dataset",
        "allowed: data set 'adult', or refcode_hash_seed: null",
    ),
    "audit dpzv clients above the image rows": (
        lambda c: c["audit"]["dpzv"].update(clients=9),
        "audit.dpzv.clients",
        "allowed: 1 to 8",
    ),
    "audit dpzv batch above its data": (
        lambda c: c["audit"]["dpzv"].update(batch_size=33),
        "audit.dpzv.batch_size",
        "allowed: 1 to 32",
    ),
    "audit runs 2": (
        lambda c: c["audit"]["runs"]["quick"].update(dpzv=2),
        "audit.runs.quick.dpzv",
        "2 is not allowed (allowed: 0 (leaves the mechanism out) or an integer of at least 4",
    ),
    "dpzv client_weights of the wrong length": (
        lambda c: c["dpzv"]["shared"].update(client_weights=[1.0, 2.0, 3.0]),
        "dpzv.shared.client_weights",
        "digits 4, synthetic_multiview 12",
    ),
    "synthetic_text n_train 1": (
        lambda c: c["datasets"]["synthetic_text"].update(n_train=1),
        "datasets.synthetic_text",
        "dpzv.figures.fig6.num_samples draws 64; allowed: at least 71 training samples",
    ),
    "a trained data set smaller than its batch": (
        lambda c: c["datasets"]["synthetic_multiview"].update(n_train=70),
        "datasets.synthetic_multiview",
        "dpzv.datasets.synthetic_multiview.batch_size draws 64",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_late_bad_input_fails_in_the_config_check_naming_key_and_allowed_values(config, case):
    mutate, key, allowed = BAD[case]
    mutate(config)
    message = error_of(config)
    assert f"config key '{key}'" in message, message
    assert allowed in message, message


def test_the_shipped_refcode_grid_and_sizes_pass(config):
    """config.yaml's refcode grid (rng refcode, hash seed 0, Adult, dp, shuffle_keep_last) and every size at
    its limit pass: the checks are not off by one."""
    check_config(config, SCHEMAS)
    config["datasets"]["synthetic_text"]["n_train"] = 71  # 71 - round(7.1) = 64 = fig6.num_samples
    config["audit"]["dpzv"].update(clients=8, batch_size=32)
    config["dpzv"]["shared"]["client_weights"] = None
    check_config(config, SCHEMAS)
    config["datasets"]["synthetic_text"]["n_train"] = 70
    assert "datasets.synthetic_text" in " ".join(data_count_errors(config, ["dpzv"]))


def test_the_limits_are_the_jobs_own():
    """The audit's images refuse a ninth client and the holdout leaves what the check counts (independently:
    build_vfl_data's split on 71 samples)."""
    import numpy as np

    from fedrepro.algorithms.dpzv.base import build_vfl_data
    from fedrepro.audit.dpzv import tiny_vfl_data

    assert tiny_vfl_data(16, clients=8).num_clients == 8
    with pytest.raises(ValueError):
        tiny_vfl_data(16, clients=9)
    x, y = np.zeros((71, 4), dtype=np.float32), np.zeros(71, dtype=np.int64)
    data = build_vfl_data(x, y, x[:2], y[:2], [np.arange(4)], [(4,)], 2, "tabular", val_fraction=0.1)
    assert data.num_train == 64 == dpzv_planner.kept_for_training(BASE["dpzv"], 71)
