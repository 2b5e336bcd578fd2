"""Partitioners: split one prepared data set among federated clients.

A partition is a small file of indices, written once per tag and read by every
method that trains on it (``partitions/{dataset}/{tag}.npz``). Two kinds:

* horizontal: ``Partition.clients[k]`` holds sorted indices into the training set
  of client k; ``Partition.public`` an optional public (server-side) index set,
  disjoint from every client.
* vertical: every client sees every sample but only some features.
  ``Partition.features[k]`` holds flat indices into one sample's flattened array and
  ``feature_shapes[k]`` the shape of client k's piece, so that
  ``x.reshape(n, -1)[:, idx].reshape(n, *shape)`` is client k's view (``Partition.view``).

Schemes (one function each; ``make_partition`` dispatches by name):

=========== ==================== =========================================== ==========
scheme      function             paper                                       reads
=========== ==================== =========================================== ==========
classes     classes_partition    FedSC §7.1: consecutive label blocks        y_train
dirichlet   dirichlet_partition  FedAL §VI-A: per-client Dir(alpha) mixture  y_train
natural     natural_partition    FedAL CelebA: LEAF natural clients          group_train
vertical    vertical_partition   DPZV §7: rows, patches, views, tokens       x_train (shape)
age         age_partition        SteFFLe Algorithm 3: heterogeneity h        age_train
=========== ==================== =========================================== ==========

Tags name partitions: ``make_tag("dirichlet", alpha=2, clients=10, public=1000, seed=0)``
gives ``dirichlet-a2-c10-p1000-s0``. A tag is the scheme followed by one token per
parameter in a fixed order: a one-letter key and its value, or a bare word for a
choice parameter (``vertical-rows-c7``). Optional parameters at their default are
left out (the seed is always written), so every partition has exactly one tag and
``parse_tag`` rejects any other spelling.

Pure numpy: importing this module never imports torch.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedrepro.data.arrays import save_npz

KINDS = ("horizontal", "vertical")


@dataclass
class Partition:
    """Who holds what. See the module docstring for the two kinds."""

    kind: str
    clients: list[np.ndarray] = field(default_factory=list)
    public: np.ndarray | None = None
    features: list[np.ndarray] = field(default_factory=list)
    feature_shapes: list[tuple[int, ...]] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Partition.kind {self.kind!r} is not one of {KINDS}")

    @property
    def num_clients(self) -> int:
        return len(self.clients) if self.kind == "horizontal" else len(self.features)

    def view(self, x: np.ndarray, k: int) -> np.ndarray:
        """Client k's features of the samples ``x`` (N x sample shape); vertical only."""
        if self.kind != "vertical":
            raise ValueError("Partition.view needs a vertical partition; index clients[k] instead")
        n = x.shape[0]
        return x.reshape(n, -1)[:, self.features[k]].reshape(n, *self.feature_shapes[k])


# --------------------------------------------------------------------------- schemes


def classes_partition(labels: np.ndarray, clients: int, per_client: int | None = None,
                      seed: int = 0) -> Partition:
    """FedSC's pathological split: client i holds the labels {k*i, ..., k*i+k-1}, k = K/clients.

    K is ``labels.max() + 1`` and must be a multiple of ``clients`` (SVHN 5 x 2,
    CIFAR-10 10 x 1, CIFAR-100 20 x 5). Without ``per_client`` the split is
    deterministic and covers the training set (the authors' code).
    FedSC §7.1 gives every SVHN client 10,000 samples, which its class pairs do not hold
    (the code does not subsample): ``per_client=m`` keeps m indices per client drawn
    uniformly without replacement (seeded); a client holding fewer than m keeps all of
    its samples (SVHN's class pair 8/9 has only 9,704), so the realised sizes are
    recorded in ``meta["sizes"]``.
    """
    labels = _as_labels(labels)
    _check_count("clients", clients, 1)
    num_classes = int(labels.max()) + 1
    if num_classes % clients:
        raise ValueError(f"classes: {num_classes} classes cannot be split into equal consecutive "
                         f"blocks for clients={clients}; clients must divide {num_classes}")
    if per_client is not None:
        _check_count("per_client", per_client, 1)
    k = num_classes // clients
    rng = np.random.default_rng(seed)
    parts = []
    for i in range(clients):
        idx = np.flatnonzero((labels >= k * i) & (labels < k * i + k))
        if idx.size == 0:
            raise ValueError(f"classes: client {i} (labels {k * i}..{k * i + k - 1}) has no samples")
        if per_client is not None and idx.size > per_client:
            idx = rng.choice(idx, size=per_client, replace=False)
        parts.append(idx)
    return _horizontal(parts, None)


