"""What each dataset is: kind, classes, split sizes and the shape of one sample.

Pure Python (no numpy): the config checker and the Snakefile import it.

`n_train`/`n_test` are the sizes `prepare_dataset` produces with its default
options. Where options change them (`amazon_polarity` subsampling, synthetic
sizes, `modelnet40` resolution) the prepared `meta.json` holds the actual values.
Where the exact count depends on raw files we could not inspect (CelebA's LEAF
split, Retired Adult after dropping missing values) `sizes_exact` is False and the
numbers are estimates (see the description).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

KINDS = ("image", "multiview", "text", "tabular")


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    kind: str                      # one of KINDS
    num_classes: int
    n_train: int
    n_test: int
    input_shape: tuple[int, ...]   # one sample: C,H,W | V,C,H,W | L | d
    synthetic: bool
    description: str
    sizes_exact: bool = True

    def as_dict(self) -> dict:
        d = asdict(self)
        d["input_shape"] = list(self.input_shape)
        return d


_ALL = [
    DatasetInfo("digits", "image", 10, 1347, 450, (1, 8, 8), False,
                "scikit-learn's bundled UCI optical digits (1,797 8x8 images, 0..16 scaled "
                "to 0..255), stratified 3:1 split; offline MNIST stand-in"),
    DatasetInfo("mnist", "image", 10, 60000, 10000, (1, 28, 28), False,
                "MNIST handwritten digits (LeCun et al.), idx files"),
    DatasetInfo("cifar10", "image", 10, 50000, 10000, (3, 32, 32), False,
                "CIFAR-10 (Krizhevsky 2009), python pickle batches"),
    DatasetInfo("cifar100", "image", 100, 50000, 10000, (3, 32, 32), False,
                "CIFAR-100 (Krizhevsky 2009), 100 fine labels"),
    DatasetInfo("svhn", "image", 10, 73257, 26032, (3, 32, 32), False,
                "SVHN cropped digits (Netzer et al. 2011), train + test .mat; label 10 -> 0"),
    DatasetInfo("cinic10", "image", 10, 90000, 90000, (3, 32, 32), False,
                "CINIC-10 (Darlow et al. 2018), train split as train (option: add valid), test split as test"),
    DatasetInfo("celeba", "image", 2, 175588, 24700, (3, 84, 84), False,
                "CelebA as LEAF federates it: users are celebrities with >= 5 images, label Smiling, "
                "84x84; per-user 0.9/0.1 sample split. Sizes are estimates (200,288 images of "
                "9,343 celebrities in total); meta.json has the exact counts",
                sizes_exact=False),
    DatasetInfo("modelnet40", "multiview", 40, 9843, 2468, (12, 3, 32, 32), False,
                "ModelNet40 (Wu et al. 2015) rendered as 12 shaded views per object (MVCNN); "
                "resolution option (default 32)"),
    DatasetInfo("amazon_polarity", "text", 2, 100000, 10000, (384,), False,
                "Amazon Review Polarity (Zhang et al. 2015; 3,600,000 train / 400,000 test reviews), "
                "title + text tokenized to 3 chunks of 128 tokens; uniformly subsampled by default "
                "(options n_train/n_test; null keeps all)"),
    DatasetInfo("adult", "tabular", 2, 33916, 11306, (102,), False,
                "UCI Adult income: both files combined, rows with '?' dropped (45,222), 3:1 split; "
                "sensitive attribute sex"),
    DatasetInfo("credit", "tabular", 2, 22500, 7500, (85,), False,
                "UCI default of credit card clients (Taiwan), 30,000 rows, 3:1 split; sensitive attribute SEX"),
    DatasetInfo("retired_adult", "tabular", 2, 33750, 11250, (101,), False,
                "Retired Adult (Ding et al. 2021, adult_reconstruction.csv): missing rows dropped, "
                "income > 50,000, 3:1 split; sensitive attribute gender. Sizes are estimates "
                "('around 45,000 entries')",
                sizes_exact=False),
    DatasetInfo("synthetic_multiview", "multiview", 10, 2000, 500, (12, 1, 16, 16), True,
                "ModelNet40 stand-in: 12 views = 12 fixed random projections of class prototypes + noise"),
    DatasetInfo("synthetic_text", "text", 2, 2000, 500, (96,), True,
                "Amazon stand-in: binary sentiment token sequences with polarity token sets and label noise"),
    DatasetInfo("shapes", "image", 10, 2000, 1000, (3, 16, 16), True,
                "FedSC stand-in: 10 mirror-symmetric shapes at random position and size, random grey levels "
                "with a small tint, gradient background, pixel noise (fedrepro.data.shapes); options set the "
                "per-class counts, image size and nuisances"),
    DatasetInfo("textures", "image", 10, 2000, 1000, (3, 16, 16), True,
                "FedSC second stand-in: 10 mirror-symmetric textures (stripes, checkerboard, dots, grid, "
                "cross-hatch, blobs, speckle, waves, bricks) filling the image, random period, phase, small "
                "rotation, grey levels with a tint and pixel noise (fedrepro.data.textures); options set the "
                "per-class counts, image size and nuisances"),
    DatasetInfo("synthetic_tabular", "tabular", 2, 3000, 1000, (17,), True,
                "fair-tabular stand-in: binary sensitive s with minority fraction, age column, "
                "label correlated with s, one-hot columns"),
]

DATASETS: dict[str, DatasetInfo] = {info.name: info for info in _ALL}


def get(name: str) -> DatasetInfo:
    """The catalog entry of `name`, or a clear error listing the allowed names."""
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; allowed values: {', '.join(DATASETS)}")
    return DATASETS[name]
