import gzip
import hashlib
import tarfile

import numpy as np
import pandas as pd
import pytest

from fedrepro.data import formats


def test_idx_reads_gzipped_and_plain_files_and_rejects_bad_magic(tmp_path, make):
    arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    make.idx(tmp_path / "a.gz", arr)
    make.idx(tmp_path / "a", arr, gz=False)
    assert np.array_equal(formats.read_idx(tmp_path / "a.gz"), arr)
    assert np.array_equal(formats.read_idx(tmp_path / "a"), arr)
    (tmp_path / "bad.gz").write_bytes(gzip.compress(b"\x01\x02\x08\x01\x00\x00\x00\x01\x00"))
    with pytest.raises(ValueError, match="not an IDX file"):
        formats.read_idx(tmp_path / "bad.gz")


def test_mnist_reader_returns_nchw_uint8_and_int64_labels(tmp_path, make):
    written = make.mnist(tmp_path)
    x_tr, y_tr, x_te, y_te = formats.read_mnist(tmp_path)
    assert x_tr.shape == (12, 1, 28, 28) and x_tr.dtype == np.uint8 and y_tr.dtype == np.int64
    assert np.array_equal(x_tr[:, 0], written["train"][0]) and np.array_equal(y_te, written["t10k"][1])


@pytest.mark.parametrize("num_classes", [10, 100])
def test_cifar_reader_unpacks_pickled_batches_from_the_tarball(tmp_path, make, num_classes):
    written = make.cifar(tmp_path / "c.tar.gz", num_classes)
    x_tr, y_tr, x_te, y_te = formats.read_cifar(tmp_path / "c.tar.gz", num_classes)
    n_train_batches = 5 if num_classes == 10 else 1
    assert x_tr.shape == (4 * n_train_batches, 3, 32, 32) and x_te.shape == (4, 3, 32, 32)
    first = "data_batch_1" if num_classes == 10 else "train"
    # row-major 3072 = R(1024) G(1024) B(1024): channel 1, pixel (0, 0) is byte 1024
    assert x_tr[0, 1, 0, 0] == written[first][0][0, 1024]
    assert y_tr[:4].tolist() == written[first][1]


def test_cifar_reader_reports_missing_batches(tmp_path):
    with tarfile.open(tmp_path / "c.tar.gz", "w:gz"):
        pass
    with pytest.raises(ValueError, match="missing CIFAR batches"):
        formats.read_cifar(tmp_path / "c.tar.gz", 10)


def test_svhn_mat_is_transposed_and_label_10_becomes_0(tmp_path, make):
    x, y = make.svhn(tmp_path / "train_32x32.mat")
    xs, ys = formats.read_svhn_mat(tmp_path / "train_32x32.mat")
    assert xs.shape == (6, 3, 32, 32) and xs.dtype == np.uint8
    assert xs[2, 1, 5, 7] == x[5, 7, 1, 2]
    assert ys.tolist() == [0, 1, 2, 0, 5, 9]


def test_cinic_reader_walks_png_tree_in_path_order(tmp_path, make):
    images = make.cinic(tmp_path / "CINIC-10.tar.gz")
    x_tr, y_tr, x_te, y_te = formats.read_cinic(tmp_path / "CINIC-10.tar.gz")
    assert x_tr.shape == (6, 3, 32, 32) and x_te.shape == (6, 3, 32, 32)
    assert y_tr.tolist() == [0, 0, 3, 3, 9, 9]          # airplane, cat, truck in CIFAR order
    assert np.array_equal(x_tr[2], images["CINIC-10/train/cat/img0.png"].transpose(2, 0, 1))
    assert np.array_equal(x_te[3], images["CINIC-10/test/cat/img1.png"].transpose(2, 0, 1))  # gray -> RGB
    x_all, y_all, _, _ = formats.read_cinic(tmp_path / "CINIC-10.tar.gz", include_valid=True)
    assert len(x_all) == 12 and np.array_equal(x_all[:6], x_tr)