def dirichlet_partition(labels: np.ndarray, alpha: float, clients: int, public: int = 0,
                        per_client: int | None = None, variant: str = "client",
                        seed: int = 0) -> Partition:
    """FedAL's Dirichlet split (FedAL §VI-A, which leaves the public set, the client sizes and
    an exhausted class open: the choices below).

    1. ``public`` indices are drawn uniformly from the whole training set first, from
       their own random stream, so the public set depends only on (seed, public, n),
       not on alpha or clients; they are removed before partitioning.
    2. ``variant="client"`` (the paper's): each client n draws q_n ~ Dir(alpha * 1_K)
       and then ``per_client`` samples (default: an equal share floor(pool / clients))
       class by class according to q_n, without replacement; clients are served in
       order 0..N-1. When a class runs out, the missing draws are re-drawn
       from q_n renormalised over the classes that still have samples (uniform over
       them if q_n puts no mass there). Guaranteed: every client gets exactly its
       size, clients and public are disjoint, and the pool left unassigned is
       ``pool - clients * per_client`` (fewer than ``clients`` samples by default);
       late clients may end up less skewed than their q_n when classes run dry.
    3. ``variant="class"`` (the common per-class-over-clients split, for comparison):
       each class's samples are split over clients with proportions p_k ~ Dir(alpha * 1_N);
       it covers the pool and client sizes vary (``per_client`` not allowed); a draw
       that leaves a client empty raises an error.
    """
    labels = _as_labels(labels)
    if not alpha > 0:
        raise ValueError(f"dirichlet: alpha must be > 0, got {alpha}")
    _check_count("clients", clients, 1)
    _check_count("public", public, 0)
    if variant not in DIRICHLET_VARIANTS:
        raise ValueError(f"dirichlet: variant {variant!r} is not one of {DIRICHLET_VARIANTS}")
    public_rng, split_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    if public > labels.size:
        raise ValueError(f"dirichlet: public={public} exceeds the {labels.size} training samples")
    public_idx = np.sort(public_rng.choice(labels.size, size=public, replace=False))
    pool = np.setdiff1d(np.arange(labels.size), public_idx)
    if variant == "class":
        if per_client is not None:
            raise ValueError("dirichlet: per_client only applies to variant='client'")
        parts = _dirichlet_over_clients(labels, pool, alpha, clients, split_rng)
    else:
        if per_client is not None:
            _check_count("per_client", per_client, 1)
        size = pool.size // clients if per_client is None else per_client
        if size < 1 or size * clients > pool.size:
            raise ValueError(f"dirichlet: cannot give clients={clients} x {size} samples each from "
                             f"{pool.size} non-public samples (more clients than samples?)")
        parts = _dirichlet_per_client(labels, pool, alpha, clients, size, split_rng)
    return _horizontal(parts, public_idx if public else None)


DIRICHLET_VARIANTS = ("client", "class")


def _dirichlet_per_client(labels, pool, alpha, clients, size, rng) -> list[np.ndarray]:
    num_classes = int(labels.max()) + 1
    # Shuffled per-class stacks; a client takes from the front of each.
    stacks = [rng.permutation(pool[labels[pool] == c]) for c in range(num_classes)]
    used = np.zeros(num_classes, dtype=np.int64)
    parts = []
    for _ in range(clients):
        q = rng.dirichlet(np.full(num_classes, alpha))
        counts = _class_counts(q, size, np.array([len(s) for s in stacks]) - used, rng)
        parts.append(np.concatenate([stacks[c][used[c]:used[c] + counts[c]] for c in range(num_classes)]))
        used += counts
    return parts


