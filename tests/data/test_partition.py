"""Partitioners: properties over a handful of seeds and sizes, files, tags, errors."""

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fedrepro.data.partition import (
    Partition,
    age_partition,
    check_partition,
    classes_partition,
    dirichlet_partition,
    load_partition,
    make_partition,
    make_tag,
    natural_partition,
    parse_tag,
    partition_job,
    save_partition,
    vertical_partition,
)

SEEDS = [0, 1, 7]


def shuffled_labels(n: int, num_classes: int, seed: int = 0) -> np.ndarray:
    """Balanced labels in random order (every class present)."""
    return np.random.default_rng(seed).permutation(np.arange(n) % num_classes)


def assert_disjoint(p: Partition, n: int) -> np.ndarray:
    pieces = p.clients + ([p.public] if p.public is not None else [])
    every = np.concatenate(pieces)
    assert every.min() >= 0 and every.max() < n
    assert np.unique(every).size == every.size, "an index is held twice"
    return every


def same(a: Partition, b: Partition) -> bool:
    if len(a.clients) != len(b.clients):
        return False
    pairs = list(zip(a.clients, b.clients))
    if (a.public is None) != (b.public is None):
        return False
    if a.public is not None:
        pairs.append((a.public, b.public))
    return all(np.array_equal(x, y) for x, y in pairs)


def mean_tv(p: Partition, labels: np.ndarray, num_classes: int) -> float:
    glob = np.bincount(labels, minlength=num_classes) / labels.size
    tvs = [0.5 * np.abs(np.bincount(labels[c], minlength=num_classes) / c.size - glob).sum()
           for c in p.clients]
    return float(np.mean(tvs))


# --------------------------------------------------------------------------- classes


@pytest.mark.parametrize("num_classes,clients", [(10, 5), (10, 10), (100, 20), (10, 2)])
def test_classes_each_client_holds_exactly_its_label_block(num_classes, clients):
    labels = shuffled_labels(40 * num_classes, num_classes)
    p = classes_partition(labels, clients)
    k = num_classes // clients
    for i, idx in enumerate(p.clients):
        assert set(np.unique(labels[idx])) == set(range(k * i, k * i + k))
    every = assert_disjoint(p, labels.size)
    assert every.size == labels.size  # covers the training set
    assert same(p, classes_partition(labels, clients, seed=123))  # deterministic, seed unused


def test_classes_per_client_subsample_is_seeded_and_capped():
    labels = np.repeat(np.arange(10), [50, 50, 60, 60, 70, 70, 80, 80, 20, 20])  # last pair: 40
    p = classes_partition(labels, 5, per_client=100, seed=0)
    assert p.meta["sizes"] == [100, 100, 100, 100, 40]  # a smaller client keeps all it has
    for i, idx in enumerate(p.clients):
        assert set(np.unique(labels[idx])) <= {2 * i, 2 * i + 1}
    assert_disjoint(p, labels.size)
    assert same(p, classes_partition(labels, 5, per_client=100, seed=0))
    assert not same(p, classes_partition(labels, 5, per_client=100, seed=1))


def test_classes_errors():
    with pytest.raises(ValueError, match="clients must divide 10"):
        classes_partition(shuffled_labels(100, 10), 3)
    labels = np.array([0, 0, 1, 1, 4, 5])  # labels 2 and 3 missing
    with pytest.raises(ValueError, match="client 1 .* has no samples"):
        classes_partition(labels, 3)


