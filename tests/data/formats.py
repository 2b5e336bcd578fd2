"""Tiny files in each real on-disk raw format, for the data-stage tests and the paper-scale smoke test.

Every maker writes a small but format-faithful file and returns the arrays it
encoded, so tests can compare what a reader returns with what was written.
`stage_all` writes a whole data_root (every paper-scale data set) and the checksum
override file that `fedrepro.data.sources.CHECKSUM_OVERRIDES_ENV` names.
"""

from __future__ import annotations

import csv
import gzip
import io
import pickle
import struct
import tarfile
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image


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


def _labels(rng, num_classes: int, n: int, balanced: bool, start: int = 0) -> np.ndarray:
    """Random labels, or every class in turn from class `start` on (so that class-per-client partitions
    find each class, also when the cycle is spread over several batch files)."""
    return rng.permutation((start + np.arange(n)) % num_classes) if balanced else rng.integers(0, num_classes, n)


def make_cifar(path: Path, num_classes: int = 10, per_batch: int = 4, seed: int = 0, balanced: bool = False,
               per_test: int | None = None) -> dict:
    rng = np.random.default_rng(seed)
    if num_classes == 10:
        top, train, test, key = "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels"
    else:
        top, train, test, key = "cifar-100-python", ["train"], ["test"], b"fine_labels"
    out, written = {}, 0   # training labels continue the class cycle across batch files
    with tarfile.open(path, "w:gz") as tar:
        for name in train + test:
            n = per_test if name in test and per_test else per_batch
            data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
            labels = _labels(rng, num_classes, n, balanced, start=0 if name in test else written).tolist()
            written += 0 if name in test else n
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


# ----------------------------------------------------------------------------- a whole data_root

RETIRED_CATEGORIES = {
    "workclass": ["Private", "Self-emp", "Gov"], "education": ["HS-grad", "Bachelors", "Masters"],
    "marital-status": ["Married", "Never-married"], "relationship": ["Husband", "Wife", "Own-child"],
    "race": ["White", "Black", "Other"], "native-country": ["United-States", "Mexico"],
    "occupation": ["Sales", "Tech-support", "Craft-repair"], "gender": ["Male", "Female"],
}


def make_retired_adult(path: Path, n: int = 400, seed: int = 0) -> None:
    """adult_reconstruction.csv (Ding et al. 2021 layout): numeric income, '?' for missing."""
    rng = np.random.default_rng(seed)
    columns = ["hours-per-week", "age", "capital-gain", "capital-loss", "education-num", "income",
               *RETIRED_CATEGORIES]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for i in range(n):
            row = [int(rng.integers(10, 60)), int(rng.integers(17, 90)), int(rng.integers(0, 2) * rng.integers(0, 9999)),
                   0, int(rng.integers(1, 16)), int(rng.integers(5000, 120000))]
            row += [str(rng.choice(v)) for v in RETIRED_CATEGORIES.values()]
            if i == 3:
                row[6] = "?"
            w.writerow(row)


def make_svhn_sized(path: Path, n: int, seed: int = 0) -> None:
    """An SVHN .mat with `n` images and every digit in turn (label 10 stands for 0)."""
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    y = (rng.permutation(np.arange(n) % 10) + 1).astype(np.uint8)[:, None]
    savemat(path, {"X": rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8), "y": y})