def _class_counts(q: np.ndarray, size: int, available: np.ndarray, rng) -> np.ndarray:
    """Multinomial(size, q) class counts, re-drawing over non-exhausted classes when one runs out."""
    counts = np.zeros_like(available)
    while (need := size - counts.sum()) > 0:
        open_ = available > counts
        p = q * open_
        p = p / p.sum() if p.sum() > 0 else open_ / open_.sum()
        counts += np.minimum(rng.multinomial(need, p), available - counts)
    return counts


def _dirichlet_over_clients(labels, pool, alpha, clients, rng) -> list[np.ndarray]:
    parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
    for c in range(int(labels.max()) + 1):
        idx = rng.permutation(pool[labels[pool] == c])
        cuts = (np.cumsum(rng.dirichlet(np.full(clients, alpha)))[:-1] * idx.size).astype(int)
        for k, piece in enumerate(np.split(idx, cuts)):
            parts[k].append(piece)
    parts = [np.concatenate(p) for p in parts]
    empty = [k for k, p in enumerate(parts) if p.size == 0]
    if empty:
        raise ValueError(f"dirichlet: variant='class' left clients {empty} without samples; "
                         "use a larger alpha, fewer clients or another seed")
    return parts


def natural_partition(groups: np.ndarray, clients: int, public: int = 0, seed: int = 0) -> Partition:
    """LEAF's natural split (FedAL CelebA): one client per natural group (celebrity).

    ``clients`` groups are chosen uniformly without replacement (seeded), like
    LEAF's random user sampling but stopped at a number of users rather than a
    data fraction; client order follows the sorted group ids, which are stored in
    ``meta["groups"]`` so that evaluation can pick the same users' test samples.
    ``public`` samples (FedAL leaves their source open) are drawn uniformly from the groups not chosen
    (held-out users), so the public set shares no person with any client.
    """
    groups = np.asarray(groups)
    if groups.ndim != 1:
        raise ValueError(f"natural: group ids must be 1-D, got shape {groups.shape}")
    _check_count("clients", clients, 1)
    _check_count("public", public, 0)
    ids = np.unique(groups)
    if clients > ids.size:
        raise ValueError(
            f"natural: clients={clients} exceeds the {ids.size} groups in group_train (one client per natural "
            f"group); config key 'fedal.experiments.<name>.clients' of a natural partition: allowed 1 to {ids.size}"
        )
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(ids, size=clients, replace=False))
    parts = [np.flatnonzero(groups == g) for g in chosen]
    held_out = np.flatnonzero(~np.isin(groups, chosen))
    if public > held_out.size:
        raise ValueError(f"natural: public={public} exceeds the {held_out.size} samples of held-out groups")
    public_idx = rng.choice(held_out, size=public, replace=False) if public else None
    p = _horizontal(parts, public_idx)
    p.meta["groups"] = chosen.tolist()
    return p


VERTICAL_SPLITS = ("rows", "patches", "views", "tokens")


def vertical_partition(sample_shape: tuple[int, ...], split: str, clients: int) -> Partition:
    """DPZV's feature splits (DPZV §7, "Setup") of one sample of shape ``sample_shape``.

    * ``rows``: C x H x W image, H split into ``clients`` consecutive strips
      (MNIST 7 strips of 4 rows, digits 4 strips of 2 rows); client k gets C x h_k x W.
    * ``patches``: C x H x W image cut into a g x g grid, clients = g^2 (CIFAR-10: 2 x 2);
      client k gets row block k // g, column block k % g.
    * ``views``: V x C x H x W multiview sample, clients = V; client k gets view k (C x H x W).
    * ``tokens``: 1-D sample (text tokens, or tabular columns) split into ``clients``
      consecutive chunks.
    Uneven sizes follow ``np.array_split`` (the first pieces are one larger).
    """
    shape = tuple(int(s) for s in sample_shape)
    _check_count("clients", clients, 1)
    if split not in VERTICAL_SPLITS:
        raise ValueError(f"vertical: split {split!r} is not one of {VERTICAL_SPLITS}")
    want_ndim = {"rows": 3, "patches": 3, "views": 4, "tokens": 1}[split]
    if len(shape) != want_ndim:
        raise ValueError(f"vertical: split={split!r} needs a {want_ndim}-D sample shape, got {shape}")
    grid = np.arange(math.prod(shape)).reshape(shape)
    pieces = {"rows": _rows, "patches": _patches, "views": _views, "tokens": _tokens}[split](grid, clients)
    return Partition("vertical", features=[p.ravel() for p in pieces],
                     feature_shapes=[tuple(p.shape) for p in pieces],
                     meta={"sizes": [int(p.size) for p in pieces], "sample_shape": list(shape)})


