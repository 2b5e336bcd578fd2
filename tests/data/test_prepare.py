from tests import limits
import json
import urllib.error

import numpy as np
import pytest

from fedrepro.data import sources
from fedrepro.data.arrays import load_prepared
from fedrepro.data.catalog import DATASETS
from fedrepro.data.prepare import DEFAULT_OPTIONS, prepare_dataset


@pytest.fixture(scope="module")
def adult(tmp_path_factory):
    root = tmp_path_factory.mktemp("adult")
    return load_prepared(prepare_dataset("adult", root / "out", root / "raw"))


@pytest.fixture(scope="module")
def credit(tmp_path_factory):
    root = tmp_path_factory.mktemp("credit")
    return load_prepared(prepare_dataset("credit", root / "out", root / "raw"))


def _all(p, key):
    return np.concatenate([p.extras[f"{key}_train"], p.extras[f"{key}_test"]])


def test_every_catalog_dataset_has_a_builder_and_defaults():
    assert set(DEFAULT_OPTIONS) == set(DATASETS)


def test_adult_matches_spec_counts(adult):
    assert adult.x_train.shape == (33916, 102) and adult.x_test.shape == (11306, 102)
    assert adult.x_train.dtype == np.float32 and adult.y_train.dtype == np.int64
    s = _all(adult, "s")
    assert int(s.sum()) == 14695 and int((1 - s).sum()) == 30527          # Female / Male
    assert int(adult.y_train.sum() + adult.y_test.sum()) == 11208          # >50K
    names = adult.meta["feature_names"]
    assert not any(n.startswith("sex") for n in names) and "age" in names
    assert adult.meta["sensitive"] == {"column": "sex", "s=1": "Female", "excluded_from_x": True}
    assert adult.meta["provenance"]["files"][0]["verified"]


def test_adult_continuous_columns_are_zscored_on_train_and_raw_age_kept(adult):
    cont = [adult.meta["feature_names"].index(c) for c in adult.meta["continuous"]]
    assert np.allclose(adult.x_train[:, cont].mean(0), 0, atol=1e-4)
    assert np.allclose(adult.x_train[:, cont].std(0, ddof=1), 1, atol=1e-4)
    age_col = adult.meta["feature_names"].index("age")
    mean, std = adult.meta["zscore"]["age"]
    assert np.allclose(adult.x_test[:, age_col] * std + mean, adult.extras["age_test"], atol=1e-3)
    assert adult.extras["age_train"].dtype == np.int64 and adult.extras["age_train"].min() >= 17
    dummies = adult.x_train[:, [i for i in range(102) if i not in cont]]
    assert set(np.unique(dummies)) == {0.0, 1.0}


def test_credit_matches_spec_counts_and_merged_categories(credit):
    assert credit.x_train.shape == (22500, 85) and credit.x_test.shape == (7500, 85)
    s = _all(credit, "s")
    assert int((1 - s).sum()) == 11888 and int(s.sum()) == 18112          # SEX 1 male, 2 female
    assert int(credit.y_train.sum() + credit.y_test.sum()) == 6636
    names = credit.meta["feature_names"]
    assert sorted(n for n in names if n.startswith("EDUCATION_")) == [f"EDUCATION_{k}" for k in (1, 2, 3, 4)]
    assert sorted(n for n in names if n.startswith("MARRIAGE_")) == [f"MARRIAGE_{k}" for k in (1, 2, 3)]
    assert sum(n.startswith("PAY_") and not n.startswith("PAY_AMT") for n in names) == 64
    assert not any(n.startswith("SEX") for n in names)


def test_tabular_split_follows_seed_option(tmp_path):
    a = load_prepared(prepare_dataset("credit", tmp_path / "a", tmp_path / "raw"))
    b = load_prepared(prepare_dataset("credit", tmp_path / "b", tmp_path / "raw", {"seed": 7}))
    c = load_prepared(prepare_dataset("credit", tmp_path / "c", tmp_path / "raw", {"seed": 7}))
    assert np.array_equal(b.x_train, c.x_train) and not np.array_equal(a.x_train, b.x_train)
    assert b.meta["options"]["seed"] == 7


def test_credit_xls_option_needs_the_spreadsheet(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "urlopen", lambda *a, **k: (_ for _ in ()).throw(urllib.error.URLError("offline")))
    with pytest.raises(sources.DataUnavailableError, match="default of credit card clients.xls"):
        prepare_dataset("credit", tmp_path / "out", tmp_path / "raw", {"raw": "xls"})


