"""The authors' code conventions the refcode grid runs (issue 28): their epochs keep the short last
batch (sampling shuffle_keep_last, means over the real batch size, what the accountant composes),
and their Algorithm 3 sorts ages with pandas' quicksort (partition option sort)."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from fedrepro.algorithms.steffle import jobs
from fedrepro.algorithms.steffle.base import BatchSchedule, seed_generator
from fedrepro.algorithms.steffle.baselines import BaselineConfig
from fedrepro.algorithms.steffle.sgda import SGDAConfig, SteffleTrainer
from fedrepro.algorithms.steffle.tran2021 import TranTrainer
from fedrepro.data.partition import age_partition, make_partition, make_tag, parse_tag
from fedrepro.experiments import steffle as plan
from fedrepro.privacy import accountant
from fedrepro.privacy import steffle as accounting
from fedrepro.report import steffle as report
from tests.data.test_partition import reference_prior_silos

from .helpers import pipeline_config, synthetic

KEEP_LAST = "shuffle_keep_last"


def test_keep_last_epoch_is_ceil_of_n_tilde_over_m_batches_with_the_last_short():
    """Hand-checked: n = 30, N = 3, m = 4: n~ = 10, ceil(10/4) = 3 rounds; each silo walks one
    permutation, so every sample is in exactly one batch and the last batch holds the rest."""
    sched = BatchSchedule([10, 11, 9], 4, KEEP_LAST)
    assert sched.rounds_per_epoch == 3
    assert sched.epoch_batch_sizes() == [[4, 4, 2], [4, 4, 3], [4, 4, 1]]
    idx, w = sched.epoch(torch.Generator().manual_seed(0))
    assert w.sum(-1).long().tolist() == sched.epoch_batch_sizes()
    for j, n_j in enumerate([10, 11, 9]):
        assert sorted(idx[j][w[j] > 0].tolist()) == list(range(n_j))
    assert sched.divisor(w[None, :, -1]).tolist() == [[2.0, 3.0, 1.0]]
    # a silo whose batches run out before the epoch does starts a new permutation (their loader's
    # StopIteration branch); a larger silo leaves its tail for the next epoch's reshuffle
    sched = BatchSchedule([12, 3], 4, KEEP_LAST)
    assert sched.rounds_per_epoch == 2 and sched.epoch_batch_sizes() == [[4, 4], [3, 3]]
    idx, w = sched.epoch(torch.Generator().manual_seed(1))
    assert sorted(idx[1, 0][:3].tolist()) == sorted(idx[1, 1][:3].tolist()) == [0, 1, 2]
    # the other samplings keep dividing by m
    assert BatchSchedule([10, 11, 9], 4, "shuffle").divisor(w) == 4.0


def _real_mean_sgd(data, seed, batch, epochs):
    """Plain minibatch SGD (float64, autograd) with the schedule's batches and, per silo, the BCE
    gradient averaged over the batch's REAL size, averaged over silos: the authors' loss step."""
    theta = SteffleTrainer(data, SGDAConfig(batch=batch), [seed], [0.0], [[0.0] * 3], [[0.0] * 3]).theta[0, 0]
    theta = theta.double()
    sched = BatchSchedule(data.silo_sizes, batch, KEEP_LAST)
    gen = seed_generator(seed, "batches")
    for epoch in range(epochs):
        local, weight = sched.epoch(gen)
        for r in range(sched.rounds_per_epoch):
            grads = []
            for j, idx in enumerate(data.silos):
                rows = idx[local[j, r][weight[j, r] > 0]]
                req = theta.clone().requires_grad_(True)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    data.x[rows].double() @ req, data.y[rows].double()
                )
                grads.append(torch.autograd.grad(loss, req)[0])
            theta = theta - 0.25 * 0.8 ** (epoch // 10) * torch.stack(grads).mean(0)
    return theta


def test_keep_last_training_averages_each_batch_over_its_real_size():
    data = synthetic(n=400, silos=3)  # silos of 100: batches 32, 32, 32, 4
    trainer = SteffleTrainer(
        data, SGDAConfig(batch=32, epochs=2, sampling=KEEP_LAST), [3], [0.0], [[0.0] * 3], [[0.0] * 3]
    )
    assert trainer.schedule.epoch_batch_sizes()[0] == [32, 32, 32, 4]
    result = trainer.run()
    expected = _real_mean_sgd(data, 3, 32, 2)
    assert torch.allclose(result.theta[0, 0].double(), expected, atol=1e-5)


@pytest.mark.parametrize("compat", [False, True])
def test_keep_last_protocol_mode_equals_fast_mode(compat):
    """The sensitive division's h_w and (paper mode) h_theta divide by the real size in both modes."""
    data = synthetic(n=400)
    cfg = SGDAConfig(batch=32, epochs=1, sampling=KEEP_LAST, compat_refcode=compat, clip=0.05, eta_w=0.5)
    sig = np.full((2, 3), 0.2)
    fast = SteffleTrainer(data, cfg, [0], [0.5, 2.0], sig, sig).run()
    slow = SteffleTrainer(data, cfg, [0], [0.5, 2.0], sig, sig, protocol=True).run()
    assert torch.allclose(fast.theta, slow.theta, atol=1e-5)
    assert torch.allclose(fast.extra["W"], slow.extra["W"], atol=1e-5)


