"""Where the raw files of each dataset come from, and how to get them safely.

Every raw file has a filename (relative to `data_root/<dataset>/`), canonical
URLs (tried in order) and, where one is published, a checksum. `fetch` looks for
each file in this order:

1. a pre-staged copy in `data_root/<dataset>/<filename>` (offline clusters);
2. a copy shipped inside the package (`fedrepro/data/files/*.gz`: Adult, Credit Card),
   decompressed into `data_root/<dataset>/`;
3. a download (urllib, to a temporary file in the target folder, then an atomic rename:
   `fedrepro.atomic.atomic_write`).

Every copy is checked against its checksum. Where no checksum is published
(`md5 = sha256 = None`, each marked with a comment) the file's sha256 is computed,
logged and returned in the `FetchedFile` record (prepare writes it into meta.json)
so that a user can pin it. If no route works, `DataUnavailableError` names the
dataset, the missing files, the folder to put them in and where to get them.

Pure standard library: importing this module is cheap.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.request import urlopen

from fedrepro.data.catalog import get as catalog_get
from fedrepro.atomic import atomic_write

log = logging.getLogger(__name__)

SHIPPED_DIR = Path(__file__).parent / "files"
_CHUNK = 1 << 20

# Test hook, never set in a real run: a JSON file named by this environment variable,
# {"files": {filename: {"md5" or "sha256": hex}}, "amazon_members": {member: md5}}, replaces the
# published checksums of those files by the checksums of tiny generated stand-ins in the real
# formats (tests/paperscale). Every use is logged as a warning.
CHECKSUM_OVERRIDES_ENV = "FEDREPRO_CHECKSUM_OVERRIDES"


def checksum_overrides() -> dict:
    path = os.environ.get(CHECKSUM_OVERRIDES_ENV)
    return json.loads(Path(path).read_text()) if path else {}


@dataclass(frozen=True)
class RawFile:
    filename: str                    # relative to data_root/<dataset>/
    urls: tuple[str, ...] = ()       # canonical source first, mirrors after
    md5: str | None = None           # of the file as stored on disk (uncompressed for shipped)
    sha256: str | None = None
    shipped: str | None = None       # gz copy in fedrepro/data/files/


@dataclass(frozen=True)
class Source:
    files: tuple[RawFile, ...]
    homepage: str
    licence: str
    citation: str
    manual: str = ""                 # extra hint for pre-staging by hand


@dataclass
class FetchedFile:
    filename: str
    path: Path
    origin: str                      # "pre-staged" | "shipped" | "downloaded"
    url: str | None
    checksums: dict[str, str] = field(default_factory=dict)  # algo -> hex digest
    verified: bool = False           # True when a published checksum matched

    def as_dict(self) -> dict:
        return {"filename": self.filename, "origin": self.origin, "url": self.url,
                "checksums": self.checksums, "verified": self.verified}


class DataUnavailableError(RuntimeError):
    """No pre-staged, shipped or downloadable copy of a raw file could be used."""


class ChecksumError(RuntimeError):
    """A raw file does not match its published checksum."""


def _drive(file_id: str) -> str:
    # drive.usercontent with confirm=t skips the "cannot scan for viruses" page of large files
    return f"https://drive.usercontent.google.com/download?id={file_id}&export=download&confirm=t"


_MNIST_MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
_UCI_ADULT = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"


def _mnist(name: str, md5: str) -> RawFile:
    return RawFile(name, tuple(m + name for m in _MNIST_MIRRORS), md5=md5)


def _cifar(name: str, md5: str) -> Source:
    """CIFAR-10 and CIFAR-100: one archive each, from the same page and report."""
    return Source(
        files=(RawFile(name, (f"https://www.cs.toronto.edu/~kriz/{name}",), md5=md5),),
        homepage="https://www.cs.toronto.edu/~kriz/cifar.html",
        licence="no licence stated by the authors; cite the tech report",
        citation="Krizhevsky 2009, Learning multiple layers of features from tiny images",
    )


# Checksums are the ones torchvision / torchtext pin for the same files unless noted.
SOURCES: dict[str, Source] = {
    "mnist": Source(
        files=(
            _mnist("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
            _mnist("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
            _mnist("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"),
            _mnist("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"),
        ),
        homepage="http://yann.lecun.com/exdb/mnist/",
        licence="CC BY-SA 3.0 (Y. LeCun and C. Cortes)",
        citation="LeCun et al. 1998, Gradient-based learning applied to document recognition",
    ),
    "cifar10": _cifar("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),
    "cifar100": _cifar("cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85"),
    "svhn": Source(
        files=(
            RawFile("train_32x32.mat", ("http://ufldl.stanford.edu/housenumbers/train_32x32.mat",),
                    md5="e26dedcc434d2e4c54c9b2d4a06d8373"),
            RawFile("test_32x32.mat", ("http://ufldl.stanford.edu/housenumbers/test_32x32.mat",),
                    md5="eb5a983be6a315427106f1b164d9cef3"),
        ),
        homepage="http://ufldl.stanford.edu/housenumbers/",
        licence="non-commercial use only (SVHN terms)",
        citation="Netzer et al. 2011, Reading digits in natural images with unsupervised feature learning",
    ),
    "cinic10": Source(
        # No checksum is published (Edinburgh DataShare, torchvision-style loaders use md5=None).
        files=(RawFile("CINIC-10.tar.gz",
                       ("https://datashare.ed.ac.uk/bitstream/handle/10283/3192/CINIC-10.tar.gz",)),),
        homepage="https://github.com/BayesWatch/cinic-10",
        licence="MIT",
        citation="Darlow et al. 2018, CINIC-10 is not ImageNet or CIFAR-10",
    ),
    "celeba": Source(
        files=(
            RawFile("img_align_celeba.zip", (_drive("0B7EVK8r0v71pZjFTYXZWM3FlRnM"),),
                    md5="00d2c5bc6d35e252742224ab0c1e8fcb"),
            RawFile("list_attr_celeba.txt", (_drive("0B7EVK8r0v71pblRyaVFSWGxPY0U"),),
                    md5="75e246fa4810816ffd6ee81facbd244c"),
            RawFile("identity_CelebA.txt", (_drive("1_ee_0u7vcNLOfNLegJRHmolfH5ICW-XS"),),
                    md5="32bd1bd63d3c78cd57e08160ec5ed1e2"),
        ),
        homepage="https://mmlab.ie.cuhk.edu.hk/projects/CelebA.html",
        licence="non-commercial research purposes only (CelebA agreement)",
        citation="Liu et al. 2015, Deep learning face attributes in the wild; Caldas et al. 2018, LEAF",
        manual="Google Drive may refuse automated downloads (quota); download the three files "
               "from the CelebA homepage ('Align&Cropped Images', 'Anno') by hand.",
    ),
    "modelnet40": Source(
        # No checksum is published for the MVCNN renders.
        files=(RawFile("shaded_images.tar.gz", ("http://supermoe.cs.umass.edu/shape_recog/shaded_images.tar.gz",)),),
        homepage="https://github.com/jongchyisu/mvcnn_pytorch",
        licence="ModelNet: academic research use (Princeton ModelNet); renders by Su et al.",
        citation="Wu et al. 2015, 3D ShapeNets; Su et al. 2015/2018, Multi-view CNNs (12 shaded views)",
        manual="The archive unpacks to modelnet40_images_new_12x/<class>/<train|test>/"
               "<class>_<id>.obj.shaded_v001..v012.png; the tar.gz itself is what is read.",
    ),
    "amazon_polarity": Source(
        # The fast.ai mirror's archive has no published checksum. The md5s of its members
        # train.csv / test.csv are torchtext's (AMAZON_MEMBER_MD5) and are checked while reading.
        files=(RawFile("amazon_review_polarity_csv.tgz",
                       ("https://s3.amazonaws.com/fast-ai-nlp/amazon_review_polarity_csv.tgz",)),),
        homepage="https://github.com/zhangxiangxiao/Crepe",
        licence="review texts (c) Amazon, collected by McAuley & Leskovec 2013; "
                "the Hugging Face dataset card lists Apache-2.0",
        citation="Zhang, Zhao and LeCun 2015, Character-level convolutional networks for text classification",
        manual="Zhang's original tar.gz (Google Drive id 0Bz8a_Dbh9QhbaW12WVVZS2drcnM, md5 "
               "fe39f8b653cada45afd5792e0f0e8f9b) holds the same train.csv/test.csv; rename it to "
               "amazon_review_polarity_csv.tgz to use it.",
    ),
    "adult": Source(
        files=(
            RawFile("adult.data", (_UCI_ADULT + "adult.data",), md5="5d7c39d7b8804f071cdd1f2a7c460872",
                    shipped="adult.data.gz"),
            RawFile("adult.test", (_UCI_ADULT + "adult.test",), md5="35238206dfdf7f1fe215bbb874adecdc",
                    shipped="adult.test.gz"),
        ),
        homepage="https://archive.ics.uci.edu/dataset/2/adult",
        licence="CC BY 4.0 (UCI Machine Learning Repository)",
        citation="Becker and Kohavi 1996, Adult, UCI Machine Learning Repository",
    ),
    "credit": Source(
        # The canonical UCI file is an .xls (CREDIT_XLS below, prepare option raw: xls). The
        # shipped CSV is a 30,000-row copy (ID dropped, label renamed `default`); no URL
        # serves exactly these bytes, so its md5 (of our shipped copy) is the reference.
        files=(RawFile("UCI_Credit_Card.csv", (), md5="7ba16a7f65d3b5e0ccb5b52dfa5e56e6",
                       shipped="UCI_Credit_Card.csv.gz"),),
        homepage="https://archive.ics.uci.edu/dataset/350/default+of+credit+card+clients",
        licence="CC BY 4.0 (UCI Machine Learning Repository)",
        citation="Yeh and Lien 2009, The comparisons of data mining techniques for the predictive "
                 "accuracy of probability of default of credit card clients",
    ),
    "retired_adult": Source(
        # No checksum is published in the folktables repository.
        files=(RawFile("adult_reconstruction.csv",
                       ("https://raw.githubusercontent.com/socialfoundations/folktables/main/adult_reconstruction.csv",)),),
        homepage="https://github.com/socialfoundations/folktables",
        licence="MIT (folktables repository); derived from IPUMS CPS data",
        citation="Ding, Hardt, Miller and Schmidt 2021, Retiring Adult: new datasets for fair machine learning",
    ),
}

# The canonical UCI spreadsheet of the credit data (checksum not published).
CREDIT_XLS = RawFile(
    "default of credit card clients.xls",
    ("https://archive.ics.uci.edu/ml/machine-learning-databases/00350/default%20of%20credit%20card%20clients.xls",),
)

# md5 of the members of the Amazon archive (torchtext's _EXTRACTED_FILES_MD5).
AMAZON_MEMBER_MD5 = {"train.csv": "520937107c39a2d1d1f66cd410e9ed9e",
                     "test.csv": "f4c8bded2ecbde5f996b675db6228f16"}


def amazon_member_md5() -> dict[str, str]:
    """AMAZON_MEMBER_MD5, or the test hook's replacements (CHECKSUM_OVERRIDES_ENV)."""
    return {**AMAZON_MEMBER_MD5, **checksum_overrides().get("amazon_members", {})}

