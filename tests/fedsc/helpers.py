"""Tiny digits data and specs for the FedSC tests (built from scikit-learn's bundled digits)."""

import json
from pathlib import Path

import numpy as np


def digits_arrays(per_class: int = 12, test_per_class: int = 4):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images * (255 / 16)).round().astype(np.uint8)[:, None]
    y = d.target
    train = np.concatenate([np.flatnonzero(y == c)[:per_class] for c in range(10)])
    test = np.concatenate([np.flatnonzero(y == c)[per_class : per_class + test_per_class] for c in range(10)])
    return x[train], y[train], x[test], y[test]


def tiny_spec(**over):
    spec = {
        "rounds": 3,
        "participation": "full",
        "encoder": {"name": "small_cnn", "kwargs": {"width": 4, "feature_dim": 16, "image_size": 8}},
        "projector": {"hidden": 16, "out": 8},
        "train": {"local_epochs": 1, "batch_size": 16, "lr": 0.03, "grad_clip": 3.0},
        "augment": {"crop_scale": [0.5, 1.0], "flip_p": 0.0},
        "mu": 2.0,
        "sharing": None,
        "dpcalr": {"passes": 1, "views_per_pass": 2},
        "knn": {"k": 5},
    }
    spec.update(over)
    return spec


def write_prepared_digits(root: Path) -> Path:
    """`digits_arrays(10, 3)` written as the prepare rule's output under root/data/digits;
    returns the arrays.npz path."""
    xt, yt, xe, ye = digits_arrays(per_class=10, test_per_class=3)
    folder = root / "data" / "digits"
    folder.mkdir(parents=True)
    np.savez(folder / "arrays.npz", x_train=xt, y_train=yt, x_test=xe, y_test=ye)
    (folder / "meta.json").write_text(json.dumps({"num_classes": 10, "kind": "image"}))
    return folder / "arrays.npz"


def method_classes() -> dict:
    """Method name -> the class that trains it (the method table names run functions, not classes)."""
    from fedrepro.algorithms.fedsc.byol import FedBYOL, FedEMA, FedU
    from fedrepro.algorithms.fedsc.fedca import FedCA
    from fedrepro.algorithms.fedsc.fedsc import FedSC
    from fedrepro.algorithms.fedsc.fedx import FedX

    return {
        "fedavg_sc": FedSC,
        "fedsc": FedSC,
        "fedavg_byol": FedBYOL,
        "fedu": FedU,
        "fedema": FedEMA,
        "fedx": FedX,
        "fedca": FedCA,
    }
