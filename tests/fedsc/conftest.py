"""Tiny digits fixtures for the FedSC method tests (no files under /work/shared are read)."""

import numpy as np
import pytest
import torch

from fedrepro.algorithms.fedsc.common import SSLData, channel_stats


def digits_arrays(per_class: int = 12, test_per_class: int = 4):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images * (255 / 16)).round().astype(np.uint8)[:, None]
    y = d.target
    train = np.concatenate([np.flatnonzero(y == c)[:per_class] for c in range(10)])
    test = np.concatenate([np.flatnonzero(y == c)[per_class:per_class + test_per_class] for c in range(10)])
    return x[train], y[train], x[test], y[test]


@pytest.fixture(scope="session")
def tiny_digits():
    xt, yt, xe, ye = digits_arrays()
    clients = [torch.as_tensor(np.flatnonzero(yt == c)) for c in range(0, 10, 2)]
    clients = [torch.cat([torch.as_tensor(np.flatnonzero(yt == c)), torch.as_tensor(np.flatnonzero(yt == c + 1))])
               for c in range(0, 10, 2)]  # 5 clients x 2 classes (the SVHN split)
    mean, std = channel_stats(xt)
    return SSLData(torch.as_tensor(xt), torch.as_tensor(yt).long(), torch.as_tensor(xe), torch.as_tensor(ye).long(),
                   clients, 10, mean, std)


def tiny_spec(**over):
    spec = {"rounds": 3, "participation": "full",
            "encoder": {"name": "small_cnn", "kwargs": {"width": 4, "feature_dim": 16, "image_size": 8}},
            "projector": {"hidden": 16, "out": 8},
            "train": {"local_epochs": 1, "batch_size": 16, "lr": 0.03, "grad_clip": 3.0},
            "augment": {"crop_scale": [0.5, 1.0], "flip_p": 0.0}, "mu": 2.0, "sharing": None,
            "dpcalr": {"passes": 1, "views_per_pass": 2}, "knn": {"k": 5}}
    spec.update(over)
    return spec