def test_retired_adult_drops_missing_rows_and_thresholds_income(tmp_path, stage_raw):
    folder = stage_raw.root / "retired_adult"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = ["hours-per-week,age,capital-gain,capital-loss,workclass,education,education-num,"
            "marital-status,relationship,race,gender,native-country,income,occupation"]
    for i in range(40):
        work = "?" if i % 10 == 0 else ["Private", "State-gov"][i % 2]
        rows.append(f"{30 + i % 20},{20 + i},0,0,{work},Bachelors,13,Never-married,Own-child,White,"
                    f"{['Male', 'Female'][i % 3 == 0]},United-States,{int(rng.integers(10000, 90000))},Sales")
    (folder / "adult_reconstruction.csv").write_text("\n".join(rows) + "\n")
    p = load_prepared(prepare_dataset("retired_adult", tmp_path / "out", stage_raw("retired_adult")))
    assert len(p.y_train) + len(p.y_test) == 36 and len(p.y_train) == 27
    assert not any(n.startswith("gender") for n in p.meta["feature_names"])
    assert "workclass_Private" in p.meta["feature_names"] and "workclass_?" not in p.meta["feature_names"]


def test_digits_is_uint8_stratified_and_deterministic(tmp_path):
    p = load_prepared(prepare_dataset("digits", tmp_path / "a", tmp_path / "raw"))
    q = load_prepared(prepare_dataset("digits", tmp_path / "b", tmp_path / "raw"))
    assert p.x_train.shape == (1347, 1, 8, 8) and p.x_test.shape == (450, 1, 8, 8)
    assert p.x_train.dtype == np.uint8 and p.x_train.max() == 255
    assert np.array_equal(p.x_train, q.x_train)
    per_class = np.bincount(np.concatenate([p.y_train, p.y_test]))
    assert np.abs(np.bincount(p.y_test, minlength=10) - 0.25 * per_class).max() <= 1   # stratified
    assert len(p.meta["normalization"]["mean"]) == 1 and p.meta["provenance"]["source"].startswith("scikit-learn")


def test_unknown_option_is_rejected_with_allowed_keys(tmp_path):
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['sede'\]; allowed: \['seed', 'source', 'test_fraction'\]"):
        prepare_dataset("digits", tmp_path, tmp_path, {"sede": 1})
    with pytest.raises(KeyError, match="unknown dataset"):
        prepare_dataset("imagenet", tmp_path, tmp_path)


@pytest.mark.parametrize("value", [1.0, 0, -0.5, "half"])
def test_a_split_fraction_outside_0_1_fails_in_the_config_check_naming_the_key(value):
    from fedrepro.config import dataset_option_errors

    errors = dataset_option_errors({"datasets": {"digits": {"test_fraction": value}}})
    assert errors and "config key 'datasets.digits'" in errors[0] and "test_fraction must be a number strictly" in errors[0]
    assert dataset_option_errors({"datasets": {"digits": {"test_fraction": 0.3}}}) == []


def test_synthetic_tabular_has_minority_fraction_age_and_dp_gap(tmp_path):
    p = load_prepared(prepare_dataset("synthetic_tabular", tmp_path / "a", tmp_path, {"minority_fraction": 0.2}))
    assert p.x_train.shape == (3000, DATASETS["synthetic_tabular"].input_shape[0])
    s = p.extras["s_train"]
    assert 0.17 < s.mean() < 0.23
    gap = p.y_train[s == 0].mean() - p.y_train[s == 1].mean()
    assert gap > 0.1
    q = load_prepared(prepare_dataset("synthetic_tabular", tmp_path / "b", tmp_path, {"minority_fraction": 0.2}))
    assert np.array_equal(p.x_train, q.x_train) and np.array_equal(p.extras["age_test"], q.extras["age_test"])


def test_synthetic_text_is_learnable_from_polarity_counts(tmp_path):
    p = load_prepared(prepare_dataset("synthetic_text", tmp_path, tmp_path))
    assert p.x_train.shape == (2000, 96) and p.x_train.dtype == np.int64
    assert (p.x_train[:, [0, 32, 64]] == 1).all()                        # [CLS] opens each chunk
    # per-token log-odds learned on train classify test well above chance
    vocab = p.meta["tokenizer"]["vocab_size"]
    counts = [np.bincount(p.x_train[p.y_train == c].ravel(), minlength=vocab) + 1 for c in (0, 1)]
    w = np.log(counts[1] / counts[1].sum()) - np.log(counts[0] / counts[0].sum())
    pred = (w[p.x_test].sum(1) > 0).astype(int)
    assert (pred == p.y_test).mean() > 0.85


