"""Table IX's |P| = 1000 cells read from the alpha = 1 runs of 7,000 iterations (issue 30;
fedrepro.algorithms.fedal.budget): a shorter run started from the longer run's state one round before its
end gives the same summary (final accuracies, health, the discriminator's last loss) and the same training
metrics, bit for bit, as the shorter run from round 1, and keeping that state changes no number of the
longer run. Another seed's state does not load; a state kept after another round is refused."""

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedrepro.algorithms import methods
from fedrepro.algorithms.fedal import budget
from fedrepro.pipeline import make_job
from tests.fedal.test_pipeline import _spec, digits_setting  # noqa: F401  (fixture: prepared digits and a partition)

torch.set_num_threads(1)
SHORT, LONG = 10, 20  # iterations; tau 5 (FedAL) and 1 (FedMD): 2 and 4 rounds, 10 and 20 rounds


@pytest.fixture(scope="module")
def inputs(digits_setting):  # noqa: F811
    root, part = digits_setting
    return {"data": str(root / "data/digits/arrays.npz"), "partition": str(part)}


def run(folder: Path, entry, spec: dict, inputs: dict, seeds=(0, 1)) -> dict:
    out = {"metrics": str(folder / "metrics.parquet"), "summary": str(folder / "summary.json")}
    job = make_job(spec, out, inputs, seeds=list(seeds))
    entry(job)
    return {"metrics": pd.read_parquet(out["metrics"]), "summary": json.loads(Path(out["summary"]).read_text())}


def specs(method: str) -> tuple[dict, dict]:
    entry = methods("fedal")[method]
    short = {**_spec(method, iterations=SHORT, evals=5), "entry": entry}  # FedMD: longer run evaluates at 4, 8
    return short, {**short, "iterations": LONG, budget.READ_AT: [SHORT]}


@pytest.fixture(scope="module", params=["fedal", "fedmd"])
def runs(request, tmp_path_factory, inputs):
    method = request.param
    tmp = tmp_path_factory.mktemp(method)
    short, long = specs(method)
    entry = budget.resolve(short["entry"])
    return {
        "method": method,
        "tmp": tmp,
        "short": run(tmp / "short", entry, short, inputs),
        "long_plain": run(tmp / "long_plain", entry, {k: v for k, v in long.items() if k != budget.READ_AT}, inputs),
        "long": run(tmp / "long", budget.run_keeping, long, inputs),
    }


def read(runs: dict, inputs: dict, name: str) -> dict:
    short, _ = specs(runs["method"])
    longer = {"longer": str(runs["tmp"] / "long" / "summary.json")}
    return run(runs["tmp"] / name, budget.run_read_at, short, {**inputs, **longer})


def same(a: dict, b: dict) -> bool:
    """The summaries and every training metric equal; the evaluated columns equal where both evaluated."""
    if a["summary"]["seeds"] != b["summary"]["seeds"]:
        return False
    ma, mb = a["metrics"], b["metrics"]
    for column in ma.columns:
        both = ma[column].notna() & mb[column].notna()
        if not (ma.loc[both, column].to_numpy() == mb.loc[both, column].to_numpy()).all():  # int or float
            return False
    return True


def test_keeping_states_changes_no_number_of_the_longer_run(runs):
    pd.testing.assert_frame_equal(runs["long"]["metrics"], runs["long_plain"]["metrics"], check_exact=True)
    assert runs["long"]["summary"]["seeds"] == runs["long_plain"]["summary"]["seeds"]


def test_the_shorter_run_read_from_the_longer_is_the_run_from_round_1(runs, inputs):
    resumed = read(runs, inputs, "read")
    assert same(resumed, runs["short"])
    last = resumed["metrics"].groupby("seed").tail(1)
    assert last["acc"].notna().all() and (last["iteration"] == SHORT).all()  # evaluated at its own end
    assert resumed["summary"]["seeds"]["0"]["final"]["acc"] == runs["short"]["summary"]["seeds"]["0"]["final"]["acc"]