def _strips(grid: np.ndarray, m: int, axis: int) -> list[np.ndarray]:
    if m > grid.shape[axis]:
        raise ValueError(f"vertical: cannot cut {grid.shape[axis]} along axis {axis} into {m} pieces")
    return np.array_split(grid, m, axis=axis)


def _rows(grid, clients):
    return _strips(grid, clients, axis=1)


def _patches(grid, clients):
    g = math.isqrt(clients)
    if g * g != clients:
        raise ValueError(f"vertical: split='patches' needs a square number of clients, got {clients}")
    return [patch for strip in _strips(grid, g, axis=1) for patch in _strips(strip, g, axis=2)]


def _views(grid, clients):
    if clients != grid.shape[0]:
        raise ValueError(f"vertical: split='views' needs clients == number of views ({grid.shape[0]}), "
                         f"got {clients}")
    return list(grid)


def _tokens(grid, clients):
    return _strips(grid, clients, axis=0)


AGE_SORTS = ("stable", "quicksort")


def _sort_impl() -> str:
    """numpy's version and the CPU's sort-relevant SIMD level: numpy's quicksort argsort of 32/64-bit
    values runs x86-simd-sort on AVX2 / AVX-512 CPUs (numpy >= 2) and a scalar introsort otherwise,
    and their tie orders differ."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_features__ as features
    simd = next((k for k in ("AVX512_SKX", "AVX2") if features.get(k)), "no x86 SIMD")
    return f"numpy {np.__version__}, {simd}"


def age_partition(attribute: np.ndarray, clients: int, h: float, seed: int = 100, sort: str = "stable") -> Partition:
    """SteFFLe Algorithm 3 (App. E.2.3), following the authors' ``dataloader_fed.py``.

    Sort by the attribute and cut K = clients blocks of size m = int(n / K), the last taking
    the remainder. ``sort`` decides the order of ties, hence which block a tied sample is in:
    "stable" keeps data order; "quicksort" is the reference's own sort, ``df.sort_values(by=age)``,
    which is numpy's quicksort argsort (pandas' default kind), called here the same way. Its tie
    order depends on numpy's implementation for the CPU (``meta["sort_impl"]`` records it): with
    numpy 2.4 on an AVX2 CPU it reproduces the reference's silos exactly. Then for k = 0..K-1
    silo k draws int(m * h) indices from its own block; then for k = 0..K-1 it is
    filled up to m from all not yet assigned indices, at random. The n mod K left
    over keep their block label and join that silo. One legacy
    ``np.random.RandomState(seed)`` (reference: ``random_state=100``) makes every
    draw in the reference's order, so the draws match the reference code.
    h = 0 is an IID-like split; h = 1 gives exactly the quantile blocks.
    """
    attribute = np.asarray(attribute)
    if attribute.ndim != 1:
        raise ValueError(f"age: attribute must be 1-D, got shape {attribute.shape}")
    _check_count("clients", clients, 1)
    if not 0.0 <= h <= 1.0:
        raise ValueError(f"age: heterogeneity h must be in [0, 1], got {h}")
    n = attribute.size
    if clients > n:
        raise ValueError(f"age: clients={clients} exceeds the {n} training samples")
    if sort not in AGE_SORTS:
        raise ValueError(f"age: sort must be one of {AGE_SORTS}, got {sort!r}")
    size = n // clients
    block = np.empty(n, dtype=np.int64)
    block[np.argsort(attribute, kind=sort)] = np.minimum(np.arange(n) // size, clients - 1)
    rs = np.random.RandomState(seed)
    taken = np.zeros(n, dtype=bool)
    silos = []
    for k in range(clients):
        own = rs.choice(np.flatnonzero(block == k), size=int(size * h), replace=False)
        taken[own] = True
        silos.append([own])
    for k in range(clients):
        fill = rs.choice(np.flatnonzero(~taken), size=size - silos[k][0].size, replace=False)
        taken[fill] = True
        silos[k].append(fill)
    for i in np.flatnonzero(~taken):
        silos[block[i]].append(np.array([i]))
    p = _horizontal([np.concatenate(s) for s in silos], None)
    p.meta["own_block"] = int(size * h)
    if sort == "quicksort":
        p.meta["sort_impl"] = _sort_impl()
    return p


# --------------------------------------------------------------------------- tags and dispatch


@dataclass(frozen=True)
class Param:
    """One scheme parameter: its tag key ("" = written as the bare value), type and default."""

    name: str
    key: str
    type: type
    default: Any = None
    required: bool = False
    always: bool = False          # written in the tag even at its default
    choices: tuple[str, ...] = ()


_SEED = Param("seed", "s", int, 0, always=True)


@dataclass(frozen=True)
class Scheme:
    function: Callable[..., Partition]
    reads: str                    # the arrays.npz entry it needs
    params: tuple[Param, ...]


SCHEMES: dict[str, Scheme] = {
    "classes": Scheme(classes_partition, "y_train", (
        Param("clients", "c", int, required=True),
        Param("per_client", "n", int),
        _SEED)),
    "dirichlet": Scheme(dirichlet_partition, "y_train", (
        Param("alpha", "a", float, required=True),
        Param("clients", "c", int, required=True),
        Param("public", "p", int, 0),
        Param("per_client", "n", int),
        Param("variant", "", str, "client", choices=DIRICHLET_VARIANTS),
        _SEED)),
    "natural": Scheme(natural_partition, "group_train", (
        Param("clients", "c", int, required=True),
        Param("public", "p", int, 0),
        _SEED)),
    "vertical": Scheme(vertical_partition, "x_train", (
        Param("split", "", str, required=True, choices=VERTICAL_SPLITS),
        Param("clients", "c", int, required=True))),
    "age": Scheme(age_partition, "age_train", (
        Param("clients", "c", int, required=True),
        Param("h", "h", float, required=True),
        Param("sort", "", str, "stable", choices=AGE_SORTS),
        Param("seed", "s", int, 100, always=True))),
}


def make_tag(scheme: str, **params: Any) -> str:
    """The canonical file-name tag of a partition, e.g. ``dirichlet-a2-c10-p1000-s0``."""
    spec = _scheme(scheme)
    values = resolve_params(scheme, params)
    tokens = [scheme]
    for prm in spec.params:
        value = values[prm.name]
        if prm.required or prm.always or value != prm.default:
            tokens.append(prm.key + _format(value))
    return "-".join(tokens)


def parse_tag(tag: str) -> tuple[str, dict[str, Any]]:
    """Inverse of ``make_tag``: ``(scheme, params)`` with every parameter (defaults filled)."""
    scheme, *tokens = tag.split("-")
    spec = _scheme(scheme)
    by_key = {prm.key: prm for prm in spec.params if prm.key}
    raw: dict[str, Any] = {}
    for token in tokens:
        prm = _param_of_token(scheme, spec, by_key, token, tag)
        if prm.name in raw:
            raise ValueError(f"partition tag {tag!r}: parameter {prm.name!r} appears twice")
        raw[prm.name] = token if not prm.key else _parse_value(prm, token[1:], tag)
    try:
        params = resolve_params(scheme, raw)
    except ValueError as err:
        raise ValueError(f"partition tag {tag!r}: {err}") from None
    canonical = make_tag(scheme, **params)
    if canonical != tag:
        raise ValueError(f"partition tag {tag!r} is not canonical; write it as {canonical!r}")
    return scheme, params


def resolve_params(scheme: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Check names and types of ``params`` for ``scheme`` and fill the defaults."""
    spec = _scheme(scheme)
    names = [prm.name for prm in spec.params]
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise ValueError(f"partition scheme {scheme!r}: unknown parameter(s) {unknown}; allowed: {names}")
    out = {}
    for prm in spec.params:
        if prm.name not in params:
            if prm.required:
                raise ValueError(f"partition scheme {scheme!r}: missing required parameter {prm.name!r}")
            out[prm.name] = prm.default
        else:
            out[prm.name] = _coerce(scheme, prm, params[prm.name])
    return out


