"""The shared FedAvg+SC prefixes in the planner (fedrepro.experiments.fedsc.prefixes) and the cost model
(fedrepro.plan): each prefix is charged once, each run only the rounds after the prefix it starts from."""

from pathlib import Path

import pytest

from fedrepro import plan
from fedrepro.experiments import fedsc
from fedrepro.experiments.cost import Counts, Work

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def paper_config():
    return plan.load_config([str(REPO / "config.yaml"), str(REPO / "configs" / "paper.yaml")])


class FixedCounts(Counts):
    """Every training step costs TRAIN, every forward FORWARD."""

    TRAIN, FORWARD = Work(1e9, 300), Work(3e8, 100)

    def __call__(self, step):
        return self.TRAIN if step.mode == "train" else self.FORWARD


def test_paper_scale_prefixes_one_chain_per_setting(paper_config):
    prefixes, starts = fedsc.prefixes(fedsc.runs(paper_config))
    assert {key: (p.rounds, p.start) for key, p in prefixes.items()} == {
        ("svhn", "full_r100"): (100, None),
        ("svhn", "partial_r100"): (100, None),
        ("cifar10", "full_r101"): (101, None),  # t > 100, t % 2 = 0: first share at 102
        ("cifar10", "full_r150"): (150, "full_r101"),  # t > 150
        ("cifar10", "partial_r101"): (101, None),
        ("cifar10", "partial_r150"): (150, "partial_r101"),
        ("cifar100", "full_r101"): (101, None),
        ("cifar100", "partial_r101"): (101, None),
    }
    assert starts[("cifar10", "fedsc", "full_eps6_d0.01")] == "full_r101"
    assert starts[("cifar10", "fedsc", "full_eps3_d0.01")] == "full_r150"
    assert starts[("cifar10", "fedavg_sc", "full")] == "full_r150"  # FedAvg+SC: from the longest
    assert ("svhn", "fedsc", "full_epsinf") not in starts  # shares from round 1
    assert not any(method in ("fedavg_byol", "centralized_sc") for _, method, _ in starts)
    # Figure 2 monitors FedAvg+SC (full) every round, so its prefixes do; the partial ones only at their end
    assert prefixes[("svhn", "full_r100")].spec["knn"]["every"] == 1
    assert prefixes[("svhn", "partial_r100")].spec["knn"]["every"] == 200


def test_the_planner_charges_the_prefix_once_and_each_run_its_own_rounds(paper_config):
    counts, b, n, n_test = FixedCounts(), 512, 73257, 26032  # SVHN, batch 512, 5 local epochs, full participation
    train, knn = counts.TRAIN * (5 * n / b), counts.FORWARD * ((n + n_test) / b)
    dpcalr = counts.FORWARD * (5 * 2 * n / 1024)  # a sharing round: 5 passes x 2 views of every sample, chunks of 1024
    jobs = {(j.key, j.unit): j for j in plan._fedsc_jobs(paper_config, counts)["all runs"]}

    def total(key):
        job = jobs[(key, "round")]
        return job.units, (job.work * job.units).flops

    prefix = total(("svhn", "fedavg_sc", "full_r100", "s0"))
    assert prefix == (100, pytest.approx((train * 100 + knn * 100).flops))  # kNN every round (Figure 2)
    private = total(("svhn", "fedsc", "full_eps3_d0.01", "s0"))  # rounds 101-200 share; kNN at 200 only
    assert private == (100, pytest.approx((train * 100 + dpcalr * 100 + knn).flops))
    fedavg_sc = total(("svhn", "fedavg_sc", "full", "s0"))
    assert fedavg_sc == (100, pytest.approx((train * 100 + knn * 100).flops))
    assert total(("svhn", "fedsc", "full_epsinf", "s0"))[0] == 200  # no prefix
    assert total(("cifar10", "fedavg_sc", "full_r150", "s0"))[0] == 49  # after the 101-round prefix
    assert total(("cifar10", "fedsc", "full_eps3_d0.01", "s0"))[0] == 50
    assert total(("cifar10", "fedsc", "full_eps6_d0.01", "s0"))[0] == 99
    prefix_jobs = [j for j in plan._fedsc_jobs(paper_config, counts)["all runs"] if "_r1" in j.key[2]]
    assert len(prefix_jobs) == 8 * 3  # 8 prefixes x 3 seed jobs, each charged once


def test_a_table_counts_the_prefixes_its_runs_start_from(paper_config):
    counts = FixedCounts()
    per = plan._fedsc_jobs(paper_config, counts)
    table3 = {j.key[:3] for j in per["table3"]}
    assert {("cifar10", "fedavg_sc", "full_r101"), ("cifar10", "fedavg_sc", "full_r150")} <= table3
    assert ("cifar100", "fedavg_sc", "full_r101") not in table3  # Table 3: SVHN and CIFAR10