def test_the_check_fails_with_another_seeds_state(runs, inputs):
    """Seeds 0 and 1 draw other architectures for their clients: the state does not even load."""
    path = runs["tmp"] / "long" / budget.STATES
    original = torch.load(path, weights_only=False)
    torch.save({b: {0: s[1], 1: s[0]} for b, s in original.items()}, path)
    try:
        try:
            swapped = read(runs, inputs, "swapped")
        except RuntimeError as error:  # load_state_dict: the architectures differ
            assert "state_dict" in str(error)
        else:
            assert not same(swapped, runs["short"])
    finally:
        torch.save(original, path)


def test_a_state_kept_after_another_round_is_refused(runs, inputs):
    path = runs["tmp"] / "long" / budget.STATES
    original = torch.load(path, weights_only=False)
    later = {
        b: {seed: {**state, "rounds_done": state["rounds_done"] + 1} for seed, state in s.items()}
        for b, s in original.items()
    }
    torch.save(later, path)
    try:
        with pytest.raises(ValueError, match="was kept after round"):
            read(runs, inputs, "later")
    finally:
        torch.save(original, path)


def test_paper_scale_reads_table_9s_1000_cells_from_the_7000_iteration_runs():
    from fedrepro import plan
    from fedrepro.experiments import fedal

    repo = Path(__file__).resolve().parents[2]
    config = plan.load_config([str(repo / "config.yaml"), str(repo / "configs" / "paper.yaml")])
    runs = {r.key: r for r in fedal.runs(config)}
    read = {k: r for k, r in runs.items() if "read_from" in r.spec}
    assert set(read) == {("svhn", m, "svhn_wrn-a1-c20-p1000-i5000") for m in ("fedmd", "fedal")}
    for run in read.values():
        longer = runs[(run.dataset, run.method, run.spec["read_from"])]
        assert longer.setting == "svhn_wrn-a1-c20-p1000-i7000" and longer.partition == run.partition
        assert longer.spec[budget.READ_AT] == [5000]
        differ = {k for k in run.spec.keys() | longer.spec.keys() if run.spec.get(k) != longer.spec.get(k)}
        assert differ == {"iterations", "read_at", "read_from"}  # the same run but for its budget
        assert fedal.job_entry(run) == "fedrepro.algorithms.fedal.budget:run_read_at"
        assert fedal.longer_input("R", run, "s0") == [
            f"R/fedal/runs/svhn/{run.method}/{longer.setting}/s0/summary.json"
        ]
    jobs = {j.key: j for j in plan.plan(config)["fedal"]["all runs"]}
    assert jobs[("svhn", "fedal", "svhn_wrn-a1-c20-p1000-i5000", "s0")].units == 5  # its last round: tau = 5
    assert jobs[("svhn", "fedmd", "svhn_wrn-a1-c20-p1000-i5000", "s0")].units == 1  # tau = 1
    assert jobs[("svhn", "fedal", "svhn_wrn-a1-c20-p1000-i7000", "s0")].units == 7000
    quick = plan.load_config([str(repo / "config.yaml")])  # one budget (30 iterations): nothing read
    assert not any("entry" in r.spec for r in fedal.runs(quick))


def test_table_9_says_which_cells_were_read_from_a_longer_run(tmp_path):
    from fedrepro.report.fedal import read_notes

    paths = []
    for method, spec in (("fedal", {"read_from": "svhn_wrn-a1-c20-p1000-i7000"}), ("fedmd", {})):
        paths.append(tmp_path / f"{method}.json")
        paths[-1].write_text(json.dumps({"spec": {"method": method, **spec}, "seeds": {}}))
    (note,) = read_notes([str(p) for p in paths])
    assert note.startswith("FedAL at 1000 public samples: the first iterations of the 7000-iteration runs")