def test_celeba_leaf_users_labels_and_per_user_split(tmp_path, make):
    smiling = make.celeba(tmp_path, counts=(6, 5, 3, 7))
    x_tr, y_tr, g_tr, x_te, y_te, g_te, ids = formats.read_celeba_leaf(tmp_path, image_size=20, seed=1)
    assert ids.tolist() == [10, 20, 40]                  # celebrity 30 has 3 < 5 images
    assert x_tr.shape[1:] == (3, 20, 20) and x_tr.dtype == np.uint8
    # LEAF: max(1, int(0.9 n)) training samples per user
    assert np.bincount(g_tr).tolist() == [5, 4, 6] and np.bincount(g_te).tolist() == [1, 1, 1]
    kept = [f"{k:06d}.jpg" for k in list(range(1, 12)) + list(range(15, 22))]
    assert sorted(y_tr.tolist() + y_te.tolist()) == sorted(smiling[k] for k in kept)
    for x, y in ((x_tr, y_tr), (x_te, y_te)):
        assert np.allclose(x.reshape(len(x), -1).mean(1), 40 + 150 * y, atol=3)
    again = formats.read_celeba_leaf(tmp_path, image_size=20, seed=1)
    assert np.array_equal(again[1], y_tr) and np.array_equal(again[0], x_tr)


def test_leaf_sample_split_sizes():
    mask = formats.leaf_sample_split([1, 2, 3, 10, 21], 0.9, seed=0)
    sizes = [m.sum() for m in np.split(mask, np.cumsum([1, 2, 3, 10])[:])]
    assert [int(s) for s in sizes] == [1, 1, 2, 9, 18]


def test_modelnet_views_grouped_ordered_and_resized(tmp_path, make):
    make.modelnet(tmp_path / "shaded.tar.gz", size=40)
    x_tr, y_tr, x_te, y_te = formats.read_modelnet_views(tmp_path / "shaded.tar.gz", resolution=8)
    assert x_tr.shape == (3, 12, 3, 8, 8) and x_te.shape == (1, 12, 3, 8, 8) and x_tr.dtype == np.uint8
    assert y_tr.tolist() == [0, 0, 8] and y_te.tolist() == [8]   # airplane=0, chair=8
    assert x_tr[0, :, 0, 0, 0].tolist() == [10 * v for v in range(1, 13)]
    gray = formats.read_modelnet_views(tmp_path / "shaded.tar.gz", resolution=8, channels=1)[0]
    assert gray.shape == (3, 12, 1, 8, 8)


def test_modelnet_object_with_missing_view_is_an_error(tmp_path, make):
    make.modelnet(tmp_path / "shaded.tar.gz", drop_view=True)
    with pytest.raises(ValueError, match="chair_0001.*11 views, expected 12"):
        formats.read_modelnet_views(tmp_path / "shaded.tar.gz")


def test_amazon_reader_parses_csv_members_and_subsamples_deterministically(tmp_path, make):
    make.amazon(tmp_path / "a.tgz")
    t_tr, y_tr, t_te, y_te = formats.read_amazon_polarity(tmp_path / "a.tgz")
    assert y_tr.tolist() == [1, 0, 1, 0, 1] and y_te.tolist() == [0, 1]
    assert t_tr[0] == "Great CD I loved it, truly great" and t_tr[2] == 'Nice Works "well", and\nlasts'
    sub = formats.read_amazon_polarity(tmp_path / "a.tgz", n_train=3, n_test=1, seed=5)
    assert len(sub[0]) == 3 and len(sub[2]) == 1 and set(sub[0]) <= set(t_tr)
    assert [t_tr.index(t) for t in sub[0]] == sorted(t_tr.index(t) for t in sub[0])  # file order
    assert formats.read_amazon_polarity(tmp_path / "a.tgz", n_train=3, n_test=1, seed=5)[0] == sub[0]


def test_amazon_member_checksum_is_verified_while_reading(tmp_path, make):
    make.amazon(tmp_path / "a.tgz")
    with tarfile.open(tmp_path / "a.tgz") as tar:
        good = hashlib.md5(tar.extractfile("amazon_review_polarity_csv/train.csv").read()).hexdigest()
    formats.read_amazon_polarity(tmp_path / "a.tgz", member_md5={"train.csv": good})
    with pytest.raises(ValueError, match="member test.csv has md5"):
        formats.read_amazon_polarity(tmp_path / "a.tgz", member_md5={"test.csv": "0" * 32})