def test_accountant_composes_every_silo_real_batch_sizes():
    """Each silo's short last batch is its own Gaussian release per epoch (sensitivity over its real
    size b, q = b/n_j), composed with the full batches: recomputed here by hand."""
    data = synthetic(n=400, silos=3)
    cfg = SGDAConfig(batch=32, epochs=5, sampling=KEEP_LAST)
    ctx = jobs.privacy_context(data, cfg)
    assert ctx["rounds"] == 5 * 4
    assert ctx["batch_sizes"] == [[(4, 5), (32, 15)]] * 3
    delta, rho, clip, radius, n_j = 1e-4, 0.3, 1.0, 1.0, 100
    rec = accounting.steffle_noise(
        2, delta, 20, [n_j] * 3, rho, clip, radius, 32, sampling=KEEP_LAST, batch_sizes=ctx["batch_sizes"]
    )
    st, sw = rec["sigma_theta"][0], rec["sigma_w"][0]

    def comp(b, steps):
        z = 1 / math.sqrt((2 * clip / b / st) ** 2 + (2 * math.sqrt(2 / rho) / b / sw) ** 2)
        return accountant.GaussianComposition(z, steps, b / n_j, "")

    expected = accountant.combined_epsilon([comp(4, 5), comp(32, 15)], delta, "pld")
    assert rec["realised_epsilon"] == pytest.approx(expected, rel=1e-6)
    plain = accounting.steffle_noise(2, delta, 20, [n_j] * 3, rho, clip, radius, 32)
    assert rec["realised_epsilon"] > plain["realised_epsilon"]  # the short batch costs more
    assert "short last one" in rec["sampling_note"]
    assert jobs.privacy_context(data, SGDAConfig(batch=32, sampling="shuffle"))["batch_sizes"] is None


def test_trainers_that_divide_by_m_refuse_keep_last():
    data = synthetic(n=200).centralised()
    with pytest.raises(ValueError, match="shuffle_keep_last"):
        TranTrainer(data, BaselineConfig(batch=16, sampling=KEEP_LAST), [0], [1.0], [1.0])


def test_planner_rejects_keep_last_where_a_baseline_inherits_it():
    config = pipeline_config()
    config["steffle"]["train"]["sampling"] = KEEP_LAST
    errors = plan.check(config)
    assert any("steffle.train.sampling" in e and "tran2021" in e for e in errors)


def _authors_blocks(ages, clients):
    """The authors' assign_partitions on rows whose index is not their position (reset_index then maps them
    back), as age blocks."""
    df = pd.DataFrame({"age": ages}, index=np.random.default_rng(5).permutation(len(ages)) + 1000)
    labels = reference_prior_silos(df, clients)
    return [np.flatnonzero(labels == k) for k in range(clients)]


def test_quicksort_age_blocks_are_the_authors_pandas_blocks():
    """h = 1 gives exactly the age blocks: with sort="quicksort" they are the blocks of the authors'
    own pandas code for every tie, while the stable sort puts some tied ages in another block."""
    ages = np.random.default_rng(0).integers(17, 60, 3001)
    theirs = _authors_blocks(ages, 3)
    ours = age_partition(ages, 3, 1.0, sort="quicksort").clients
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs))
    stable = age_partition(ages, 3, 1.0).clients
    assert not all(np.array_equal(a, b) for a, b in zip(stable, theirs))


def test_stable_age_sort_is_unchanged():
    """Hand-checked: ages 30 20 30 20 40 30, two blocks of 3 in stable order: 20 (1), 20 (3), 30 (0) |
    30 (2), 30 (5), 40 (4)."""
    p = age_partition(np.array([30, 20, 30, 20, 40, 30]), 2, 1.0)
    assert [c.tolist() for c in p.clients] == [[0, 1, 3], [2, 4, 5]]
    assert "sort_impl" not in p.meta
    assert make_tag("age", clients=3, h=0.75, seed=100) == "age-c3-h0.75-s100"  # old tags, old files


def test_quicksort_option_is_tagged_recorded_and_checked():
    tag = make_tag("age", clients=3, h=0.75, seed=100, sort="quicksort")
    assert tag == "age-c3-h0.75-quicksort-s100" and parse_tag(tag)[1]["sort"] == "quicksort"
    p = make_partition("age", {"age_train": np.arange(40) % 7}, clients=2, h=0.5, sort="quicksort")
    assert p.meta["sort_impl"].startswith(f"numpy {np.__version__}")
    with pytest.raises(ValueError, match="quicksort"):
        age_partition(np.arange(10), 2, 0.5, sort="heapsort")
    config = pipeline_config()
    config["steffle"]["refcode_grid"]["age_sort"] = "quicksort"
    assert {r.partition.split("-")[3] for r in plan.refcode_runs(config)} == {"quicksort"}
    assert all("quicksort" not in r.partition for r in plan.main_runs(config) if r.partition)


def test_tables_say_which_batching_and_age_sort_ran(tmp_path):
    paths = []
    for k, (sampling, partition) in enumerate(
        [
            (KEEP_LAST, {"tag": "t", "age_sort": "quicksort", "sort_impl": "numpy 9, AVX2"}),
            ("poisson", None),
        ]
    ):
        path = tmp_path / f"{k}.json"
        path.write_text(json.dumps({"spec": {"train": {"sampling": sampling}}, "partition": partition}))
        paths.append(str(path))
    note = report.run_conditions(paths)
    assert "Batches: poisson, shuffle_keep_last" in note and "age sort: quicksort (numpy 9, AVX2)" in note
