import logging
import re
import urllib.error
from dataclasses import replace

import pytest

from fedrepro.data import sources
from fedrepro.data.catalog import DATASETS
from fedrepro.data.sources import ChecksumError, DataUnavailableError, RawFile


def _entry(monkeypatch, dataset, *files):
    monkeypatch.setitem(sources.SOURCES, dataset, replace(sources.SOURCES[dataset], files=tuple(files)))


def _offline(monkeypatch):
    def refuse(url, timeout=None):
        raise urllib.error.URLError("network is unreachable")
    monkeypatch.setattr(sources, "urlopen", refuse)


def test_every_real_dataset_has_a_source_with_well_formed_checksums():
    for name, info in DATASETS.items():
        if info.synthetic or name == "digits":
            assert sources.raw_files(name) == []
            continue
        src = sources.SOURCES[name]
        assert src.files and src.licence and src.homepage
        for raw in src.files:
            assert raw.urls or raw.shipped, raw.filename
            assert raw.md5 is None or re.fullmatch(r"[0-9a-f]{32}", raw.md5)
            assert raw.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", raw.sha256)


def test_raw_files_lists_relative_names_and_rejects_unknown_datasets():
    assert sources.raw_files("mnist") == ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                          "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    assert sources.raw_files("adult") == ["adult.data", "adult.test"]
    with pytest.raises(KeyError, match="allowed values: .*mnist"):
        sources.raw_files("imagenet")


def test_prestaged_file_with_good_checksum_is_used_without_network(tmp_path, monkeypatch):
    folder = tmp_path / "cifar10"
    folder.mkdir()
    (folder / "cifar-10-python.tar.gz").write_bytes(b"tiny archive")
    md5 = sources.file_digest(folder / "cifar-10-python.tar.gz", "md5")
    _entry(monkeypatch, "cifar10", RawFile("cifar-10-python.tar.gz", ("https://example.invalid/x",), md5=md5))
    _offline(monkeypatch)
    [got] = sources.fetch("cifar10", tmp_path)
    assert got.origin == "pre-staged" and got.verified and got.path == folder / "cifar-10-python.tar.gz"
    assert got.checksums == {"md5": md5}


def test_prestaged_file_with_bad_checksum_fails_clearly(tmp_path, monkeypatch):
    (tmp_path / "cifar10").mkdir()
    (tmp_path / "cifar10" / "cifar-10-python.tar.gz").write_bytes(b"truncated")
    _offline(monkeypatch)
    with pytest.raises(ChecksumError, match=r"md5 is [0-9a-f]{32}, expected c58f30108f718f92721af3b95e74349a"
                                            r" for cifar-10-python.tar.gz.*delete it"):
        sources.fetch("cifar10", tmp_path)


def test_missing_and_offline_names_dataset_files_path_and_url(tmp_path, monkeypatch):
    _offline(monkeypatch)
    with pytest.raises(DataUnavailableError) as err:
        sources.fetch("svhn", tmp_path)
    msg = str(err.value)
    assert "dataset 'svhn'" in msg and "train_32x32.mat" in msg and "test_32x32.mat" in msg
    assert str(tmp_path / "svhn" / "train_32x32.mat") in msg
    assert "http://ufldl.stanford.edu/housenumbers/train_32x32.mat" in msg
    assert "network is unreachable" in msg and "e26dedcc434d2e4c54c9b2d4a06d8373" in msg
    assert not list((tmp_path / "svhn").glob(".*")), "no temporary file may be left behind"


def test_download_disabled_says_so(tmp_path):
    with pytest.raises(DataUnavailableError, match="Downloading was disabled"):
        sources.fetch("mnist", tmp_path, allow_download=False)


