"""Work not done twice (issue 30), each shown to leave the numbers as they were."""

import pytest
import torch

from fedrepro.fl.loop import run_rounds
from tests.fedsc.helpers import method_classes, tiny_spec

torch.set_num_threads(1)


@pytest.mark.parametrize("method", ["fedsc", "fedavg_byol", "fedca"])
def test_the_knn_monitor_only_at_the_last_round_trains_the_same_model(method, tiny_digits):
    """Runs Figure 2 does not draw evaluate the kNN monitor at their last round only
    (fedrepro.experiments.fedsc._knn_where_read): every round's loss, the final weights and the
    final kNN accuracy equal those of the run that monitors every round, bit for bit."""

    def train(eval_every):
        torch.manual_seed(0)
        spec = tiny_spec(rounds=3)
        if method == "fedsc":
            spec["sharing"] = {"after": 0.0, "every": 1}
        algo = method_classes()[method](spec, tiny_digits, seed=0)
        return algo, run_rounds(algo, 3, eval_every=eval_every)

    every, rows_every = train(1)
    last, rows_last = train(3)
    assert rows_every["loss"].tolist() == rows_last["loss"].tolist()
    assert rows_every["knn_acc"].iloc[-1] == rows_last["knn_acc"].iloc[-1]
    assert rows_last["knn_acc"].isna().sum() == 2  # rounds 1 and 2 skipped the monitor
    for k, v in every.net.state_dict().items():
        assert torch.equal(v, last.net.state_dict()[k]), k


def test_only_figure_2_runs_monitor_every_round():
    from pathlib import Path

    from fedrepro.experiments import fedsc
    from fedrepro.plan import load_config

    repo = Path(__file__).resolve().parents[2]
    config = load_config([str(repo / "config.yaml"), str(repo / "configs" / "paper.yaml")])
    monitored = {(r.dataset, r.method, r.setting) for r in fedsc.runs(config) if r.spec["knn"]["every"] == 1}
    assert monitored == {
        (d, m, s) for d in ("svhn", "cifar10", "cifar100") for m, s in (("fedsc", "full_epsinf"), ("fedavg_sc", "full"))
    }
    assert all(r.spec["knn"]["every"] == r.spec["rounds"] for r in fedsc.runs(config) if r.key not in monitored)
