"""Tiny vertical data for the DPZV tests (generated, no files needed)."""

import numpy as np
import pytest
import torch

from fedrepro.algorithms.dpzv.base import VFLSettings, build_vfl_data
from fedrepro.data.partition import vertical_partition


def tiny_images(n_train=96, n_test=32, seed=0):
    """Class-dependent 1x8x8 uint8 images (a learnable stand-in for digits)."""
    rng = np.random.default_rng(seed)
    proto = rng.integers(0, 256, size=(3, 1, 8, 8))
    y = rng.integers(0, 3, size=n_train + n_test)
    x = np.clip(proto[y] + rng.normal(0, 40, size=(len(y), 1, 8, 8)), 0, 255).astype(np.uint8)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


@pytest.fixture(scope="session")
def tiny_data():
    torch.set_num_threads(1)
    x_tr, y_tr, x_te, y_te = tiny_images()
    p = vertical_partition((1, 8, 8), "rows", 2)
    return build_vfl_data(x_tr, y_tr, x_te, y_te, p.features, p.feature_shapes, 3, "image", val_fraction=0.25)


def tiny_settings(**kw):
    base = dict(
        batch_size=8,
        epochs=1,
        client_model="vfl_mnist_cnn",
        client_kwargs={"pool": [2, 2], "width": 4},
        embed_dim=4,
        server_hidden=8,
        lr_client=1e-3,
        lr_server=0.05,
        record_wire=True,
    )
    # the options without a fallback (config.yaml's shared block sets them): Algorithm 1's ZO server and
    # Table 3's C_h = C = 10 for the baselines
    extra = {"server_update": "zo", "embed_clip": 10.0, **kw.pop("extra", {})}
    base.update(kw)
    return VFLSettings(**base, extra=extra)
