"""What each DPZV-family run records and which config keys reach it (cheap checks, no training)."""

import math

import pytest
import torch

from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.jobs import DATA_KEYS, SETTING_KEYS, settings_for
from fedrepro.algorithms.dpzv.vafl import VAFL
from fedrepro.algorithms.dpzv.zo import fd_divisor
from fedrepro.algorithms.dpzv.zoo_vfl import ZOOVFL
from fedrepro.privacy import dpzv as privacy
from tests.dpzv.conftest import tiny_settings


def test_non_private_records_still_name_the_releases_and_sampling_rate():
    """eps = inf: no noise, but the record keeps T (or the baselines' release count) and q = B/D."""
    dpzv = privacy.dpzv_noise(math.inf, 1e-3, 10.0, rounds=120, num_samples=640, batch_size=64)
    assert (dpzv["releases"], dpzv["sampling_rate"], dpzv["sigma"]) == (120, 0.1, 0.0)
    assert math.isinf(dpzv["gdp_mu"]) and math.isinf(dpzv["eps_pld"])
    pair = privacy.embedding_noise(math.inf, 1e-3, 0.5, 120, 640, 64, embeddings_per_round=2, pair_release="separate")
    assert (pair["releases"], pair["sampling_rate"]) == (240, 0.1)
    assert math.isinf(pair["gdp_mu"]) and pair["sigma"] == 0.0


def test_dpzv_privacy_record_names_the_clip_mode(tiny_data):
    for mode in ("symmetric", "one_sided"):
        algo = DPZV(tiny_data, tiny_settings(extra={"server_update": "sgd", "clip_mode": mode}), seed=0)
        assert algo.privacy()["clip_mode"] == mode
        assert algo.two_sided is (mode == "symmetric")


def test_zero_smoothing_is_rejected():
    with pytest.raises(ValueError, match="zo_lambda"):
        fd_divisor(0.0, "lambda")


def test_settings_for_keeps_setting_and_data_keys_out_of_the_method_options():
    spec = {
        "batch_size": 8,
        "epochs": 2,
        "lr_server": 0.1,
        "val": "holdout",
        "val_fraction": 0.2,
        "split_seed": 3,
        "device": "cpu",
        "variants": [],
        "dataset": "digits",
        "method": "dpzv",
        "clip": 5,
    }
    settings = settings_for(spec, {"eps": 1, "clip": 50, "tag": "eps1-C50"})
    assert settings.extra == {"clip": 50}
    assert (settings.batch_size, settings.epochs, settings.lr_server, settings.eps) == (8, 2, 0.1, 1.0)
    assert not set(settings.extra) & (set(SETTING_KEYS) | set(DATA_KEYS))


def test_baselines_take_their_server_settings_from_the_config(tiny_data):
    vafl = VAFL(tiny_data, tiny_settings(momentum=0.7), seed=0)
    assert vafl.server.optimizer.momentum == 0.7
    zoo = ZOOVFL(
        tiny_data, tiny_settings(extra={"direction": "gaussian", "zo_momentum": 0.3, "server_update": "zo"}), seed=0
    )
    assert zoo.direction == "gaussian" and zoo.server.updater.momentum == 0.3


def test_zoo_vfl_pair_release_key_sets_the_release_count(tiny_data):
    counts = {}
    for release in ("joint", "separate"):
        algo = ZOOVFL(
            tiny_data,
            tiny_settings(extra={"embed_clip": 0.5, "zoo_noise": "independent", "zoo_pair_release": release}),
            seed=0,
        )
        counts[release] = algo.privacy()["releases"]
    assert counts["separate"] == 2 * counts["joint"] > 0


def test_summary_names_the_run_size(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(extra={"server_update": "sgd"}), seed=0)
    summary = algo.summary()
    assert summary["total_rounds"] == algo.total_rounds == algo.rounds_per_epoch * algo.cfg.epochs
    assert summary["num_train"] == tiny_data.num_train


def test_parse_eps_reads_both_spellings_of_infinity():
    assert math.isinf(privacy.parse_eps("Infinity")) and math.isinf(privacy.parse_eps(" inf "))
    assert privacy.parse_eps(2) == 2.0


def test_image_features_are_standardised_per_client_slice(tiny_data):
    """build_vfl_data standardises image pixels (uint8 0-255 otherwise reach the clients raw)."""
    pixels = torch.cat([x.reshape(x.shape[0], -1) for x in tiny_data.train], dim=1)
    assert abs(float(pixels.mean())) < 0.5 and float(pixels.abs().max()) < 20


def test_zo_updater_state_before_any_step_has_no_buffers():
    from fedrepro.algorithms.dpzv.zo import ZOUpdater

    updater = ZOUpdater([torch.zeros(3)], lr=0.1, momentum=0.9)
    assert updater.state_dict() == {"buffers": None}


def test_two_point_estimate_defaults_to_the_central_difference():
    from fedrepro.algorithms.dpzv.zo import two_point_estimate

    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    u = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    estimate = two_point_estimate(lambda p: (p * p).sum(-1), x, u, 1e-3)  # d/dx1 x1^2 = 2 at x1 = 1
    assert torch.allclose(estimate, torch.tensor([[2.0, 0.0]], dtype=torch.float64))


def test_round_row_counts_bytes_both_ways(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(extra={"server_update": "sgd"}), seed=0)
    row = algo.round(1)
    assert row["bytes_up"] > row["bytes_down"] > 0  # two embedding batches up, one scalar down


def test_zoo_vfl_evaluates_on_clipped_embeddings_whenever_it_adds_noise(tiny_data):
    algo = ZOOVFL(tiny_data, tiny_settings(extra={"embed_clip": 0.5}), seed=0)
    algo.noise["sigma"] = 0.3  # any positive sigma: the head was trained on clipped embeddings
    h = torch.full((4, 4), 10.0)
    assert torch.linalg.vector_norm(algo.eval_embedding(h), dim=1).max() <= 0.5 + 1e-6
