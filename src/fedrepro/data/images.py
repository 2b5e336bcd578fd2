"""Builders of the image data sets (digits, MNIST, CIFAR-10/100, SVHN, CINIC-10, CelebA, ModelNet40)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrepro.data import formats
from fedrepro.data.prepared import Built, fetch_raw, xy


def digits(data_root, opts) -> Built:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)[:, None]
    y = d.target.astype(np.int64)
    train, test = train_test_split(np.arange(len(y)), test_size=opts["test_fraction"], stratify=y,
                                   random_state=opts["seed"])
    train, test = np.sort(train), np.sort(test)
    return Built({"x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test]},
                 {"class_names": [str(i) for i in range(10)]})


def mnist(data_root, opts) -> Built:
    fetched = fetch_raw("mnist", data_root, opts)
    return Built(xy(*formats.read_mnist(Path(data_root) / "mnist")),
                 {"class_names": [str(i) for i in range(10)]}, fetched)


def _cifar(num_classes: int):
    name = "cifar10" if num_classes == 10 else "cifar100"

    def build(data_root, opts) -> Built:
        fetched = fetch_raw(name, data_root, opts)
        arrays = xy(*formats.read_cifar(fetched[0].path, num_classes))
        meta = {"class_names": list(formats.CINIC_CLASSES)} if num_classes == 10 else {}
        return Built(arrays, meta, fetched)

    return build


cifar10 = _cifar(10)
cifar100 = _cifar(100)


def svhn(data_root, opts) -> Built:
    fetched = fetch_raw("svhn", data_root, opts)
    folder = Path(data_root) / "svhn"
    x_tr, y_tr = formats.read_svhn_mat(folder / "train_32x32.mat")
    x_te, y_te = formats.read_svhn_mat(folder / "test_32x32.mat")
    return Built(xy(x_tr, y_tr, x_te, y_te), {"class_names": [str(i) for i in range(10)]}, fetched)


def cinic(data_root, opts) -> Built:
    fetched = fetch_raw("cinic10", data_root, opts)
    arrays = xy(*formats.read_cinic(fetched[0].path, opts["include_valid"]))
    return Built(arrays, {"class_names": list(formats.CINIC_CLASSES)}, fetched)


def celeba(data_root, opts) -> Built:
    fetched = fetch_raw("celeba", data_root, opts)
    x_tr, y_tr, g_tr, x_te, y_te, g_te, ids = formats.read_celeba_leaf(
        Path(data_root) / "celeba", opts["image_size"], opts["min_images"], opts["train_fraction"], opts["seed"])
    arrays = {**xy(x_tr, y_tr, x_te, y_te), "group_train": g_tr, "group_test": g_te}
    meta = {"class_names": ["not smiling", "smiling"],
            "groups": {"what": "celebrity (LEAF user)", "count": int(len(ids)),
                       "celebrity_ids": ids.tolist()}}
    return Built(arrays, meta, fetched)


def celeba_shape(opts) -> tuple[int, ...]:
    """One prepared CelebA sample: RGB, image_size x image_size (LEAF's 84 by default)."""
    return (3, opts["image_size"], opts["image_size"])


MODELNET_VIEWS = 12   # shaded views per object, MVCNN's (Su et al. 2015) first setup


def modelnet(data_root, opts) -> Built:
    fetched = fetch_raw("modelnet40", data_root, opts)
    arrays = xy(*formats.read_modelnet_views(fetched[0].path, opts["resolution"], MODELNET_VIEWS, opts["channels"]))
    return Built(arrays, {"class_names": list(formats.MODELNET40_CLASSES), "views": MODELNET_VIEWS}, fetched)


def modelnet_shape(opts) -> tuple[int, ...]:
    return (MODELNET_VIEWS, opts["channels"], opts["resolution"], opts["resolution"])