# Datasets that need no raw files (bundled with a library or generated).
NO_RAW_FILES = {
    "digits": "scikit-learn (sklearn.datasets.load_digits, bundled UCI optical digits, CC BY 4.0)",
    "shapes": "generated by fedrepro.data.shapes",
    "textures": "generated by fedrepro.data.textures",
}


def source(dataset: str) -> Source | None:
    """The `Source` of a real dataset; None for generated or library-bundled ones."""
    info = catalog_get(dataset)
    if info.synthetic or dataset in NO_RAW_FILES:
        return None
    return SOURCES[dataset]


def has_shipped(dataset: str) -> bool:
    """True when every raw file of `dataset` has a copy inside the package."""
    src = source(dataset)
    return src is not None and all(f.shipped for f in src.files)


def raw_files(dataset: str) -> list[str]:
    """Filenames (relative to `data_root/<dataset>/`) that `download` produces; [] if none."""
    src = source(dataset)
    return [] if src is None else [f.filename for f in src.files]


def file_digest(path: str | os.PathLike, algo: str = "sha256", gunzip: bool = False) -> str:
    """Hex digest of a file (of its decompressed content when `gunzip`)."""
    h = hashlib.new(algo)
    opener = gzip.open if gunzip else open
    with opener(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _expected(raw: RawFile) -> dict[str, str]:
    override = checksum_overrides().get("files", {}).get(raw.filename)
    if override:
        log.warning("checksum of %s overridden by %s (test data)", raw.filename, os.environ[CHECKSUM_OVERRIDES_ENV])
        return dict(override)
    return {algo: value for algo, value in (("md5", raw.md5), ("sha256", raw.sha256)) if value}


def verify(raw: RawFile, path: Path, gunzip: bool = False) -> tuple[dict[str, str], bool]:
    """Check `path` against the published checksums of `raw`.

    Returns (digests, verified). Raises ChecksumError on a mismatch. Without a
    published checksum the sha256 is computed and logged so it can be pinned.
    """
    expected = _expected(raw)
    if not expected:
        digest = file_digest(path, "sha256", gunzip)
        log.warning("no published checksum for %s; computed sha256=%s (pin it in fedrepro/data/sources.py)",
                    raw.filename, digest)
        return {"sha256": digest}, False
    digests = {algo: file_digest(path, algo, gunzip) for algo in expected}
    for algo, value in expected.items():
        if digests[algo] != value.lower():
            raise ChecksumError(
                f"{path}: {algo} is {digests[algo]}, expected {value} for {raw.filename}. "
                f"The file is corrupt, truncated or a different version; delete it and fetch again."
                + _html_hint(path))
    return digests, True


def _html_hint(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(512).lstrip().lower()
    except OSError:
        return ""
    if head.startswith(b"<!doctype html") or head.startswith(b"<html"):
        return " The server sent an HTML page (e.g. a Google Drive quota or confirmation page), not the file."
    return ""


def _from_shipped(raw: RawFile, target: Path) -> FetchedFile:
    shipped = SHIPPED_DIR / raw.shipped
    digests, ok = verify(raw, shipped, gunzip=True)

    def gunzip(tmp: Path) -> None:
        with gzip.open(shipped, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, _CHUNK)

    atomic_write(target, gunzip)
    return FetchedFile(raw.filename, target, "shipped", None, digests, ok)


def _download(raw: RawFile, url: str, target: Path, timeout: float) -> FetchedFile:
    """Download `url` to a temporary file beside `target`, verify, then rename."""
    checked = {}

    def download_and_verify(tmp: Path) -> None:
        log.info("downloading %s -> %s", url, target)
        with urlopen(url, timeout=timeout) as response, open(tmp, "wb") as dst:
            shutil.copyfileobj(response, dst, _CHUNK)
        checked["digests"], checked["ok"] = verify(raw, tmp)

    atomic_write(target, download_and_verify)
    return FetchedFile(raw.filename, target, "downloaded", url, checked["digests"], checked["ok"])


def fetch_file(raw: RawFile, folder: str | os.PathLike, allow_download: bool = True,
               timeout: float = 60.0) -> FetchedFile:
    """Make one raw file available in `folder`; see the module docstring for the order."""
    target = Path(folder) / raw.filename
    if target.exists():
        digests, ok = verify(raw, target)
        return FetchedFile(raw.filename, target, "pre-staged", None, digests, ok)
    if raw.shipped and (SHIPPED_DIR / raw.shipped).exists():
        return _from_shipped(raw, target)
    errors = []
    if allow_download:
        for url in raw.urls:
            try:
                return _download(raw, url, target, timeout)
            except (OSError, ChecksumError, ValueError) as err:  # URLError is an OSError
                errors.append(f"{url}: {err}")
    raise DataUnavailableError(_unavailable_message(raw, target, errors, allow_download))


def _unavailable_message(raw: RawFile, target: Path, errors: list[str], allow_download: bool) -> str:
    checks = ", ".join(f"{a} {v}" for a, v in _expected(raw).items()) or "no published checksum"
    lines = [f"raw file {raw.filename!r} is not available.",
             f"Pre-stage it as {target} ({checks})."]
    if raw.urls:
        lines.append("Canonical source: " + " or ".join(raw.urls))
    if not allow_download:
        lines.append("Downloading was disabled.")
    lines += [f"  download failed: {e}" for e in errors]
    return "\n".join(lines)


def fetch(dataset: str, data_root: str | os.PathLike, allow_download: bool = True,
          timeout: float = 60.0) -> list[FetchedFile]:
    """Make every raw file of `dataset` available under `data_root/<dataset>/`.

    Raises DataUnavailableError naming the dataset, the missing files, the folder
    to pre-stage them in and the canonical URLs; ChecksumError on a corrupt copy.
    """
    src = source(dataset)
    if src is None:
        return []
    folder = Path(data_root) / dataset
    fetched, missing = [], []
    for raw in src.files:
        try:
            fetched.append(fetch_file(raw, folder, allow_download, timeout))
        except DataUnavailableError as err:
            missing.append(str(err))
    if missing:
        names = [f.filename for f in src.files]
        raise DataUnavailableError(
            f"dataset {dataset!r}: raw files missing. It needs {names} in {folder}/ "
            f"(see {src.homepage}). {src.manual}\n" + "\n".join(missing))
    return fetched


def download(dataset: str, data_root: str | os.PathLike, timeout: float = 60.0) -> list[Path]:
    """Entry point of the download rule: fetch every raw file and return their paths."""
    return [f.path for f in fetch(dataset, data_root, allow_download=True, timeout=timeout)]


def provenance(dataset: str, fetched: list[FetchedFile] | None = None) -> dict:
    """What meta.json records about where the data came from."""
    src = source(dataset)
    if src is None:
        origin = NO_RAW_FILES.get(dataset, "generated by fedrepro.data.synthetic")
        return {"source": origin}
    record = {
        "source": src.homepage,
        "licence": src.licence,
        "citation": src.citation,
        "urls": {f.filename: list(f.urls) for f in src.files},
        "published_checksums": {f.filename: _expected(f) for f in src.files},
    }
    if fetched is not None:
        record["files"] = [f.as_dict() for f in fetched]
    return record