# --------------------------------------------------------------------------- dirichlet


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n,clients,public", [(1000, 10, 100), (997, 7, 0), (300, 20, 50)])
def test_dirichlet_disjoint_sizes_and_public(seed, n, clients, public):
    labels = shuffled_labels(n, 10, seed)
    p = dirichlet_partition(labels, alpha=1.0, clients=clients, public=public, seed=seed)
    every = assert_disjoint(p, n)
    pool = n - public
    assert p.meta["sizes"] == [pool // clients] * clients  # equal share of the non-public pool
    assert n - every.size == pool % clients  # fewer than `clients` samples stay unassigned
    assert (p.public is None) == (public == 0)
    if public:
        assert p.public.size == public


def test_dirichlet_public_depends_only_on_seed_and_size():
    labels = shuffled_labels(2000, 10)
    a = dirichlet_partition(labels, alpha=0.5, clients=10, public=200, seed=3)
    b = dirichlet_partition(labels, alpha=5.0, clients=4, public=200, seed=3)
    c = dirichlet_partition(labels, alpha=0.5, clients=10, public=200, seed=4)
    assert np.array_equal(a.public, b.public)
    assert not np.array_equal(a.public, c.public)


@pytest.mark.parametrize("variant", ["client", "class"])
def test_dirichlet_deterministic_under_seed(variant):
    labels = shuffled_labels(1000, 10)
    kwargs = dict(alpha=1.0, clients=5, public=50, variant=variant)
    assert same(dirichlet_partition(labels, seed=0, **kwargs), dirichlet_partition(labels, seed=0, **kwargs))
    assert not same(dirichlet_partition(labels, seed=0, **kwargs), dirichlet_partition(labels, seed=1, **kwargs))


@pytest.mark.parametrize("variant", ["client", "class"])
def test_dirichlet_smaller_alpha_is_more_heterogeneous(variant):
    labels = shuffled_labels(5000, 10)
    tv = {alpha: np.mean([mean_tv(dirichlet_partition(labels, alpha, 10, variant=variant, seed=s), labels, 10)
                          for s in SEEDS])
          for alpha in (0.1, 1.0, 100.0)}
    assert tv[0.1] > tv[1.0] > tv[100.0]
    assert tv[100.0] < 0.1 and tv[0.1] > 0.5


def test_dirichlet_tiny_alpha_gives_nearly_single_class_clients():
    labels = shuffled_labels(10000, 10)
    p = dirichlet_partition(labels, alpha=1e-3, clients=5, per_client=200, seed=0)
    for idx in p.clients:
        assert np.bincount(labels[idx]).max() / idx.size > 0.9


@pytest.mark.parametrize("seed", SEEDS)
def test_dirichlet_exhausted_classes_still_exact_sizes(seed):
    # Class 0 is rare: skewed clients exhaust it and must be refilled from other classes.
    labels = np.concatenate([np.zeros(5, int), np.ones(195, int), np.full(100, 2)])
    labels = np.random.default_rng(seed).permutation(labels)
    p = dirichlet_partition(labels, alpha=0.05, clients=6, per_client=50, seed=seed)
    every = assert_disjoint(p, labels.size)
    assert p.meta["sizes"] == [50] * 6
    assert every.size == labels.size  # clients x per_client == pool: the whole pool is used


def test_dirichlet_class_variant_covers_pool():
    labels = shuffled_labels(1000, 10)
    p = dirichlet_partition(labels, alpha=0.5, clients=5, public=100, variant="class", seed=0)
    assert assert_disjoint(p, labels.size).size == labels.size
    assert len(set(p.meta["sizes"])) > 1  # sizes vary in this variant


def test_dirichlet_errors():
    labels = shuffled_labels(100, 10)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        dirichlet_partition(labels, alpha=0, clients=5)
    with pytest.raises(ValueError, match="more clients than samples"):
        dirichlet_partition(labels, alpha=1, clients=101)
    with pytest.raises(ValueError, match="more clients than samples"):
        dirichlet_partition(labels, alpha=1, clients=10, public=20, per_client=9)
    with pytest.raises(ValueError, match="public=200 exceeds"):
        dirichlet_partition(labels, alpha=1, clients=2, public=200)
    with pytest.raises(ValueError, match="per_client only applies"):
        dirichlet_partition(labels, alpha=1, clients=2, per_client=5, variant="class")
    with pytest.raises(ValueError, match="variant 'x' is not one of"):
        dirichlet_partition(labels, alpha=1, clients=2, variant="x")


# --------------------------------------------------------------------------- natural


def groups_fixture(seed: int = 0) -> np.ndarray:
    sizes = np.random.default_rng(seed).integers(1, 30, size=60)
    return np.random.default_rng(seed + 1).permutation(np.repeat(np.arange(100, 160), sizes))


@pytest.mark.parametrize("seed", SEEDS)
def test_natural_clients_are_whole_groups(seed):
    groups = groups_fixture(seed)
    p = natural_partition(groups, clients=20, public=30, seed=seed)
    assert len(p.clients) == 20
    assert p.meta["groups"] == sorted(p.meta["groups"]) and len(set(p.meta["groups"])) == 20
    for g, idx in zip(p.meta["groups"], p.clients):
        assert np.array_equal(idx, np.flatnonzero(groups == g))
    assert_disjoint(p, groups.size)
    assert p.public.size == 30
    assert not np.isin(groups[p.public], p.meta["groups"]).any()  # public from held-out groups
    assert same(p, natural_partition(groups, clients=20, public=30, seed=seed))
    assert not same(p, natural_partition(groups, clients=20, public=30, seed=seed + 100))


def test_natural_errors():
    groups = groups_fixture()
    with pytest.raises(ValueError, match="clients=61 exceeds the 60 groups"):
        natural_partition(groups, clients=61)
    with pytest.raises(ValueError, match="exceeds the .* held-out groups"):
        natural_partition(groups, clients=60, public=1)


# --------------------------------------------------------------------------- vertical


VERTICAL_CASES = [
    ("rows", (1, 28, 28), 7, [(1, 4, 28)] * 7),          # MNIST
    ("rows", (1, 8, 8), 4, [(1, 2, 8)] * 4),             # digits
    ("rows", (1, 10, 6), 3, [(1, 4, 6), (1, 3, 6), (1, 3, 6)]),
    ("patches", (3, 32, 32), 4, [(3, 16, 16)] * 4),      # CIFAR-10
    ("views", (12, 3, 8, 8), 12, [(3, 8, 8)] * 12),      # ModelNet40
    ("tokens", (384,), 3, [(128,)] * 3),                 # Amazon
    ("tokens", (10,), 4, [(3,), (3,), (2,), (2,)]),
]


@pytest.mark.parametrize("split,shape,clients,shapes", VERTICAL_CASES)
def test_vertical_pieces_are_disjoint_cover_and_reconstruct(split, shape, clients, shapes):
    p = vertical_partition(shape, split, clients)
    assert p.feature_shapes == shapes
    size = int(np.prod(shape))
    assert np.array_equal(np.sort(np.concatenate(p.features)), np.arange(size))
    check_partition(p, size, cover=True)
    x = np.random.default_rng(0).integers(0, 255, size=(5, *shape))
    rebuilt = np.zeros((5, size), dtype=x.dtype)
    for k, idx in enumerate(p.features):
        view = p.view(x, k)
        assert view.shape == (5, *shapes[k])
        rebuilt[:, idx] = view.reshape(5, -1)
    assert np.array_equal(rebuilt.reshape(x.shape), x)


def test_vertical_views_are_the_papers_pieces():
    x = np.random.default_rng(0).normal(size=(3, 1, 28, 28))
    rows = vertical_partition((1, 28, 28), "rows", 7)
    for k in range(7):
        assert np.array_equal(rows.view(x, k), x[:, :, 4 * k:4 * k + 4, :])
    x = np.random.default_rng(1).normal(size=(3, 3, 32, 32))
    patches = vertical_partition((3, 32, 32), "patches", 4)
    for k in range(4):
        r, c = divmod(k, 2)
        assert np.array_equal(patches.view(x, k), x[:, :, 16 * r:16 * r + 16, 16 * c:16 * c + 16])
    x = np.random.default_rng(2).normal(size=(3, 4, 3, 5, 5))
    views = vertical_partition((4, 3, 5, 5), "views", 4)
    for k in range(4):
        assert np.array_equal(views.view(x, k), x[:, k])


@pytest.mark.parametrize("split,shape,clients,message", [
    ("rows", (28, 28), 7, "needs a 3-D sample shape"),
    ("rows", (1, 4, 28), 5, "cannot cut 4 along axis 1 into 5"),
    ("patches", (3, 32, 32), 3, "square number of clients"),
    ("views", (12, 3, 8, 8), 4, "clients == number of views"),
    ("columns", (10,), 2, "split 'columns' is not one of"),
])
def test_vertical_errors(split, shape, clients, message):
    with pytest.raises(ValueError, match=message):
        vertical_partition(shape, split, clients)


# --------------------------------------------------------------------------- age (SteFFLe Algorithm 3)


def reference_prior_silos(df: pd.DataFrame, num_silos: int) -> np.ndarray:
    """The authors' assign_partitions (dataloader_fed.py) as written: pandas sort_values (its default kind,
    quicksort), reset_index, a label per block of len // n rows (the last takes the rest), mapped back to
    the rows of `df` in their order."""
    sorted_df = df.sort_values(by="age").reset_index()
    part_size = len(df) // num_silos
    sorted_df["prior_silos"] = 0
    for i in range(num_silos):
        end = (i + 1) * part_size if i < num_silos - 1 else len(df)
        sorted_df.loc[i * part_size:end, "prior_silos"] = i + 1
    return sorted_df.set_index("index").loc[df.index, "prior_silos"].to_numpy() - 1


def reference_algorithm3(age: np.ndarray, num_silos: int, h: float, seed: int = 100) -> list[np.ndarray]:
    """The authors' dataloader_fed.py (assign_partitions + get_train_silos_second_method), condensed."""
    df = pd.DataFrame({"age": age})
    prior = reference_prior_silos(df, num_silos)
    n = len(df)
    rs = np.random.RandomState(seed)
    silos = []
    for k in range(num_silos):
        pts = rs.choice(np.argwhere(prior == k)[:, 0], replace=False, size=int(int(n / num_silos) * h))
        prior[pts] = num_silos
        silos.append(list(pts))
    for k in range(num_silos):
        free = np.argwhere(prior != num_silos)[:, 0]
        pts = rs.choice(free, replace=False, size=int(n / num_silos) - len(silos[k]))
        prior[pts] = num_silos
        silos[k].extend(pts)
    posterior = prior.copy()
    for k, pts in enumerate(silos):
        posterior[pts] = k
    return [np.flatnonzero(posterior == k) for k in range(num_silos)]


def distinct_ages(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n) * 0.01 + 18  # no ties: sort order is unique


@pytest.mark.parametrize("n,silos,h", [(1000, 3, 0.75), (1001, 3, 0.0), (997, 5, 0.5), (302, 4, 1.0)])
def test_age_matches_reference_code(n, silos, h):
    age = distinct_ages(n, seed=n)
    p = age_partition(age, silos, h)
    for mine, ref in zip(p.clients, reference_algorithm3(age, silos, h)):
        assert np.array_equal(mine, ref)


def quantile_blocks(age: np.ndarray, clients: int) -> np.ndarray:
    size = age.size // clients
    block = np.empty(age.size, int)
    block[np.argsort(age, kind="stable")] = np.minimum(np.arange(age.size) // size, clients - 1)
    return block


@pytest.mark.parametrize("n", [999, 1000, 1003])
def test_age_h1_gives_exactly_the_quantile_blocks(n):
    age = np.random.default_rng(n).integers(18, 80, size=n)  # with ties
    p = age_partition(age, 3, 1.0)
    block = quantile_blocks(age, 3)
    for k, idx in enumerate(p.clients):
        assert np.array_equal(idx, np.flatnonzero(block == k))


@pytest.mark.parametrize("seed", SEEDS)
def test_age_h0_is_iid_like(seed):
    age = np.random.default_rng(seed).integers(18, 80, size=3000)
    p = age_partition(age, 3, 0.0, seed=seed)
    block = quantile_blocks(age, 3)
    for idx in p.clients:
        share = np.bincount(block[idx], minlength=3) / idx.size
        assert np.abs(share - 1 / 3).max() < 0.06


@pytest.mark.parametrize("n,clients", [(1000, 3), (1003, 4), (50, 7)])
def test_age_h075_share_sizes_and_cover(n, clients):
    age = np.random.default_rng(n).integers(18, 80, size=n)
    p = age_partition(age, clients, 0.75)
    block = quantile_blocks(age, clients)
    size = n // clients
    assert p.meta["own_block"] == int(size * 0.75)
    for k, idx in enumerate(p.clients):
        assert (block[idx] == k).sum() >= int(size * 0.75)
        extra = idx.size - size  # the n mod K leftovers join their own block's silo
        assert extra >= 0
    assert sum(p.meta["sizes"]) == n
    assert assert_disjoint(p, n).size == n
    # silo k's own-block share is far above the 1/K an iid split would give
    shares = [(block[idx] == k).mean() for k, idx in enumerate(p.clients)]
    assert min(shares) > 1 / clients + 0.3


def test_age_seed_and_errors():
    age = np.random.default_rng(0).integers(18, 80, size=300)
    assert same(age_partition(age, 3, 0.5), age_partition(age, 3, 0.5, seed=100))
    assert not same(age_partition(age, 3, 0.5), age_partition(age, 3, 0.5, seed=1))
    with pytest.raises(ValueError, match=r"h must be in \[0, 1\]"):
        age_partition(age, 3, 1.5)
    with pytest.raises(ValueError, match="clients=301 exceeds"):
        age_partition(age, 301, 0.5)


# --------------------------------------------------------------------------- tags


TAG_CASES = [
    ("classes", dict(clients=5), "classes-c5-s0"),
    ("classes", dict(clients=5, per_client=10000, seed=2), "classes-c5-n10000-s2"),
    ("dirichlet", dict(alpha=2, clients=10, public=1000, seed=0), "dirichlet-a2-c10-p1000-s0"),
    ("dirichlet", dict(alpha=0.05, clients=20), "dirichlet-a0.05-c20-s0"),
    ("dirichlet", dict(alpha=0.5, clients=3, variant="class", seed=4), "dirichlet-a0.5-c3-class-s4"),
    ("natural", dict(clients=100, public=1000, seed=1), "natural-c100-p1000-s1"),
    ("vertical", dict(split="rows", clients=7), "vertical-rows-c7"),
    ("age", dict(clients=3, h=0.75), "age-c3-h0.75-s100"),
    ("age", dict(clients=12, h=0, seed=5), "age-c12-h0-s5"),
]


@pytest.mark.parametrize("scheme,params,tag", TAG_CASES)
def test_tag_round_trip(scheme, params, tag):
    assert make_tag(scheme, **params) == tag
    parsed_scheme, parsed = parse_tag(tag)
    assert parsed_scheme == scheme
    assert {k: parsed[k] for k in params} == params
    assert make_tag(parsed_scheme, **parsed) == tag
    assert all(c.isalnum() or c in "-." for c in tag)  # filesystem safe


@pytest.mark.parametrize("tag,message", [
    ("shards-c5", "unknown partition scheme 'shards'; allowed schemes: classes, dirichlet, natural, vertical, age"),
    ("dirichlet-x2-c10-s0", r"allowed keys: a \(alpha\), c \(clients\)"),
    ("dirichlet-a2.0-c10-s0", "not canonical; write it as 'dirichlet-a2-c10-s0'"),
    ("dirichlet-s0-a2-c10", "not canonical; write it as 'dirichlet-a2-c10-s0'"),
    ("dirichlet-a2-c10-c3-s0", "'clients' appears twice"),
    ("dirichlet-a2-s0", "missing required parameter 'clients'"),
    ("dirichlet-a2-cten-s0", "token 'cten' is not a parameter"),
    ("age-c3-h1.5x-s1", "'h' needs a float"),
    ("vertical-cols-c2", "token 'cols' is not a parameter"),
])
def test_bad_tags_name_the_problem(tag, message):
    with pytest.raises(ValueError, match=message):
        parse_tag(tag)


def test_make_tag_rejects_bad_params():
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['beta'\]; allowed: \['alpha'"):
        make_tag("dirichlet", beta=1, clients=2)
    with pytest.raises(ValueError, match="'clients': expected an integer"):
        make_tag("dirichlet", alpha=1, clients=2.5)
    with pytest.raises(ValueError, match="'alpha': expected a finite number >= 0"):
        make_tag("dirichlet", alpha=-1, clients=2)


# --------------------------------------------------------------------------- dispatcher, files, job


def prepared_arrays(n: int = 600) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x_train": rng.integers(0, 255, size=(n, 1, 8, 8), dtype=np.uint8),
        "y_train": shuffled_labels(n, 10),
        "group_train": rng.integers(0, 40, size=n),
        "age_train": rng.integers(18, 80, size=n),
    }


@pytest.mark.parametrize("tag", [
    "classes-c5-s0", "dirichlet-a0.5-c10-p50-s0", "dirichlet-a1-c4-class-s2",
    "natural-c10-p20-s0", "vertical-rows-c4", "age-c3-h0.75-s100",
])
def test_make_partition_from_tag_records_meta(tag):
    arrays = prepared_arrays()
    scheme, params = parse_tag(tag)
    p = make_partition(scheme, arrays, **params)
    assert p.meta["tag"] == tag and p.meta["scheme"] == scheme and p.meta["params"] == params
    assert p.meta["seed"] == params.get("seed")
    assert p.meta["sizes"] == [idx.size for idx in (p.features if scheme == "vertical" else p.clients)]


def test_make_partition_errors():
    with pytest.raises(ValueError, match="allowed schemes: classes, dirichlet, natural, vertical, age"):
        make_partition("iid", prepared_arrays(), clients=2)
    with pytest.raises(KeyError, match="needs 'age_train'"):
        make_partition("age", {"y_train": np.zeros(3, int)}, clients=2, h=0.5)
    with pytest.raises(ValueError, match="more clients than samples"):
        make_partition("dirichlet", {"y_train": shuffled_labels(20, 10)}, alpha=1, clients=21)


@pytest.mark.parametrize("p", [
    dirichlet_partition(shuffled_labels(300, 10), 1.0, 5, public=30, seed=0),
    classes_partition(shuffled_labels(300, 10), 10),
    vertical_partition((3, 32, 32), "patches", 4),
], ids=["with-public", "no-public", "vertical"])
def test_save_load_round_trip(tmp_path, p):
    p.meta["tag"] = "x"
    path = tmp_path / "sub" / "x.npz"
    save_partition(p, path)
    save_partition(p, path)  # overwriting is fine
    q = load_partition(path)
    assert q.kind == p.kind and q.meta == p.meta
    assert same(p, q)
    assert q.feature_shapes == p.feature_shapes
    assert all(np.array_equal(a, b) for a, b in zip(p.features, q.features))
    assert [f.name for f in path.parent.iterdir()] == ["x.npz"]  # no temporary file left


def test_check_partition_catches_bad_partitions():
    good = Partition("horizontal", clients=[np.array([0, 1]), np.array([2])], public=np.array([3]))
    check_partition(good, 4, cover=True)
    with pytest.raises(ValueError, match="1 indices are held more than once"):
        check_partition(Partition("horizontal", clients=[np.array([0, 1]), np.array([1])]), 4)
    with pytest.raises(ValueError, match="out of range"):
        check_partition(Partition("horizontal", clients=[np.array([0, 4])]), 4)
    with pytest.raises(ValueError, match="1 of 4 indices are not assigned"):
        check_partition(Partition("horizontal", clients=[np.array([0, 1, 2])]), 4, cover=True)
    with pytest.raises(ValueError, match="client 1 is empty"):
        check_partition(Partition("horizontal", clients=[np.array([0]), np.array([], int)]), 4)
    with pytest.raises(ValueError, match="has 3 features but shape"):
        check_partition(Partition("vertical", features=[np.arange(3)], feature_shapes=[(2, 2)]), 4)
    with pytest.raises(ValueError, match="Partition.kind 'diagonal'"):
        Partition("diagonal")


def test_partition_job_writes_the_tagged_partition(tmp_path):
    arrays = tmp_path / "arrays.npz"
    np.savez(arrays, **prepared_arrays())
    out = tmp_path / "partitions" / "dirichlet-a2-c10-p100-s0.npz"
    job = SimpleNamespace(wildcards={"tag": out.stem}, input={"arrays": str(arrays)},
                          output={"partition": str(out)})
    partition_job(job)
    p = load_partition(out)
    assert p.meta["tag"] == out.stem and len(p.clients) == 10 and p.public.size == 100


def test_module_does_not_import_torch():
    code = "import sys, fedrepro.data.partition; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