def make_partition(scheme: str, arrays: Mapping[str, np.ndarray], **params: Any) -> Partition:
    """Build a partition by scheme name from the prepared arrays (an ``arrays.npz`` mapping).

    Each scheme reads one entry (``SCHEMES[scheme].reads``); ``vertical`` needs only
    the shape of ``x_train``. The result is validated and ``meta`` records scheme,
    params, seed, tag, n and sizes.
    """
    spec = _scheme(scheme)
    values = resolve_params(scheme, params)
    if spec.reads not in arrays:
        raise KeyError(f"partition scheme {scheme!r} needs {spec.reads!r} in the prepared arrays; "
                       f"found {sorted(arrays)}")
    data = arrays[spec.reads]
    first = data.shape[1:] if scheme == "vertical" else data
    p = spec.function(first, **values)
    n = math.prod(data.shape[1:]) if scheme == "vertical" else len(data)
    p.meta.update(scheme=scheme, params=values, seed=values.get("seed"),
                  tag=make_tag(scheme, **values), n=int(n))
    check_partition(p, n, cover=_covers(scheme, values))
    return p


def _covers(scheme: str, values: dict[str, Any]) -> bool:
    """Whether the scheme assigns every index (clients + public) by construction."""
    if scheme == "classes":
        return values["per_client"] is None
    if scheme == "dirichlet":
        return values["variant"] == "class"
    return scheme in ("vertical", "age")


