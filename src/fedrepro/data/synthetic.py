"""Seeded stand-ins for datasets that cannot be fetched offline (quick scale, tests).

Same seed -> same arrays. Each generator mimics the structure the methods rely on,
not the real data's difficulty:

* `synthetic_multiview` (ModelNet40 stand-in): each object has a latent code drawn
  around its class prototype; view v is a fixed random linear projection P_v of that
  code plus pixel noise, squashed to uint8. Views share the class signal, each view
  alone is informative but noisy, as in a multi-view VFL split.
* `synthetic_text` (Amazon stand-in): binary sentiment documents; each word is a
  token from the label's polarity set with probability `signal`, from the opposite
  set with probability `signal * confusion`, otherwise neutral; then labels are
  flipped with probability `label_noise`. Laid out as `chunks` segments
  [CLS] words [SEP] (the same layout and special ids as `formats.hash_tokenize`).
* `synthetic_tabular` (fair-tabular stand-in): a DataFrame with a binary sex column
  (minority fraction `minority_fraction`), an age column, continuous and categorical
  columns, and a label whose log-odds depend on the features and on sex; prepared by
  the same pipeline as Adult.
"""

from __future__ import annotations


def synthetic_multiview(n_train: int = 2000, n_test: int = 500, num_classes: int = 10, views: int = 12,
                        channels: int = 1, size: int = 16, latent_dim: int = 32, class_sep: float = 1.0,
                        within_std: float = 1.0, pixel_noise: float = 0.5, seed: int = 0):
    """x uint8 N x V x C x H x W, y int64 (balanced classes, shuffled)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    prototypes = class_sep * rng.standard_normal((num_classes, latent_dim))
    pixels = channels * size * size
    projections = rng.standard_normal((views, latent_dim, pixels)) / np.sqrt(latent_dim)

    def draw(n):
        y = rng.permutation(np.arange(n) % num_classes).astype(np.int64)
        z = prototypes[y] + within_std * rng.standard_normal((n, latent_dim))
        v = np.einsum("nd,vdp->nvp", z, projections) + pixel_noise * rng.standard_normal((n, views, pixels))
        x = np.round(255.0 / (1.0 + np.exp(-v))).astype(np.uint8)
        return x.reshape(n, views, channels, size, size), y

    return (*draw(n_train), *draw(n_test))


def synthetic_text(n_train: int = 2000, n_test: int = 500, length: int = 96, chunks: int = 3,
                   vocab_size: int = 1000, n_polar: int = 50, signal: float = 0.15,
                   confusion: float = 0.3, label_noise: float = 0.05, seed: int = 0):
    """x int64 N x length token ids, y int64 in {0, 1}; and the tokenizer info dict."""
    import numpy as np

    from fedrepro.data.formats import CLS, N_SPECIAL, PAD, SEP, UNK, chunk_layout

    if N_SPECIAL + 2 * n_polar >= vocab_size:
        raise ValueError(f"vocab_size {vocab_size} too small for 2 x n_polar={n_polar} polarity tokens")
    if signal * (1 + confusion) > 1:
        raise ValueError("signal * (1 + confusion) must be <= 1")
    rng = np.random.default_rng(seed)
    polar = N_SPECIAL + rng.permutation(vocab_size - N_SPECIAL)[: 2 * n_polar]
    sets = (polar[:n_polar], polar[n_polar:])          # negative, positive
    neutral = np.setdiff1d(np.arange(N_SPECIAL, vocab_size), polar)
    words = chunks * (length // chunks - 2)

    def draw(n):
        y = rng.integers(0, 2, n)
        u = rng.random((n, words))
        own = np.where(y[:, None] == 1, rng.choice(sets[1], (n, words)), rng.choice(sets[0], (n, words)))
        other = np.where(y[:, None] == 1, rng.choice(sets[0], (n, words)), rng.choice(sets[1], (n, words)))
        tokens = np.where(u < signal, own,
                          np.where(u < signal * (1 + confusion), other, rng.choice(neutral, (n, words))))
        x = chunk_layout(tokens, length, chunks, CLS, SEP, PAD)
        flip = rng.random(n) < label_noise
        return x, np.where(flip, 1 - y, y).astype(np.int64)

    info = {"tokenizer": "synthetic", "vocab_size": vocab_size, "pad_id": PAD, "cls_id": CLS,
            "sep_id": SEP, "unk_id": UNK, "length": length, "chunks": chunks}
    return (*draw(n_train), *draw(n_test), info)


SYNTHETIC_TABULAR_CATEGORIES = {"work": 4, "education": 3, "region": 5}


def synthetic_tabular(n: int = 4000, minority_fraction: float = 0.3, s_effect: float = 1.0, seed: int = 0):
    """A raw DataFrame shaped like the fairness data sets.

    Columns: age (18..90), x1..x4 continuous, work/education/region categorical,
    sex ("Female" with probability `minority_fraction`, else "Male") and income
    (1 = positive). log-odds = features + `s_effect` * (sex == Male), so the positive
    rate differs between the groups (a demographic-parity gap).
    """
    import numpy as np
    import pandas as pd

    if not 0 < minority_fraction < 1:
        raise ValueError(f"minority_fraction must be in (0, 1), got {minority_fraction}")
    rng = np.random.default_rng(seed)
    female = rng.random(n) < minority_fraction
    age = np.clip(np.round(rng.normal(40, 12, n)), 18, 90).astype(np.int64)
    cont = rng.standard_normal((n, 4))
    cats = {c: rng.integers(0, k, n) for c, k in SYNTHETIC_TABULAR_CATEGORIES.items()}
    w_cont = rng.normal(0, 1, 4)
    w_cat = {c: rng.normal(0, 0.7, k) for c, k in SYNTHETIC_TABULAR_CATEGORIES.items()}
    logit = (cont @ w_cont + sum(w_cat[c][v] for c, v in cats.items())
             + 0.03 * (age - 40) + s_effect * (~female) - 0.5 * s_effect)
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    df = pd.DataFrame({"age": age, **{f"x{i + 1}": cont[:, i] for i in range(4)}})
    for c, v in cats.items():
        df[c] = [f"{c}_{k}" for k in v]
    df["sex"] = np.where(female, "Female", "Male")
    df["income"] = y
    return df
