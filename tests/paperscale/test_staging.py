"""The generated paper-scale data_root: every real format, read by the real readers, verified
through the checksum test hook (and rejected without it)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedrepro.data import sources
from fedrepro.data.prepare import prepare_dataset
from tests.data.formats import stage_all

DATASETS = (
    "mnist",
    "cifar10",
    "cifar100",
    "svhn",
    "cinic10",
    "celeba",
    "modelnet40",
    "amazon_polarity",
    "retired_adult",
)


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    root = tmp_path_factory.mktemp("raw")
    overrides = stage_all(root, n=30)
    path = root / "checksums.json"
    path.write_text(json.dumps(overrides))
    return root, path


def test_generated_archives_fail_their_published_checksums_without_the_hook(staged, monkeypatch):
    root, _ = staged
    monkeypatch.delenv(sources.CHECKSUM_OVERRIDES_ENV, raising=False)
    with pytest.raises(sources.ChecksumError):
        sources.fetch("cifar10", root, allow_download=False)


def test_every_paper_scale_data_set_prepares_from_its_generated_raw_files(staged, tmp_path, monkeypatch):
    root, path = staged
    monkeypatch.setenv(sources.CHECKSUM_OVERRIDES_ENV, str(path))
    for dataset in DATASETS:
        fetched = sources.fetch(dataset, root, allow_download=False)
        assert all(f.verified for f in fetched), dataset
        options = {"n_train": 20, "n_test": 6} if dataset == "amazon_polarity" else {}
        prepare_dataset(dataset, tmp_path / dataset, root, options)
        with np.load(tmp_path / dataset / "arrays.npz") as arrays:
            assert len(arrays["x_train"]) > 0 and len(arrays["x_test"]) > 0, dataset


def test_generated_cifar_has_every_class_when_a_batch_file_holds_fewer_images_than_classes(
    staged, tmp_path, monkeypatch
):
    """FedSC's CIFAR-10 split gives each of 10 clients one class: every class must be in the training set,
    also at smoke sizes where one of the five batch files holds fewer than 10 images."""
    root, path = staged
    monkeypatch.setenv(sources.CHECKSUM_OVERRIDES_ENV, str(path))
    for dataset, classes in (("cifar10", 10), ("cifar100", 100)):
        prepare_dataset(dataset, tmp_path / dataset, root, {})
        with np.load(tmp_path / dataset / "arrays.npz") as arrays:
            assert sorted(set(arrays["y_train"].tolist())) == list(range(classes)), dataset