def partition_job(job) -> None:
    """Pipeline entry (data.smk rule ``partition``): parse ``job.wildcards["tag"]``, read
    ``job.input["arrays"]``, write ``job.output["partition"]``."""
    scheme, params = parse_tag(job.wildcards["tag"])
    with np.load(job.input["arrays"]) as arrays:
        p = make_partition(scheme, arrays, **params)
    save_partition(p, job.output["partition"])


# --------------------------------------------------------------------------- checks and files


def check_partition(p: Partition, n: int, cover: bool = False) -> None:
    """Raise ValueError unless ``p`` is well formed for ``n`` training samples (horizontal)
    or ``n`` features per sample (vertical): integer indices in range, no index twice
    (public included), no empty client; with ``cover`` every index assigned."""
    if p.kind == "vertical":
        if len(p.features) != len(p.feature_shapes):
            raise ValueError("partition: features and feature_shapes differ in length")
        for k, (idx, shape) in enumerate(zip(p.features, p.feature_shapes)):
            if idx.size != math.prod(shape):
                raise ValueError(f"partition: client {k} has {idx.size} features but shape {shape}")
        pieces = list(p.features)
    else:
        pieces = list(p.clients) + ([p.public] if p.public is not None else [])
    if not pieces:
        raise ValueError("partition: no clients")
    for k, idx in enumerate(pieces):
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"partition: piece {k} must be a 1-D integer array, got {idx.dtype} {idx.shape}")
        if idx.size == 0 and k < p.num_clients:
            raise ValueError(f"partition: client {k} is empty")
    every = np.concatenate(pieces)
    if every.size and (every.min() < 0 or every.max() >= n):
        raise ValueError(f"partition: indices out of range [0, {n})")
    counts = np.bincount(every, minlength=n)
    if (counts > 1).any():
        raise ValueError(f"partition: {int((counts > 1).sum())} indices are held more than once")
    if cover and (counts == 0).any():
        raise ValueError(f"partition: {int((counts == 0).sum())} of {n} indices are not assigned")


