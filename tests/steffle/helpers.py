"""Small synthetic fair-tabular data and the pipeline's own config for the SteFFLe tests."""

from pathlib import Path

import numpy as np

from fedrepro.algorithms.steffle.base import FairData
from fedrepro.config import load_yaml, merge_configs
from fedrepro.fl.transport import Wire

ROOT = Path(__file__).resolve().parents[2]


def pipeline_config(scale: str = "quick") -> dict:
    """config.yaml, with configs/paper.yaml merged over it at paper scale (as Snakemake merges them)."""
    config = load_yaml(ROOT / "config.yaml")
    if scale == "paper":
        config = merge_configs(config, load_yaml(ROOT / "configs" / "paper.yaml"))
    return config


def synthetic(n=600, d=6, seed=0, minority=0.35, silos=3):
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < minority).astype(np.int64)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x[:, 0] += 1.5 * s  # a feature correlated with s
    logit = 1.2 * x[:, 0] + x[:, 1] - 0.5
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    n_tr = 3 * n // 4
    perm = rng.permutation(n_tr)
    parts = np.array_split(perm, silos)
    return FairData.from_arrays(x[:n_tr], y[:n_tr], s[:n_tr], x[n_tr:], y[n_tr:], s[n_tr:], parts)


def prepared_synthetic(tmp_path):
    """The synthetic fair-tabular data set as the pipeline prepares it, and 3 silos (h = 0.75)."""
    from fedrepro.data.arrays import load_prepared
    from fedrepro.data.partition import age_partition, save_partition
    from fedrepro.data.prepare import prepare_dataset

    folder = prepare_dataset("synthetic_tabular", tmp_path / "data", tmp_path / "raw", {"n": 1200})
    prepared = load_prepared(folder)
    part = tmp_path / "part.npz"
    save_partition(age_partition(prepared.extras["age_train"], 3, 0.75), part)
    return folder / "arrays.npz", part


class ServerInbox(Wire):
    """Keeps what the server receives: {(round, silo, kind): tensor}."""

    def __init__(self):
        super().__init__(record=False)
        self.got = {}

    def send(self, sender, receiver, kind, payload):
        out = super().send(sender, receiver, kind, payload)
        if receiver == "server":
            self.got[(self.round, sender, kind)] = out.clone()
        return out
