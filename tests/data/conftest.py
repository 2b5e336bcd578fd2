"""Tiny files in each real on-disk raw format, for the data-stage tests.

Every maker writes a small but format-faithful file and returns the arrays it
encoded, so tests can compare what a reader returns with what was written.
"""

from __future__ import annotations

import csv
import gzip
import io
import pickle
import struct
import tarfile
import zipfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from fedrepro.data import sources


def write_idx(path: Path, array: np.ndarray, gz: bool = True) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    payload = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(payload) if gz else payload)


def make_mnist(folder: Path, n_train: int = 12, n_test: int = 5, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, n).astype(np.uint8)
        write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", x)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", y)
        out[prefix] = (x, y)
    return out


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def make_cifar(path: Path, num_classes: int = 10, per_batch: int = 4, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    if num_classes == 10:
        top, train, test, key = "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels"
    else:
        top, train, test, key = "cifar-100-python", ["train"], ["test"], b"fine_labels"
    out = {}
    with tarfile.open(path, "w:gz") as tar:
        for name in train + test:
            data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
            labels = rng.integers(0, num_classes, per_batch).tolist()
            _add_bytes(tar, f"{top}/{name}", pickle.dumps({b"data": data, key: labels}))
            out[name] = (data, labels)
        _add_bytes(tar, f"{top}/readme.html", b"<html></html>")
    return out


def make_svhn(path: Path, n: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
    y = np.array([[10], [1], [2], [10], [5], [9]][:n], dtype=np.uint8)
    savemat(path, {"X": x, "y": y})
    return x, y


def png_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def make_cinic(path: Path, seed: int = 0) -> dict:
    """2 images per (split, class) for 3 classes; one grayscale PNG to test conversion."""
    rng = np.random.default_rng(seed)
    images = {}
    with tarfile.open(path, "w:gz") as tar:
        for split in ("train", "valid", "test"):
            for cls in ("airplane", "cat", "truck"):
                for i in range(2):
                    arr = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                    name = f"CINIC-10/{split}/{cls}/img{i}.png"
                    if split == "test" and cls == "cat" and i == 1:
                        arr = np.repeat(arr[:, :, :1], 3, axis=2)
                        data = png_bytes(arr[:, :, 0])
                    else:
                        data = png_bytes(arr)
                    _add_bytes(tar, name, data)
                    images[name] = arr
        _add_bytes(tar, "CINIC-10/README.md", b"readme")
    return images


def make_celeba(folder: Path, counts=(6, 5, 3, 7), seed: int = 0) -> dict:
    """Celebrities with `counts` images (ids 10, 20, ...); those with < 5 are dropped by LEAF."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    attr_names = ["5_o_Clock_Shadow", "Smiling", "Young"]
    identities, attrs, smiling = [], [], {}
    k = 0
    for c, n in enumerate(counts):
        for _ in range(n):
            k += 1
            img = f"{k:06d}.jpg"
            identities.append(f"{img} {10 * (c + 1)}")
            s = int(rng.integers(0, 2))
            smiling[img] = s
            attrs.append(f"{img}  1 {2 * s - 1:2d} -1")
    (folder / "identity_CelebA.txt").write_text("\n".join(identities) + "\n")
    (folder / "list_attr_celeba.txt").write_text(f"{k}\n" + " ".join(attr_names) + "\n" + "\n".join(attrs) + "\n")
    with zipfile.ZipFile(folder / "img_align_celeba.zip", "w") as zf:
        for i in range(1, k + 1):   # solid gray 40 (not smiling) or 190 (smiling): ties pixels to labels
            img = f"{i:06d}.jpg"
            buf = io.BytesIO()
            Image.fromarray(np.full((218, 178, 3), 40 + 150 * smiling[img], dtype=np.uint8)).save(buf, format="JPEG")
            zf.writestr(f"img_align_celeba/{img}", buf.getvalue())
    return smiling


def make_modelnet(path: Path, size: int = 40, views: int = 12, drop_view: bool = False, seed: int = 0) -> dict:
    """Objects of 2 classes in train and test, MVCNN naming; view v has constant gray level 10*v."""
    rng = np.random.default_rng(seed)
    objects = {("train", "chair", "chair_0001"), ("train", "airplane", "airplane_0003"),
               ("train", "airplane", "airplane_0001"), ("test", "chair", "chair_0900")}
    with tarfile.open(path, "w:gz") as tar:
        for split, cls, obj in sorted(objects):
            for v in rng.permutation(views) + 1:   # written in shuffled order
                if drop_view and obj == "chair_0001" and v == 5:
                    continue
                arr = np.full((size, size, 3), 10 * int(v), dtype=np.uint8)
                name = f"modelnet40_images_new_12x/{cls}/{split}/{obj}.obj.shaded_v{int(v):03d}.png"
                _add_bytes(tar, name, png_bytes(arr))
    return objects


AMAZON_ROWS = {
    "train.csv": [("2", "Great CD", "I loved it, truly great"), ("1", "Bad", "awful, broke after a day"),
                  ("2", "Nice", 'Works "well", and\nlasts'), ("1", "Meh", "not good at all"),
                  ("2", "Superb", "best purchase ever")],
    "test.csv": [("1", "No", "terrible product"), ("2", "Yes", "excellent value")],
}


def make_amazon(path: Path) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, rows in AMAZON_ROWS.items():
            buf = io.StringIO()
            csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
            _add_bytes(tar, f"amazon_review_polarity_csv/{name}", buf.getvalue().encode())
        _add_bytes(tar, "amazon_review_polarity_csv/readme.txt", b"readme")


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
