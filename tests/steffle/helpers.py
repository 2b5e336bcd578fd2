"""Small synthetic fair-tabular data for the SteFFLe tests."""

import numpy as np

from fedrepro.algorithms.steffle.base import FairData
from fedrepro.fl.transport import Wire


def synthetic(n=600, d=6, seed=0, minority=0.35, silos=3):
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < minority).astype(np.int64)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x[:, 0] += 1.5 * s                       # a feature correlated with s
    logit = 1.2 * x[:, 0] + x[:, 1] - 0.5
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    n_tr = 3 * n // 4
    perm = rng.permutation(n_tr)
    parts = np.array_split(perm, silos)
    return FairData.from_arrays(x[:n_tr], y[:n_tr], s[:n_tr], x[n_tr:], y[n_tr:], s[n_tr:], parts)


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