def test_hash_tokenizer_layout_is_three_self_contained_chunks():
    texts = ["Great great product!", " ".join(f"w{i}" for i in range(100))]
    ids, info = formats.hash_tokenize(texts, length=24, chunks=3, vocab_size=50)
    assert ids.shape == (2, 24) and ids.dtype == np.int64
    assert (ids[:, [0, 8, 16]] == formats.CLS).all()
    assert ids[0, 1] == ids[0, 2] == formats.hash_token("great", 50)   # case-folded, same id
    assert ids[0, 4] == formats.SEP and (ids[0, 5:8] == formats.PAD).all()
    assert (ids[1, [7, 15, 23]] == formats.SEP).all()                  # 6 words per chunk, consecutive
    assert ids[1, 9] == formats.hash_token("w6", 50)
    assert ids[ids >= formats.N_SPECIAL].max() < 50
    assert np.array_equal(formats.hash_tokenize(texts, 24, 3, 50)[0], ids)
    assert info["tokenizer"] == "hash" and info["vocab_size"] == 50
    with pytest.raises(ValueError, match="divisible"):
        formats.hash_tokenize(texts, length=25, chunks=3)


def test_bert_tokenizer_without_prestaged_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer_dir.*tokenizer: hash"):
        formats.bert_tokenize(["hi"], tmp_path / "missing")


ADULT_LINES = [
    "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K",
    "50, ?, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 13, United-States, >50K",
]
ADULT_TEST_LINES = [
    "|1x3 Cross validator",
    "25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Female, 0, 0, 40, United-States, >50K.",
]


def test_adult_reader_combines_files_skips_header_and_strips_dots(tmp_path):
    (tmp_path / "adult.data").write_text("\n".join(ADULT_LINES) + "\n\n")
    (tmp_path / "adult.test").write_text("\n".join(ADULT_TEST_LINES) + "\n")
    df = formats.read_adult(tmp_path / "adult.data", tmp_path / "adult.test")
    assert len(df) == 3 and list(df.columns) == list(formats.ADULT_COLUMNS)
    assert df["income"].tolist() == ["<=50K", ">50K", ">50K"]
    assert df.loc[1, "workclass"] == "?" and df.loc[2, "sex"] == "Female" and df["age"].dtype == np.int64


def test_credit_reader_normalises_label_and_drops_id(tmp_path):
    pd.DataFrame({"ID": [1, 2], "LIMIT_BAL": [1e4, 2e4], "SEX": [1, 2],
                  "default.payment.next.month": [0, 1]}).to_csv(tmp_path / "c.csv", index=False)
    df = formats.read_credit(tmp_path / "c.csv")
    assert list(df.columns) == ["LIMIT_BAL", "SEX", "default"] and df["default"].tolist() == [0, 1]
    pd.DataFrame({"LIMIT_BAL": [1]}).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match="one label column"):
        formats.read_credit(tmp_path / "bad.csv")


def test_credit_xls_without_reader_says_what_is_missing(tmp_path):
    try:
        import xlrd  # noqa: F401
        pytest.skip("xlrd is installed")
    except ImportError:
        pass
    ole2 = bytes.fromhex("d0cf11e0a1b11ae1") + b"\0" * 504
    (tmp_path / "default of credit card clients.xls").write_bytes(ole2)
    with pytest.raises(ImportError, match="xlrd.*raw: csv"):
        formats.read_credit(tmp_path / "default of credit card clients.xls")


def test_retired_adult_reader_marks_question_marks_missing(tmp_path):
    (tmp_path / "r.csv").write_text("age,workclass,gender,income\n30, Private,Male,60000\n41,?,Female,20000\n")
    df = formats.read_retired_adult(tmp_path / "r.csv")
    assert df["workclass"].tolist()[0] == "Private" and pd.isna(df.loc[1, "workclass"])
