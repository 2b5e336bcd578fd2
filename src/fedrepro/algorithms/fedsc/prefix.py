"""The rounds a private FedSC run shares with FedAvg+SC (pure Python: the planner and the jobs share it).

Before its first sharing round a FedSC run is FedAvg+SC (Algorithm 1: no matrix has been uploaded, so
the local loss is SC with alpha = 1 and no DP-CalR draws a random number), bit for bit, for the same data,
partition, participation, seed and number of rounds T (the learning rate and alpha schedules read T).
So these rounds run once per (data set, setting without privacy, seed, first sharing round), as a
*prefix* job (`fedrepro.algorithms.fedsc.fedsc:run_prefix`), and every run that starts with them resumes
from the prefix's state: the private runs, a longer prefix of the same setting, and the FedAvg+SC run
itself. Its state is a checkpoint of `fedrepro.fl.loop` (model, every RNG state, metric rows), the one
an interrupted run resumes from.

What the prefix depends on is the run's spec without the keys read only on and after a sharing round
(`PRIVATE_KEYS`), with `sharing: null`, and without the kNN monitor's cadence: the prefix evaluates the
monitor at every round any of its runs does (the gcd of their `knn.every`) and a run that monitors less
often drops the others (the monitor draws no random number and leaves the model as it was).
"""

from __future__ import annotations

NO_SHARING = "fedavg_sc"  # the method a prefix is a run of
PRIVATE_KEYS = ("privacy", "alpha", "dpcalr", "client_weights")  # read only on and after a sharing round
ROUNDS_KEY = "prefix_rounds"  # the prefix job's spec: how many rounds it runs (of `rounds`)
KNN_KEY = "knn_acc"  # the metric of the kNN monitor (FedSSL.evaluate)


def shares_at(t: int, num_rounds: int, sharing: dict | None) -> bool:
    """Whether round t is a sharing round of the schedule {after: fraction of T, every: k}."""
    if sharing is None:
        return False
    after, every = float(sharing.get("after", 0.0)), int(sharing.get("every", 1))
    if not 0.0 <= after < 1.0 or every < 1:
        raise ValueError(f"sharing needs 0 <= after < 1 and every >= 1, got after={after}, every={every}")
    return t > after * num_rounds and t % every == 0


def rounds_before_sharing(spec: dict) -> int:
    """The rounds a run shares with FedAvg+SC: those before its first sharing round (all without sharing)."""
    rounds = int(spec["rounds"])
    return next((t - 1 for t in range(1, rounds + 1) if shares_at(t, rounds, spec.get("sharing"))), rounds)


def knn_every(spec: dict) -> int:
    return int(spec.get("knn", {}).get("every", 1))


def identity(spec: dict) -> dict:
    """The spec of the FedAvg+SC run whose first rounds `spec`'s run repeats, kNN cadence and prefix length
    left out: two runs share a prefix when their identities are equal."""
    out = {k: v for k, v in spec.items() if k not in (*PRIVATE_KEYS, ROUNDS_KEY)}
    out.update(method=NO_SHARING, sharing=None, knn={k: v for k, v in spec.get("knn", {}).items() if k != "every"})
    return out


def prefix_spec(spec: dict, rounds: int, every: int) -> dict:
    """The prefix job's spec: `spec`'s identity, the kNN monitor every `every` rounds, `rounds` rounds run."""
    out = identity(spec)
    out["knn"] = {**out["knn"], "every": every}
    return {**out, ROUNDS_KEY: rounds}


def mismatch(prefix: dict, spec: dict) -> str | None:
    """Why the prefix job of spec `prefix` cannot start the run of `spec` (None: it can)."""
    mine, theirs = identity(spec), identity(prefix)
    different = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    if different:
        return f"the prefix was run with other settings ({', '.join(different)})"
    if knn_every(spec) % knn_every(prefix):
        return f"the prefix monitors kNN every {knn_every(prefix)} rounds, the run every {knn_every(spec)}"
    if int(prefix[ROUNDS_KEY]) > rounds_before_sharing(spec):
        return (
            f"the prefix runs {prefix[ROUNDS_KEY]} rounds, the run shares from round {rounds_before_sharing(spec) + 1}"
        )
    return None
