"""Private FedSC runs resumed from the shared FedAvg+SC prefix (issue 30; fedrepro.algorithms.fedsc.prefix).

A private run (DP-CalR sharing from round P + 1) started from the prefix job's state after P rounds gives
the same metrics, summary and final weights, bit for bit, as the same run from round 1; so do a longer
prefix started from a shorter one and the FedAvg+SC run started from the longest. Each check is shown to
fail when the prefix comes from another seed or setting, or when one of the run's RNG states is not
restored."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedrepro.algorithms.fedsc import prefix as fedsc_prefix
from fedrepro.algorithms.fedsc.fedsc import run_fedavg_sc, run_fedsc, run_prefix
from fedrepro.pipeline import make_job
from tests.fedsc.helpers import tiny_spec, write_prepared_digits

torch.set_num_threads(1)
ROUNDS, SEEDS = 5, [0, 1]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    from fedrepro.data.partition import make_partition, save_partition

    root = tmp_path_factory.mktemp("inputs")
    data = write_prepared_digits(root)
    labels = np.load(data)["y_train"]
    save_partition(make_partition("classes", {"y_train": labels}, clients=5), root / "part.npz")
    return {"data": str(data), "partition": str(root / "part.npz")}


def private_spec(**over) -> dict:
    """A partial-participation FedSC run at eps = 3 sharing from round 3 of 5 (prefix: rounds 1-2)."""
    spec = tiny_spec(
        rounds=ROUNDS,
        method="fedsc",
        device="cpu",
        participation=2,
        first_round="all",
        sharing={"after": 0.5, "every": 1},
        privacy={"eps": 3, "delta": 1e-2, "sigma": None, "deltas": [1e-2], "sens_factor": "sqrt2"},
        alpha={"start": 1.0, "end": 0.2},
        client_weights="uniform",
        knn={"k": 5, "every": ROUNDS},
    )
    spec.update(over)
    return spec


def no_sharing_spec(**over) -> dict:
    """The FedAvg+SC run of the same setting, monitoring kNN every round (as Figure 2's)."""
    spec = {k: v for k, v in private_spec().items() if k not in fedsc_prefix.PRIVATE_KEYS}
    spec.update(method="fedavg_sc", sharing=None, knn={"k": 5, "every": 1}, **over)
    return spec


def run(root: Path, entry, spec: dict, inputs: dict, prefix: Path | None = None, seeds=SEEDS) -> dict:
    """One job of `entry` in its own folder; returns its outputs' contents."""
    root.mkdir(parents=True, exist_ok=True)
    names = {"metrics": "metrics.parquet", "summary": "summary.json"}
    names.update({"prefix": "prefix.pt"} if entry is run_prefix else {"model": "model.pt"})
    out = {k: str(root / v) for k, v in names.items()}
    job = make_job(spec, out, {**inputs, **({"prefix": str(prefix)} if prefix else {})}, seeds=seeds)
    entry(job)
    result = {"metrics": pd.read_parquet(out["metrics"]), "summary": json.loads(Path(out["summary"]).read_text())}
    if "model" in out:
        result["model"] = torch.load(out["model"], weights_only=False)
    return result


def assert_same(a: dict, b: dict) -> None:
    pd.testing.assert_frame_equal(a["metrics"], b["metrics"], check_exact=True)
    assert a["summary"]["seeds"] == b["summary"]["seeds"]
    for seed, parts in a["model"]["seeds"].items():
        for part, state in parts.items():
            for k, v in state.items():
                assert torch.equal(v, b["model"]["seeds"][seed][part][k]), (seed, part, k)


def differs(a: dict, b: dict) -> bool:
    try:
        assert_same(a, b)
    except AssertionError:
        return True
    return False


def make_prefix(tmp: Path, inputs: dict, rounds: int, spec: dict | None = None, start: Path | None = None) -> Path:
    """The prefix job of `spec`'s setting (default: the private run's) for `rounds` rounds, monitoring kNN
    every round (the gcd of its runs' cadences: FedAvg+SC's 1, the private run's 5)."""
    job_spec = fedsc_prefix.prefix_spec(spec or private_spec(), rounds, 1)
    run(tmp / f"prefix{rounds}", run_prefix, job_spec, inputs, start)
    return tmp / f"prefix{rounds}" / "prefix.pt"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory, inputs):
    """The private run and the FedAvg+SC run from round 1, and the two prefixes (2 rounds; 3 from 2)."""
    tmp = tmp_path_factory.mktemp("scratch")
    short = make_prefix(tmp, inputs, 2)
    return {
        "tmp": tmp,
        "private": run(tmp / "private", run_fedsc, private_spec(), inputs),
        "fedavg_sc": run(tmp / "fedavg_sc", run_fedavg_sc, no_sharing_spec(), inputs),
        "short": short,
        "long": make_prefix(tmp, inputs, 3, start=short),
    }


