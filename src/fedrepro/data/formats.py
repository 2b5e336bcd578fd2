"""Readers for the real on-disk formats of each dataset, and the text tokenizers.

Each reader takes the raw files exactly as `sources.fetch` leaves them (archives
are read in place, never unpacked to disk) and returns numpy arrays or a pandas
DataFrame. numpy, pandas, PIL and scipy are imported inside the functions.

Image arrays are uint8 N x C x H x W; labels int64.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import pickle
import re
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

# ----------------------------------------------------------------------------- images

_IDX_DTYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    """An IDX file (MNIST), gzipped or not, as a numpy array."""
    import numpy as np

    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open if gz else open)(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic number {data[:4].hex()})")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    body = np.frombuffer(data, dtype=dtype, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says shape {shape}, found {body.size} values")
    return body.reshape(shape)


def read_mnist(folder):
    """MNIST from its four idx(.gz) files: x uint8 N x 1 x 28 x 28, y int64."""
    import numpy as np

    folder = Path(folder)

    def pair(prefix):
        x = read_idx(folder / f"{prefix}-images-idx3-ubyte.gz")
        y = read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz")
        if len(x) != len(y):
            raise ValueError(f"{folder}: {prefix} has {len(x)} images but {len(y)} labels")
        return x[:, None].astype(np.uint8), y.astype(np.int64)

    return (*pair("train"), *pair("t10k"))


def _unpickle(tar: tarfile.TarFile, member: tarfile.TarInfo) -> dict:
    # The archive's checksum was verified by sources.fetch before we unpickle it.
    return pickle.load(tar.extractfile(member), encoding="bytes")


def read_cifar(tar_path, num_classes: int = 10):
    """CIFAR-10/100 python pickles read from the .tar.gz: x uint8 N x 3 x 32 x 32."""
    import numpy as np

    if num_classes == 10:
        train_names, test_names, key = [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels"
    elif num_classes == 100:
        train_names, test_names, key = ["train"], ["test"], b"fine_labels"
    else:
        raise ValueError(f"num_classes must be 10 or 100, got {num_classes}")
    with tarfile.open(tar_path, "r:*") as tar:
        members = {PurePosixPath(m.name).name: m for m in tar.getmembers() if m.isfile()}
        missing = [n for n in train_names + test_names if n not in members]
        if missing:
            raise ValueError(f"{tar_path}: missing CIFAR batches {missing}")

        def load(names):
            batches = [_unpickle(tar, members[n]) for n in names]
            x = np.concatenate([np.asarray(b[b"data"], dtype=np.uint8) for b in batches])
            y = np.concatenate([np.asarray(b[key], dtype=np.int64) for b in batches])
            return x.reshape(-1, 3, 32, 32), y

        return (*load(train_names), *load(test_names))


def read_svhn_mat(path):
    """One SVHN cropped-digits .mat file: X (32,32,3,N) -> N x 3 x 32 x 32; label 10 -> 0."""
    import numpy as np
    from scipy.io import loadmat

    mat = loadmat(path)
    x = np.ascontiguousarray(np.transpose(mat["X"], (3, 2, 0, 1))).astype(np.uint8)
    y = mat["y"].astype(np.int64).reshape(-1)
    y[y == 10] = 0
    return x, y


def _png_to_array(data: bytes, size: int | None = None, mode: str = "RGB"):
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        img = img.convert(mode)
        if size is not None and img.size != (size, size):
            img = img.resize((size, size), Image.BILINEAR)
        arr = np.asarray(img, dtype=np.uint8)
    return arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)


CINIC_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def read_cinic(tar_path, include_valid: bool = False):
    """CINIC-10 from CINIC-10.tar.gz (train/valid/test/<class>/*.png), sorted by path.

    Returns x_train, y_train, x_test, y_test; with `include_valid` the valid split
    is appended to train.
    """
    import numpy as np

    splits = {"train": [], "valid": [], "test": []}
    with tarfile.open(tar_path, "r:*") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if not member.isfile() or not member.name.endswith(".png") or len(parts) < 3:
                continue
            split, cls = parts[-3], parts[-2]
            if split not in splits or cls not in CINIC_CLASSES:
                continue
            splits[split].append((member.name, CINIC_CLASSES.index(cls),
                                  _png_to_array(tar.extractfile(member).read())))

    def stack(items):
        if not items:
            raise ValueError(f"{tar_path}: no PNG images found for a CINIC-10 split")
        items.sort(key=lambda t: t[0])
        return np.stack([t[2] for t in items]), np.array([t[1] for t in items], dtype=np.int64)

    train = splits["train"] + (splits["valid"] if include_valid else [])
    return (*stack(train), *stack(splits["test"]))


# ----------------------------------------------------------------------------- CelebA (LEAF)

def _celeba_smiling(attr_path) -> dict[str, int]:
    with open(attr_path) as f:
        lines = f.read().splitlines()
    names = lines[1].split()
    if "Smiling" not in names:
        raise ValueError(f"{attr_path}: no 'Smiling' column in the attribute header")
    col = names.index("Smiling")
    labels = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == len(names) + 1:
            labels[parts[0]] = (int(parts[1 + col]) + 1) // 2
    return labels


def _celeba_identities(identity_path) -> dict[str, list[str]]:
    celebs: dict[str, list[str]] = {}
    with open(identity_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                celebs.setdefault(parts[1], []).append(parts[0])
    return celebs


def leaf_sample_split(counts, train_fraction: float, seed: int):
    """LEAF's per-user sample split: user with n >= 2 samples keeps max(1, int(f n)) for train.

    Returns a boolean train mask over the concatenated users' samples.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    masks = []
    for n in counts:
        n_train = n if n < 2 else (1 if n == 2 else max(1, int(train_fraction * n)))
        mask = np.zeros(n, dtype=bool)
        mask[rng.permutation(n)[:n_train]] = True
        masks.append(mask)
    return np.concatenate(masks) if masks else np.zeros(0, dtype=bool)


def read_celeba_leaf(folder, image_size: int = 84, min_images: int = 5,
                     train_fraction: float = 0.9, seed: int = 0):
    """CelebA federated as in LEAF (`data/celeba/preprocess`, `models/celeba/cnn.py`).

    * users = celebrities of identity_CelebA.txt with >= `min_images` images;
    * label = Smiling attribute mapped {-1, 1} -> {0, 1};
    * image = aligned JPEG from img_align_celeba.zip, `resize((84, 84))` of the whole
      178x218 image (no crop, aspect not kept), then RGB. Bicubic resampling,
      Pillow's current default for `resize` (LEAF's call leaves the filter to Pillow);
    * split = LEAF's `-t sample --tf 0.9` per-user sample split (`leaf_sample_split`).
      The split is drawn with numpy under `seed`, so it has LEAF's sizes but
      not its exact random draw (LEAF uses Python's `random` with its own seed).

    Users are ordered by numeric celebrity id; `group` is the dense user index.
    Returns x_train, y_train, g_train, x_test, y_test, g_test, celebrity_ids.
    """
    import numpy as np
    from PIL import Image

    folder = Path(folder)
    labels = _celeba_smiling(folder / "list_attr_celeba.txt")
    celebs = _celeba_identities(folder / "identity_CelebA.txt")
    users = sorted((c for c, imgs in celebs.items() if len(imgs) >= min_images), key=int)
    if not users:
        raise ValueError(f"{folder}: no celebrity has >= {min_images} images")
    images = [img for c in users for img in celebs[c]]
    missing = [img for img in images if img not in labels]
    if missing:
        raise ValueError(f"{folder}/list_attr_celeba.txt has no attributes for {missing[:3]}...")
    groups = np.repeat(np.arange(len(users)), [len(celebs[c]) for c in users])
    y = np.array([labels[img] for img in images], dtype=np.int64)
    train = leaf_sample_split([len(celebs[c]) for c in users], train_fraction, seed)
    # Decode straight into the two split arrays: the full set is ~4 GB at 84x84.
    x = {True: np.empty((int(train.sum()), 3, image_size, image_size), dtype=np.uint8),
         False: np.empty((int((~train).sum()), 3, image_size, image_size), dtype=np.uint8)}
    slot = np.where(train, np.cumsum(train) - 1, np.cumsum(~train) - 1)
    with zipfile.ZipFile(folder / "img_align_celeba.zip") as zf:
        by_name = {PurePosixPath(n).name: n for n in zf.namelist() if n.endswith(".jpg")}
        for i, img in enumerate(images):
            if img not in by_name:
                raise ValueError(f"{folder}/img_align_celeba.zip has no image {img}")
            with Image.open(io.BytesIO(zf.read(by_name[img]))) as im:
                im = im.resize((image_size, image_size), Image.BICUBIC).convert("RGB")
                x[bool(train[i])][slot[i]] = np.asarray(im, dtype=np.uint8).transpose(2, 0, 1)
    ids = np.array([int(c) for c in users], dtype=np.int64)
    return x[True], y[train], groups[train], x[False], y[~train], groups[~train], ids


# ----------------------------------------------------------------------------- ModelNet40 (MVCNN)

MODELNET40_CLASSES = (
    "airplane", "bathtub", "bed", "bench", "bookshelf", "bottle", "bowl", "car", "chair", "cone",
    "cup", "curtain", "desk", "door", "dresser", "flower_pot", "glass_box", "guitar", "keyboard",
    "lamp", "laptop", "mantel", "monitor", "night_stand", "person", "piano", "plant", "radio",
    "range_hood", "sink", "sofa", "stairs", "stool", "table", "tent", "toilet", "tv_stand", "vase",
    "wardrobe", "xbox",
)
# airplane_0001.obj.shaded_v001.png -> object "airplane_0001.obj.shaded", view 1
_VIEW_RE = re.compile(r"^(?P<obj>.*?)[._-]*v?(?P<view>\d+)\.png$")


def read_modelnet_views(tar_path, resolution: int = 32, views: int = 12, channels: int = 3):
    """MVCNN 12-view renders (<class>/<train|test>/<object>..._vNNN.png inside a tar).

    Every object must have exactly `views` views; they are ordered by view number and
    resized to `resolution` (bilinear). Objects are sorted by (class, name).
    Returns x_train, y_train, x_test, y_test with x uint8 N x V x C x H x W.
    """
    import numpy as np

    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels}")
    mode = "L" if channels == 1 else "RGB"
    objects: dict[tuple[str, str, str], dict[int, object]] = {}
    with tarfile.open(tar_path, "r:*") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if not member.isfile() or len(parts) < 3 or parts[-2] not in ("train", "test"):
                continue
            match = _VIEW_RE.match(parts[-1])
            if match is None:
                continue
            cls = parts[-3]
            if cls not in MODELNET40_CLASSES:
                raise ValueError(f"{tar_path}: unknown ModelNet40 class folder {cls!r} ({member.name})")
            key = (parts[-2], cls, match["obj"])
            objects.setdefault(key, {})[int(match["view"])] = _png_to_array(
                tar.extractfile(member).read(), resolution, mode)
    out = []
    for split in ("train", "test"):
        keys = sorted(k for k in objects if k[0] == split)
        if not keys:
            raise ValueError(f"{tar_path}: no {split} renders found")
        bad = [k for k in keys if len(objects[k]) != views]
        if bad:
            raise ValueError(f"{tar_path}: object {bad[0][2]!r} has {len(objects[bad[0]])} views, expected {views}")
        x = np.stack([np.stack([objects[k][v] for v in sorted(objects[k])]) for k in keys])
        y = np.array([MODELNET40_CLASSES.index(k[1]) for k in keys], dtype=np.int64)
        out += [x, y]
    return tuple(out)


# ----------------------------------------------------------------------------- Amazon polarity

def _hashing_lines(fileobj, digest):
    for raw in fileobj:
        digest.update(raw)
        yield raw.decode("utf-8")


def _reservoir(rows, k: int | None, rng):
    """Uniform sample of k rows in one pass (Algorithm R), returned in file order."""
    if k is None:
        return list(rows)
    kept: list[tuple[int, object]] = []
    for i, row in enumerate(rows):
        if i < k:
            kept.append((i, row))
        else:
            j = int(rng.integers(0, i + 1))
            if j < k:
                kept[j] = (i, row)
    return [row for _, row in sorted(kept, key=lambda t: t[0])]


def read_amazon_polarity(tgz_path, n_train: int | None = None, n_test: int | None = None,
                         seed: int = 0, member_md5: dict[str, str] | None = None):
    """Amazon Review Polarity from its .tgz (train.csv / test.csv: label,title,text).

    Label 1 (negative) -> 0, 2 (positive) -> 1; text = title + " " + body (as torchtext).
    `n_train`/`n_test` draw a uniform random subset (one-pass reservoir sampling under
    `seed`, kept in file order); None keeps everything. Each member is hashed while it
    is read and compared with `member_md5` (filename -> md5) when given.
    Returns texts_train, y_train, texts_test, y_test (texts are lists of str).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    with tarfile.open(tgz_path, "r:*") as tar:
        members = {PurePosixPath(m.name).name: m for m in tar.getmembers() if m.isfile()}
        for name, k in (("train.csv", n_train), ("test.csv", n_test)):
            if name not in members:
                raise ValueError(f"{tgz_path}: no member {name}")
            digest = hashlib.md5()
            rows = csv.reader(_hashing_lines(tar.extractfile(members[name]), digest))
            sample = _reservoir(((int(r[0]) - 1, " ".join(r[1:])) for r in rows if r), k, rng)
            expected = (member_md5 or {}).get(name)
            if expected and digest.hexdigest() != expected:
                raise ValueError(f"{tgz_path}: member {name} has md5 {digest.hexdigest()}, expected {expected}")
            labels = np.array([lab for lab, _ in sample], dtype=np.int64)
            if labels.size and not set(np.unique(labels)) <= {0, 1}:
                raise ValueError(f"{tgz_path}: {name} has labels outside {{1, 2}}")
            out += [[text for _, text in sample], labels]
    return tuple(out)


# ----------------------------------------------------------------------------- tokenizers

# Ids reserved by the hash tokenizer (and used by the synthetic corpus).
PAD, CLS, SEP, UNK = 0, 1, 2, 3
N_SPECIAL = 4
_WORD_RE = re.compile(r"[a-z0-9']+")


def hash_token(word: str, vocab_size: int) -> int:
    """Stable id of a word in [N_SPECIAL, vocab_size) (blake2b, not Python's salted hash)."""
    h = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")
    return N_SPECIAL + h % (vocab_size - N_SPECIAL)


def chunk_layout(pieces, length: int, chunks: int, cls: int, sep: int, pad: int):
    """Lay token ids out as `chunks` equal segments, each [CLS] tokens [SEP] padding.

    The first chunks*(length/chunks - 2) tokens are used, consecutively, so every
    client of a vertical split holds one self-contained segment (DPZV: "3 paragraphs
    of the same number of tokens").
    """
    import numpy as np

    if length % chunks:
        raise ValueError(f"length {length} must be divisible by chunks {chunks}")
    seg = length // chunks
    body = seg - 2
    if body < 1:
        raise ValueError(f"length/chunks = {seg} leaves no room for tokens besides [CLS]/[SEP]")
    out = np.full((len(pieces), length), pad, dtype=np.int64)
    for i, ids in enumerate(pieces):
        for c in range(chunks):
            part = list(ids[c * body:(c + 1) * body])
            row = [cls] + part + [sep]
            out[i, c * seg: c * seg + len(row)] = row
    return out


def hash_tokenize(texts, length: int = 384, chunks: int = 3, vocab_size: int = 30522):
    """Deterministic word-hash tokenizer: lowercase words of [a-z0-9'] hashed to ids."""
    if vocab_size <= N_SPECIAL:
        raise ValueError(f"vocab_size must exceed {N_SPECIAL}, got {vocab_size}")
    body = length // chunks - 2
    pieces = [[hash_token(w, vocab_size) for w in _WORD_RE.findall(t.lower())[: body * chunks]]
              for t in texts]
    ids = chunk_layout(pieces, length, chunks, CLS, SEP, PAD)
    info = {"tokenizer": "hash", "vocab_size": vocab_size, "pad_id": PAD, "cls_id": CLS,
            "sep_id": SEP, "unk_id": UNK, "length": length, "chunks": chunks}
    return ids, info


def bert_tokenize(texts, tokenizer_dir, length: int = 384, chunks: int = 3):
    """WordPiece ids from a pre-staged Hugging Face tokenizer folder (no network)."""
    if not tokenizer_dir or not Path(tokenizer_dir).is_dir():
        raise FileNotFoundError(
            f"tokenizer: bert needs `tokenizer_dir` pointing to a pre-staged Hugging Face tokenizer "
            f"folder (e.g. bert-base-uncased with vocab.txt and tokenizer_config.json); got {tokenizer_dir!r}. "
            f"Use `tokenizer: hash` to run without one.")
    try:
        from transformers import AutoTokenizer
    except ImportError as err:
        raise ImportError("tokenizer: bert needs the `transformers` package; install it or use "
                          "`tokenizer: hash`") from err
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    body = length // chunks - 2
    pieces = [tok(t, add_special_tokens=False, truncation=True, max_length=body * chunks)["input_ids"]
              for t in texts]
    ids = chunk_layout(pieces, length, chunks, tok.cls_token_id, tok.sep_token_id, tok.pad_token_id)
    info = {"tokenizer": "bert", "tokenizer_dir": str(tokenizer_dir), "vocab_size": tok.vocab_size,
            "pad_id": tok.pad_token_id, "cls_id": tok.cls_token_id, "sep_id": tok.sep_token_id,
            "unk_id": tok.unk_token_id, "length": length, "chunks": chunks}
    return ids, info


# ----------------------------------------------------------------------------- tabular

ADULT_COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
                 "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
                 "hours-per-week", "native-country", "income")


def read_adult(data_path, test_path):
    """Both UCI Adult files combined into one DataFrame (raw values, '?' kept).

    adult.test starts with a "|1x3 Cross validator" line and its labels end in '.';
    the '.' is stripped here so both files share the labels '<=50K' / '>50K'.
    """
    import pandas as pd

    def load(path, skip):
        return pd.read_csv(path, names=list(ADULT_COLUMNS), skipinitialspace=True, skiprows=skip,
                           header=None, comment="|", dtype={"age": "int64"})

    df = pd.concat([load(data_path, 0), load(test_path, 0)], ignore_index=True)
    df = df.dropna(how="all")
    df["income"] = df["income"].str.rstrip(".")
    return df


_CREDIT_LABELS = ("default", "default payment next month", "default.payment.next.month")


def read_credit(path):
    """UCI credit-card default data from the CSV copy or the canonical .xls.

    Columns are normalised to LIMIT_BAL, SEX, ..., PAY_AMT6, default (ID dropped).
    """
    import pandas as pd

    path = Path(path)
    if path.suffix.lower() in (".xls", ".xlsx"):
        try:
            df = pd.read_excel(path, header=1)
        except ImportError as err:
            raise ImportError(f"reading {path.name} needs an Excel reader for pandas (`xlrd` for .xls); "
                              f"install it, or use the CSV copy (prepare option raw: csv)") from err
    else:
        df = pd.read_csv(path)
    df = df.drop(columns=[c for c in df.columns if str(c).upper() == "ID"])
    label = [c for c in df.columns if c in _CREDIT_LABELS]
    if len(label) != 1:
        raise ValueError(f"{path}: expected one label column among {_CREDIT_LABELS}, found {label}")
    return df.rename(columns={label[0]: "default"})


def read_retired_adult(path):
    """adult_reconstruction.csv (Ding et al. 2021); '?' and empty cells become NaN."""
    import pandas as pd

    df = pd.read_csv(path, na_values=["?"], skipinitialspace=True)
    for col in df.columns:
        if not pd.api.types.is_numeric_dtype(df[col]):
            df[col] = df[col].str.strip()
    return df