def save_partition(p: Partition, path: str | os.PathLike) -> None:
    """Write ``p`` to ``path`` (npz) atomically: a temporary file in the same folder, then rename."""
    arrays = {"kind": np.array(p.kind), "meta": np.array(json.dumps(p.meta, sort_keys=True))}
    for k, idx in enumerate(p.clients):
        arrays[f"client_{k}"] = idx
    if p.public is not None:
        arrays["public"] = p.public
    for k, (idx, shape) in enumerate(zip(p.features, p.feature_shapes)):
        arrays[f"feature_{k}"] = idx
        arrays[f"shape_{k}"] = np.array(shape, dtype=np.int64)
    save_npz(path, arrays)


def load_partition(path: str | os.PathLike) -> Partition:
    """Read a partition written by ``save_partition``."""
    with np.load(path, allow_pickle=False) as z:
        def numbered(prefix: str) -> list[np.ndarray]:
            count = sum(1 for name in z.files if name.startswith(prefix))
            return [z[f"{prefix}{k}"] for k in range(count)]

        return Partition(
            kind=str(z["kind"]),
            clients=numbered("client_"),
            public=z["public"] if "public" in z.files else None,
            features=numbered("feature_"),
            feature_shapes=[tuple(int(s) for s in shape) for shape in numbered("shape_")],
            meta=json.loads(str(z["meta"])),
        )


# --------------------------------------------------------------------------- helpers


def _horizontal(parts: list[np.ndarray], public: np.ndarray | None) -> Partition:
    clients = [np.sort(np.asarray(idx, dtype=np.int64)) for idx in parts]
    public = None if public is None else np.sort(np.asarray(public, dtype=np.int64))
    meta = {"sizes": [int(c.size) for c in clients], "public_size": 0 if public is None else int(public.size)}
    return Partition("horizontal", clients=clients, public=public, meta=meta)


def _as_labels(labels: np.ndarray) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a non-empty 1-D integer array, got {labels.dtype} {labels.shape}")
    if labels.min() < 0:
        raise ValueError("labels must be >= 0")
    return labels


def _check_count(name: str, value: int, low: int) -> None:
    if value is None or value < low:
        raise ValueError(f"partition parameter {name!r} must be >= {low}, got {value}")


def _scheme(scheme: str) -> Scheme:
    if scheme not in SCHEMES:
        raise ValueError(f"unknown partition scheme {scheme!r}; allowed schemes: {', '.join(SCHEMES)}")
    return SCHEMES[scheme]


def _coerce(scheme: str, prm: Param, value: Any) -> Any:
    if value is None and not prm.required and prm.default is None:
        return None
    where = f"partition scheme {scheme!r} parameter {prm.name!r}"
    if prm.choices:
        if value not in prm.choices:
            raise ValueError(f"{where}: {value!r} is not one of {prm.choices}")
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise ValueError(f"{where}: expected a finite number >= 0, got {value!r}")
    if prm.type is int:
        if not number.is_integer():
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        return int(number)
    return number


def _format(value: Any) -> str:
    if isinstance(value, float):
        return np.format_float_positional(value, trim="-")
    return str(value)


def _param_of_token(scheme: str, spec: Scheme, by_key: dict[str, Param], token: str, tag: str) -> Param:
    """Bare words are choice values; every other token is a one-letter key and a number."""
    for prm in spec.params:
        if not prm.key and token in prm.choices:
            return prm
    if token[:1] in by_key and not token.isalpha():
        return by_key[token[:1]]
    keys = ", ".join(f"{prm.key or '|'.join(prm.choices)} ({prm.name})" for prm in spec.params)
    raise ValueError(f"partition tag {tag!r}: token {token!r} is not a parameter of scheme {scheme!r}; "
                     f"allowed keys: {keys}")


def _parse_value(prm: Param, text: str, tag: str) -> Any:
    try:
        return prm.type(text)
    except ValueError:
        raise ValueError(f"partition tag {tag!r}: {prm.name!r} needs a {prm.type.__name__}, "
                         f"got {text!r}") from None
