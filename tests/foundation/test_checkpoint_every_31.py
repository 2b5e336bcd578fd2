"""`checkpoint_every` changes no number, so it is in no job's spec (changing it re-runs no job and keeps every
finished seed); it reaches the job's process as an environment variable and fedrepro.fl.loop.Checkpoint
reads it there (issue 31)."""

import copy
import json
from pathlib import Path

import pytest
import torch
import yaml

from fedrepro.experiments import dpzv, fedal, fedavg, fedsc, steffle
from fedrepro.fl.loop import Checkpoint, parse_every
from fedrepro.fl.runner import run_seeds
from fedrepro.options import EVERY_ENV
from fedrepro.pipeline import hand_over_process_settings, make_job

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())


def planned_specs(config: dict) -> list[dict]:
    """Every training spec the planners give the rules (steffle.runs includes its refcode and eta_w runs)."""
    runs = [*fedavg.runs(config), *fedsc.runs(config), *dpzv.runs(config), *fedal.runs(config), *steffle.runs(config)]
    runs += [run for group in dpzv.figure_runs(config, dpzv.runs(config)).values() for run in group]
    return [run.spec for run in runs] + [fedsc.probe_spec(config, run) for run in fedsc.runs(config)]


def test_no_planned_spec_holds_checkpoint_every_and_changing_it_changes_no_spec():
    specs = planned_specs(CONFIG)
    assert len(specs) > 100
    assert not [spec for spec in specs if "checkpoint_every" in json.dumps(spec)]
    changed = copy.deepcopy(CONFIG)
    changed["checkpoint_every"] = 2
    assert planned_specs(changed) == specs


class Counter:
    """A federated algorithm without a model (its state: the rounds run)."""

    def __init__(self):
        self.rounds = []

    def round(self, t):
        self.rounds.append(t)
        return {"loss": 1.0 / t}

    def evaluate(self, t):
        return {"acc": float(torch.tensor(t / 10))}

    def state_dict(self):
        return {"rounds": list(self.rounds)}

    def load_state_dict(self, state):
        self.rounds = list(state["rounds"])


@pytest.fixture
def saved_rounds(monkeypatch):
    monkeypatch.delenv(EVERY_ENV, raising=False)  # restored after the test, whatever hand_over sets
    saved = []
    original = Checkpoint.save
    monkeypatch.setattr(Checkpoint, "save", lambda self, *a: saved.append(a[1]) or original(self, *a))
    return saved


def test_the_config_value_reaches_the_loop_of_a_job_process(tmp_path, saved_rounds):
    """What run_snakemake_job does in the job's process (hand_over_process_settings), then a job's
    run_seeds with no checkpoint argument: checkpoints after rounds 2, 4 and the last."""
    hand_over_process_settings({"checkpoint_every": 2, "checkpoint_minutes": None})
    job = make_job(
        {"method": "counter"},
        {"metrics": str(tmp_path / "run/metrics.parquet"), "summary": str(tmp_path / "run/summary.json")},
        seeds=[0],
    )
    run_seeds(job, lambda seed: Counter(), num_rounds=5)
    assert saved_rounds == [2, 4, 5]
    assert Checkpoint(tmp_path / "x.pt").every == 2  # SteFFLe's job builds its Checkpoint directly


def test_without_the_setting_every_round_is_saved(tmp_path, saved_rounds):
    assert Checkpoint(tmp_path / "x.pt").every == 1
    assert Checkpoint(tmp_path / "x.pt", every=3).every == 3  # an explicit value still wins (unit tests)


@pytest.mark.parametrize("value", ["0", "-1", "two", True, "1.5"])
def test_a_bad_value_is_an_error(value):
    with pytest.raises(ValueError, match="checkpoint_every"):
        parse_every(value)
