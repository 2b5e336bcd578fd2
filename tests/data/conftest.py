"""Fixtures over the raw-format makers of tests/data/formats.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from fedrepro.data import sources
from tests.data.formats import (
    make_amazon,
    make_celeba,
    make_cifar,
    make_cinic,
    make_mnist,
    make_modelnet,
    make_svhn,
    png_bytes,
    write_idx,
)


@pytest.fixture
def make():
    """The raw-format makers above."""
    return SimpleNamespace(idx=write_idx, mnist=make_mnist, cifar=make_cifar, svhn=make_svhn,
                           cinic=make_cinic, celeba=make_celeba, modelnet=make_modelnet,
                           amazon=make_amazon, png=png_bytes)


@pytest.fixture
def stage_raw(tmp_path, monkeypatch):
    """Pin the checksums of files already written in data_root/<dataset>/ (tiny stand-ins).

    Returns data_root. The dataset's URL table entry is replaced by the tiny files'
    md5s, so `fetch` treats them as verified pre-staged copies.
    """
    root = tmp_path / "raw"

    def stage(dataset: str) -> Path:
        folder = root / dataset
        raws = tuple(sources.RawFile(name, (), md5=sources.file_digest(folder / name, "md5"))
                     for name in sources.raw_files(dataset))
        monkeypatch.setitem(sources.SOURCES, dataset, replace(sources.SOURCES[dataset], files=raws))
        return root

    stage.root = root
    return stage