def test_synthetic_multiview_single_views_carry_class_signal(tmp_path):
    p = load_prepared(prepare_dataset("synthetic_multiview", tmp_path, tmp_path))
    assert p.x_train.shape == (2000, 12, 1, 16, 16) and p.x_train.dtype == np.uint8
    assert p.meta["input_shape"] == [12, 1, 16, 16] and len(p.meta["normalization"]["mean"]) == 1
    for view in (0, 11):
        xtr = p.x_train[:, view].reshape(2000, -1).astype(float)
        xte = p.x_test[:, view].reshape(500, -1).astype(float)
        centroids = np.stack([xtr[p.y_train == c].mean(0) for c in range(10)])
        pred = ((xte[:, None] - centroids) ** 2).sum(-1).argmin(1)
        assert (pred == p.y_test).mean() > 0.4                           # chance is 0.1


def test_mnist_cifar_svhn_from_tiny_raw_files(tmp_path, make, stage_raw):
    root = stage_raw.root
    make.mnist(root / "mnist")
    (root / "cifar10").mkdir(parents=True)
    make.cifar(root / "cifar10" / "cifar-10-python.tar.gz", 10)
    (root / "svhn").mkdir(parents=True)
    make.svhn(root / "svhn" / "train_32x32.mat")
    make.svhn(root / "svhn" / "test_32x32.mat", seed=1)
    for name, shape, n in (("mnist", (1, 28, 28), 12), ("cifar10", (3, 32, 32), 20), ("svhn", (3, 32, 32), 6)):
        p = load_prepared(prepare_dataset(name, tmp_path / name, stage_raw(name)))
        assert p.x_train.shape == (n, *shape) and p.x_train.dtype == np.uint8
        mean = p.meta["normalization"]["mean"]
        assert len(mean) == shape[0] and np.allclose(mean, p.x_train.mean(axis=(0, 2, 3)) / 255)
        assert all(f["verified"] and f["origin"] == "pre-staged" for f in p.meta["provenance"]["files"])


def test_celeba_prepare_writes_leaf_groups(tmp_path, make, stage_raw):
    make.celeba(stage_raw.root / "celeba")
    p = load_prepared(prepare_dataset("celeba", tmp_path / "out", stage_raw("celeba"), {"image_size": 16}))
    assert p.x_train.shape[1:] == (3, 16, 16)
    assert set(p.extras) == {"group_train", "group_test"}
    assert p.meta["groups"]["celebrity_ids"] == [10, 20, 40] and p.meta["n_train"] == 15


def test_modelnet_and_cinic_prepare(tmp_path, make, stage_raw):
    (stage_raw.root / "modelnet40").mkdir(parents=True)
    make.modelnet(stage_raw.root / "modelnet40" / "shaded_images.tar.gz")
    p = load_prepared(prepare_dataset("modelnet40", tmp_path / "m", stage_raw("modelnet40"), {"resolution": 8}))
    assert p.x_train.shape == (3, 12, 3, 8, 8) and p.meta["input_shape"] == [12, 3, 8, 8]
    (stage_raw.root / "cinic10").mkdir(parents=True)
    make.cinic(stage_raw.root / "cinic10" / "CINIC-10.tar.gz")
    q = load_prepared(prepare_dataset("cinic10", tmp_path / "c", stage_raw("cinic10"), {"include_valid": True}))
    assert q.x_train.shape == (12, 3, 32, 32) and q.meta["class_names"][9] == "truck"


def test_amazon_prepare_with_hash_tokenizer(tmp_path, make, stage_raw, monkeypatch):
    (stage_raw.root / "amazon_polarity").mkdir(parents=True)
    make.amazon(stage_raw.root / "amazon_polarity" / "amazon_review_polarity_csv.tgz")
    monkeypatch.setattr(sources, "AMAZON_MEMBER_MD5", {})    # tiny members, not the real ones
    opts = {"n_train": 4, "n_test": None, "length": 30, "vocab_size": 100}
    p = load_prepared(prepare_dataset("amazon_polarity", tmp_path / "out", stage_raw("amazon_polarity"), opts))
    assert p.x_train.shape == (4, 30) and p.x_test.shape == (2, 30) and p.x_train.dtype == np.int64
    assert p.meta["tokenizer"]["chunks"] == 3 and p.meta["options"]["n_train"] == 4
    with pytest.raises(FileNotFoundError, match="tokenizer_dir"):
        prepare_dataset("amazon_polarity", tmp_path / "b", stage_raw.root, {**opts, "tokenizer": "bert"})


def test_real_amazon_member_checksums_are_enforced(tmp_path, make, stage_raw):
    (stage_raw.root / "amazon_polarity").mkdir(parents=True)
    make.amazon(stage_raw.root / "amazon_polarity" / "amazon_review_polarity_csv.tgz")
    with pytest.raises(ValueError, match="member train.csv has md5 .* expected 520937107c39a2d1d1f66cd410e9ed9e"):
        prepare_dataset("amazon_polarity", tmp_path / "out", stage_raw("amazon_polarity"))


