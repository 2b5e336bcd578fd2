"""Without other options each method runs the DPZV paper's setting: Algorithm 1 and Table 3 (lambda = 1e-3,
C = 10, momentum m = 0.9, n = 5 VFL-CZOFO perturbations). `server_update` and the baselines' `embed_clip` have no
fallback (config.yaml sets other values); tiny_settings passes Algorithm 1's ZO server and C_h = C = 10."""

import math

import torch

from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.vafl import VAFL
from fedrepro.algorithms.dpzv.vfl_czofo import VFLCZOFO
from fedrepro.algorithms.dpzv.zoo_vfl import ZOOVFL
from tests.dpzv.conftest import tiny_settings


def test_dpzv_defaults_are_algorithm_1_with_table_3(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(), seed=0)
    assert (algo.zo_lambda, algo.divisor, algo.clip) == (1e-3, 1e-3, 10.0)  # eq. (7) divides by lambda
    assert algo.two_sided and algo.direction == "sphere" and algo.table_update == "midpoint"
    assert algo.server_update == "zo" and algo.server.updater.momentum == 0.9 and algo.server.optimizer is None
    assert all(c.updater.momentum == 0.9 and c.updater.lr == algo.cfg.lr_client for c in algo.clients)
    assert algo.server.updater.lr == algo.cfg.lr_server
    assert algo.label_privacy == "none" and algo.head_clip == 1.0


def test_dpzv_sgd_server_uses_the_shared_learning_rate_and_momentum(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(lr_server=0.03, momentum=0.5, extra={"server_update": "sgd"}), seed=0)
    assert (algo.server.optimizer.lr, algo.server.optimizer.momentum) == (0.03, 0.5)
    assert algo.server.updater is None
    vafl = VAFL(tiny_data, tiny_settings(lr_client=0.02, momentum=0.5), seed=0)
    assert all((c.optimizer.lr, c.optimizer.momentum) == (0.02, 0.5) for c in vafl.clients)


def test_zoo_vfl_defaults(tiny_data):
    algo = ZOOVFL(tiny_data, tiny_settings(eps=1.0), seed=0)
    assert (algo.zo_lambda, algo.embed_clip, algo.direction, algo.noise_mode) == (1e-3, 10.0, "sphere", "shared")
    assert algo.server_update == "zo" and algo.server.updater.momentum == 0.9
    assert all(c.updater.momentum == 0.9 for c in algo.clients)
    joint = ZOOVFL(tiny_data, tiny_settings(eps=1.0, extra={"zoo_noise": "independent"}), seed=0)
    assert joint.privacy()["releases"] == algo.privacy()["releases"]  # the pair is one joint release


def test_embedding_baseline_defaults(tiny_data):
    for cls in (VAFL, VFLCZOFO):
        algo = cls(tiny_data, tiny_settings(eps=1.0), seed=0)
        assert algo.embed_clip == 10.0 and algo.noise["sigma"] > 0
        assert math.isclose(
            algo.server.input_scale, 1 / math.sqrt(1 + algo.cfg.embed_dim * algo.noise["sigma"] ** 2 / 100)
        )
    czofo = VFLCZOFO(tiny_data, tiny_settings(), seed=0)
    assert (czofo.zo_lambda, czofo.perturbations) == (1e-3, 5)
    assert czofo.server.input_scale == 1.0


def test_client_models_take_their_slice_shape_and_run_on_the_algorithms_device(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(), seed=0)
    for client, x in zip(algo.clients, tiny_data.train):
        assert client.model(x[:2]).shape == (2, algo.cfg.embed_dim)
        assert all(p.device == algo.device for p in client.model.parameters())
        assert client.params == [p for p in client.model.parameters() if p.requires_grad]
    assert isinstance(algo.ids_tensor([1, 2]), torch.Tensor) and algo.ids_tensor([1, 2]).dtype == torch.long