def test_rounds_before_sharing_follow_the_schedule():
    assert fedsc_prefix.rounds_before_sharing({"rounds": 200, "sharing": {"after": 0.5, "every": 1}}) == 100
    assert fedsc_prefix.rounds_before_sharing({"rounds": 200, "sharing": {"after": 0.5, "every": 2}}) == 101
    assert fedsc_prefix.rounds_before_sharing({"rounds": 200, "sharing": {"after": 0.75, "every": 1}}) == 150
    assert fedsc_prefix.rounds_before_sharing({"rounds": 200, "sharing": {"after": 0.0, "every": 1}}) == 0
    assert fedsc_prefix.rounds_before_sharing({"rounds": 200, "sharing": None}) == 200


def test_private_run_from_the_prefix_is_the_run_from_round_1(scratch, inputs, tmp_path):
    resumed = run(tmp_path / "private", run_fedsc, private_spec(), inputs, scratch["short"])
    assert_same(scratch["private"], resumed)
    assert resumed["metrics"]["knn_acc"].notna().sum() == len(SEEDS)  # the prefix's per-round kNN dropped
    shares = resumed["summary"]["seeds"]["0"]["privacy"]["shares"]
    assert min(shares) >= 1 and max(shares) == 3  # rounds 3-5 share (round 3: every client uploads)


def test_fedavg_sc_from_the_longer_prefix_is_the_run_from_round_1(scratch, inputs, tmp_path):
    """The longer prefix started from the shorter one, the FedAvg+SC run from the longer (the chain)."""
    resumed = run(tmp_path / "fedavg_sc", run_fedavg_sc, no_sharing_spec(), inputs, scratch["long"])
    assert_same(scratch["fedavg_sc"], resumed)
    assert resumed["metrics"]["knn_acc"].notna().all()  # Figure 2's monitor: every round, prefix's included


def test_prefix_of_another_setting_or_longer_than_the_run_is_refused(scratch, inputs, tmp_path):
    for spec, why in (
        (private_spec(mu=1.0), r"other settings \(mu\)"),
        (private_spec(participation="full"), r"other settings \(participation\)"),
        (private_spec(sharing={"after": 0.2, "every": 1}), "shares from round 2"),
    ):
        with pytest.raises(ValueError, match=why):
            run(tmp_path / "refused", run_fedsc, spec, inputs, scratch["short"])
    with pytest.raises(ValueError, match="not seed 2"):
        run(tmp_path / "refused_seed", run_fedsc, private_spec(), inputs, scratch["short"], seeds=[2])
    # a private run's own settings (noise, schedule, weights) do not enter the prefix
    assert fedsc_prefix.mismatch(torch.load(scratch["short"], weights_only=False)["spec"], private_spec()) is None


def test_the_check_fails_with_another_seeds_prefix(scratch, inputs, tmp_path):
    prefix = torch.load(scratch["short"], weights_only=False)
    prefix["seeds"] = {0: prefix["seeds"][1], 1: prefix["seeds"][0]}
    torch.save(prefix, tmp_path / "swapped.pt")
    assert differs(scratch["private"], run(tmp_path / "p", run_fedsc, private_spec(), inputs, tmp_path / "swapped.pt"))


def test_the_check_fails_with_another_settings_prefix(scratch, inputs, tmp_path, monkeypatch):
    other = make_prefix(tmp_path, inputs, 2, private_spec(train={**private_spec()["train"], "lr": 0.05}))
    monkeypatch.setattr("fedrepro.algorithms.fedsc.jobs.mismatch", lambda prefix, spec: None)
    assert differs(scratch["private"], run(tmp_path / "p", run_fedsc, private_spec(), inputs, other))


@pytest.mark.parametrize("state", ["rng", "gen"])
def test_the_check_fails_when_an_rng_state_is_not_restored(scratch, inputs, tmp_path, monkeypatch, state):
    """`rng` draws the participants (numpy), `gen` the augmentations, batches and DP noise (torch)."""
    from fedrepro.algorithms.fedsc.base import FedSSL

    restore = FedSSL.load_state_dict

    def forgetting(self, saved):
        kept = getattr(self, state)
        kept = kept.bit_generator.state if state == "rng" else kept.get_state()
        restore(self, saved)
        if state == "rng":
            self.rng.bit_generator.state = kept
        else:
            self.gen.set_state(kept)

    monkeypatch.setattr(FedSSL, "load_state_dict", forgetting)
    assert differs(scratch["private"], run(tmp_path / "p", run_fedsc, private_spec(), inputs, scratch["short"]))