def test_meta_json_carries_catalog_fields_options_and_extras(adult, tmp_path):
    meta = adult.meta
    for key in ("name", "kind", "num_classes", "n_train", "n_test", "input_shape", "synthetic", "description"):
        assert key in meta
    assert meta["extras"] == ["age_test", "age_train", "s_test", "s_train"]
    assert meta["options"] == {"seed": 100, "train_fraction": 0.75, "source": "auto"}
    json.dumps(meta)


def test_load_prepared_reports_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="arrays.npz not found"):
        load_prepared(tmp_path)


def test_source_shipped_option_reads_the_shipped_copy_and_is_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "urlopen", lambda *a, **k: (_ for _ in ()).throw(AssertionError("no network")))
    p = load_prepared(prepare_dataset("credit", tmp_path / "out", tmp_path / "raw", {"source": "shipped"}))
    assert p.meta["provenance"]["files"][0]["origin"] == "shipped" and p.x_train.shape == (22500, 85)
    with pytest.raises(ValueError, match="source 'shipped' is only available for \\['adult', 'credit'\\]"):
        prepare_dataset("mnist", tmp_path / "m", tmp_path / "raw", {"source": "shipped"})
    with pytest.raises(ValueError, match="source must be one of"):
        prepare_dataset("adult", tmp_path / "a", tmp_path / "raw", {"source": "web"})


@pytest.mark.parametrize("name, options", [
    ("digits", {}),
    ("synthetic_text", {"n_train": 40, "n_test": 10, "length": 24}),
    ("synthetic_multiview", {"n_train": 40, "n_test": 10, "views": 4, "channels": 2, "size": 6}),
])
def test_the_fit_check_knows_the_prepared_sample_shape(tmp_path, name, options):
    """fedrepro.experiments.fit checks models against `sample_shape`: it must be what preparing gives."""
    from fedrepro.data.prepare import resolve_options, sample_shape
    from fedrepro.experiments.fit import num_classes

    p = load_prepared(prepare_dataset(name, tmp_path, tmp_path, options))
    resolved = resolve_options(name, options)
    assert p.x_train.shape[1:] == sample_shape(name, resolved)
    assert int(p.meta["num_classes"]) == num_classes(name, resolved)


def test_option_dependent_sample_shapes_agree_with_the_catalog_at_default_options():
    from fedrepro.data.catalog import DATASETS
    from fedrepro.data.prepare import SAMPLE_SHAPES, resolve_options, sample_shape

    for name in SAMPLE_SHAPES:
        assert sample_shape(name, resolve_options(name, {})) == DATASETS[name].input_shape, name


PREPARE_UNDER_RECORDER = """
import json, sys
from fedrepro.codedeps import code_inputs, read_fingerprint
from fedrepro.pipeline import make_job, run_job

name, builder, out, code_folder = sys.argv[1:]
code = code_inputs(["fedrepro.data.jobs:prepare_job", builder], code_folder)
job = make_job({"data_root": out + "/raw", "options": {}, "builder": builder},
               {"arrays": out + "/arrays.npz", "meta": out + "/meta.json"}, {"code": code},
               wildcards={"dataset": name})
run_job(job, "fedrepro.data.jobs:prepare_job")
print(json.dumps(sorted(read_fingerprint(code))))
"""


@pytest.mark.parametrize("name, runs, does_not_run", [
    ("credit", "fedrepro.data.tabular", "fedrepro.data.synthetic"),
    ("synthetic_text", "fedrepro.data.synthetic", "fedrepro.data.images"),
])
def test_a_prepare_job_runs_and_depends_on_its_own_builder_only(tmp_path, name, runs, does_not_run):
    """The prepare job of `name`, in a fresh process with strict import checks: it imports nothing
    beyond its shared code and its own builder, so an edit elsewhere (the synthetic generator for
    Credit) does not re-prepare it, and one in its builder does."""
    import os
    import sys

    from fedrepro.data.prepare import BUILDERS

    env = {**os.environ, "FEDREPRO_STRICT_IMPORTS": "1"}
    result = limits.run([sys.executable, "-c", PREPARE_UNDER_RECORDER, name, BUILDERS[name], str(tmp_path / "out"),
                             str(tmp_path / "code")], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    declared = json.loads(result.stdout.strip().splitlines()[-1])
    assert runs in declared and does_not_run not in declared
    assert (tmp_path / "out" / "arrays.npz").is_file()