def make_cinic_sized(path: Path, per_class: int, seed: int = 0) -> None:
    from fedrepro.data.formats import CINIC_CLASSES

    rng = np.random.default_rng(seed)
    with tarfile.open(path, "w:gz") as tar:
        for split in ("train", "valid", "test"):
            for cls in CINIC_CLASSES:
                for i in range(per_class if split == "train" else max(1, per_class // 4)):
                    data = png_bytes(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
                    _add_bytes(tar, f"CINIC-10/{split}/{cls}/img{i}.png", data)


def make_modelnet_sized(path: Path, classes: int, per_class: int, size: int = 32, seed: int = 0) -> None:
    from fedrepro.data.formats import MODELNET40_CLASSES

    rng = np.random.default_rng(seed)
    with tarfile.open(path, "w:gz") as tar:
        for cls in MODELNET40_CLASSES[:classes]:
            for split, count in (("train", per_class), ("test", max(1, per_class // 2))):
                for k in range(count):
                    for v in range(1, 13):
                        arr = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                        _add_bytes(tar, f"modelnet40_images_new_12x/{cls}/{split}/{cls}_{split}{k:04d}.obj.shaded_v{v:03d}.png",
                                   png_bytes(arr))


def make_amazon_sized(path: Path, n_train: int, n_test: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    words = ["great", "awful", "good", "bad", "love", "broke", "fine", "waste", "superb", "meh"]
    with tarfile.open(path, "w:gz") as tar:
        for name, n in (("train.csv", n_train), ("test.csv", n_test)):
            buf = io.StringIO()
            rows = [(str(1 + i % 2), "title", " ".join(rng.choice(words, 12))) for i in range(n)]
            csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
            _add_bytes(tar, f"amazon_review_polarity_csv/{name}", buf.getvalue().encode())


def stage_all(root: Path, n: int = 60) -> dict:
    """Every paper-scale raw file under root/<dataset>/ in its real format, about `n` training
    images per image data set (every class present); returns the checksum override mapping
    (md5 of each generated file, and of the Amazon members) for CHECKSUM_OVERRIDES_ENV."""
    import hashlib

    from fedrepro.data import sources

    root = Path(root)
    make_mnist(root / "mnist", n_train=n, n_test=max(10, n // 3))
    (root / "cifar10").mkdir(parents=True, exist_ok=True)
    make_cifar(root / "cifar10" / "cifar-10-python.tar.gz", 10, per_batch=n // 5, balanced=True, per_test=n // 3)
    (root / "cifar100").mkdir(parents=True, exist_ok=True)
    make_cifar(root / "cifar100" / "cifar-100-python.tar.gz", 100, per_batch=max(n, 100), balanced=True, per_test=40)
    (root / "svhn").mkdir(parents=True, exist_ok=True)
    # FedAL's Fig. 6 gradient variances need two batches of client 0's data and of the public set
    make_svhn_sized(root / "svhn" / "train_32x32.mat", max(n, 100))
    make_svhn_sized(root / "svhn" / "test_32x32.mat", max(10, n // 3), seed=1)
    (root / "cinic10").mkdir(parents=True, exist_ok=True)
    make_cinic_sized(root / "cinic10" / "CINIC-10.tar.gz", per_class=max(2, n // 10))
    make_celeba(root / "celeba", counts=tuple(5 + (i % 3) for i in range(12)))
    (root / "modelnet40").mkdir(parents=True, exist_ok=True)
    make_modelnet_sized(root / "modelnet40" / "shaded_images.tar.gz", classes=4, per_class=3)
    (root / "amazon_polarity").mkdir(parents=True, exist_ok=True)
    make_amazon_sized(root / "amazon_polarity" / "amazon_review_polarity_csv.tgz", n, max(10, n // 3))
    (root / "retired_adult").mkdir(parents=True, exist_ok=True)
    make_retired_adult(root / "retired_adult" / "adult_reconstruction.csv")
    files = {}
    for dataset in ("mnist", "cifar10", "cifar100", "svhn", "cinic10", "celeba", "modelnet40",
                    "amazon_polarity", "retired_adult"):
        for name in sources.raw_files(dataset):
            path = root / dataset / name
            if not path.exists():
                raise FileNotFoundError(f"stage_all wrote no {path}: the maker and sources.py disagree on the name")
            files[name] = {"md5": sources.file_digest(path, "md5")}
    members = {}
    with tarfile.open(root / "amazon_polarity" / sources.raw_files("amazon_polarity")[0]) as tar:
        for m in tar.getmembers():
            if m.isfile():
                members[Path(m.name).name] = hashlib.md5(tar.extractfile(m).read()).hexdigest()
    return {"files": files, "amazon_members": members}