def test_download_from_file_url_verifies_and_renames_atomically(tmp_path, monkeypatch):
    remote = tmp_path / "remote.bin"
    remote.write_bytes(b"x" * 5000)
    md5 = sources.file_digest(remote, "md5")
    sha = sources.file_digest(remote, "sha256")
    _entry(monkeypatch, "cinic10", RawFile("CINIC-10.tar.gz", (remote.as_uri(),), md5=md5, sha256=sha))
    paths = sources.download("cinic10", tmp_path / "root")
    assert paths == [tmp_path / "root" / "cinic10" / "CINIC-10.tar.gz"]
    assert paths[0].read_bytes() == remote.read_bytes()
    assert [p.name for p in paths[0].parent.iterdir()] == ["CINIC-10.tar.gz"]
    [again] = sources.fetch("cinic10", tmp_path / "root")   # second call: pre-staged now
    assert again.origin == "pre-staged" and again.checksums == {"md5": md5, "sha256": sha}


def test_download_with_wrong_checksum_leaves_nothing_behind(tmp_path, monkeypatch):
    remote = tmp_path / "remote.bin"
    remote.write_bytes(b"<!DOCTYPE html><html>quota exceeded</html>")
    _entry(monkeypatch, "celeba", RawFile("identity_CelebA.txt", (remote.as_uri(),), md5="0" * 32))
    with pytest.raises(DataUnavailableError, match="HTML page"):
        sources.fetch("celeba", tmp_path)
    assert list((tmp_path / "celeba").iterdir()) == []


def test_download_tries_mirrors_in_order(tmp_path, monkeypatch):
    remote = tmp_path / "mirror.bin"
    remote.write_bytes(b"mirror copy")
    md5 = sources.file_digest(remote, "md5")
    missing = (tmp_path / "nope.bin").as_uri()
    _entry(monkeypatch, "mnist", RawFile("train-images-idx3-ubyte.gz", (missing, remote.as_uri()), md5=md5))
    [got] = sources.fetch("mnist", tmp_path)
    assert got.origin == "downloaded" and got.url == remote.as_uri()


def test_file_without_published_checksum_records_its_sha256(tmp_path, monkeypatch, caplog):
    remote = tmp_path / "adult_reconstruction.csv"
    remote.write_text("age,gender\n30,Male\n")
    _entry(monkeypatch, "retired_adult", RawFile("adult_reconstruction.csv", (remote.as_uri(),)))
    with caplog.at_level(logging.WARNING, logger="fedrepro.data.sources"):
        [got] = sources.fetch("retired_adult", tmp_path / "root")
    assert not got.verified and got.checksums == {"sha256": sources.file_digest(remote)}
    assert got.checksums["sha256"] in caplog.text and "pin it" in caplog.text


def test_shipped_adult_and_credit_are_decompressed_and_verified(tmp_path, monkeypatch):
    _offline(monkeypatch)
    adult = sources.fetch("adult", tmp_path)
    credit = sources.fetch("credit", tmp_path)
    for got in adult + credit:
        assert got.origin == "shipped" and got.verified and got.path.exists()
    assert sources.file_digest(tmp_path / "adult" / "adult.data", "md5") == "5d7c39d7b8804f071cdd1f2a7c460872"
    assert sources.file_digest(tmp_path / "credit" / "UCI_Credit_Card.csv", "md5") == "7ba16a7f65d3b5e0ccb5b52dfa5e56e6"
    assert [g.origin for g in sources.fetch("adult", tmp_path)] == ["pre-staged", "pre-staged"]


def test_provenance_records_licence_urls_and_fetched_checksums(tmp_path):
    fetched = sources.fetch("adult", tmp_path)
    prov = sources.provenance("adult", fetched)
    assert prov["licence"].startswith("CC BY 4.0")
    assert prov["urls"]["adult.data"][0].startswith("https://archive.ics.uci.edu/")
    assert prov["files"][0]["checksums"]["md5"] == "5d7c39d7b8804f071cdd1f2a7c460872"
    assert "scikit-learn" in sources.provenance("digits")["source"]
    assert "synthetic" in sources.provenance("synthetic_text")["source"]
