"""The authors' code conventions the refcode grid runs (issue 28): their epochs keep the short last
batch (sampling shuffle_keep_last, means over the real batch size, what the accountant composes),
and their Algorithm 3 sorts ages with pandas' quicksort (partition option sort)."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from fedrepro.algorithms.steffle import jobs, refcode_columns
from fedrepro.algorithms.steffle.base import BatchSchedule, RefcodeStream, seed_generator
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
        train = {"sampling": sampling, **({"rng": "refcode", "refcode_hash_seed": 0} if k == 0 else {})}
        path.write_text(json.dumps({"spec": {"train": train}, "partition": partition}))
        paths.append(str(path))
    note = report.run_conditions(paths)
    assert "Batches: poisson, shuffle_keep_last" in note and "age sort: quicksort (numpy 9, AVX2)" in note
    assert "Randomness: refcode with their columns at PYTHONHASHSEED=0, streams" in note


def _authors_draws(seed, silo_sizes, batch, dim, epochs, private, eval_every):
    """What the authors' dp_fermi_federated.py draws after torch.manual_seed(seed), with the same torch
    calls on the global generator: FederatedBatchSampler's DataLoaders (shuffle=True, no drop_last),
    nn.Linear's init, per round and silo the batch and (private) torch.normal for the weight, bias and
    W, and the test loader opened at every evaluation. Batches as positions in the silo's row order."""
    from torch.utils.data import DataLoader, TensorDataset

    out = {"batches": [], "noise": []}
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        loaders = [DataLoader(TensorDataset(torch.arange(n)), batch_size=batch, shuffle=True) for n in silo_sizes]
        iters = [iter(dl) for dl in loaders]
        model = torch.nn.Linear(dim - 1, 1)
        out["init"] = torch.cat([model.weight.detach()[0], model.bias.detach()])
        rounds = math.ceil(sum(silo_sizes) // len(silo_sizes) / batch)
        test = DataLoader(TensorDataset(torch.arange(5)), batch_size=batch, shuffle=False)
        for epoch in range(epochs):
            iters = [iter(dl) for dl in loaders]
            for _ in range(rounds):
                for j in range(len(loaders)):
                    try:
                        (rows,) = next(iters[j])
                    except StopIteration:
                        iters[j] = iter(loaders[j])
                        (rows,) = next(iters[j])
                    out["batches"].append(rows)
                    if private:
                        w, b = torch.normal(0, 1.0, size=(1, dim - 1)), torch.normal(0, 1.0, size=(1,))
                        out["noise"].append((torch.cat([w[0], b]), torch.normal(0, 1.0, size=(1, 1)).reshape(())))
            if (epoch + 1) % eval_every == 0:
                iter(test)
    return out


@pytest.mark.parametrize("private", [False, True])
def test_refcode_rng_draws_the_authors_init_batches_and_noise(private):
    """rng = refcode: seed s gives the init, every batch and every noise draw of the authors' run with
    torch.manual_seed(s), checked against their torch calls over 3 epochs (an evaluation in between,
    a silo that runs out of batches mid-epoch, silos whose indices are not sorted)."""
    data = synthetic(n=160, silos=3)  # 120 training rows
    all_idx = torch.randperm(120, generator=torch.Generator().manual_seed(5))
    data.silos = [all_idx[:55], all_idx[55:75], all_idx[75:120]]  # 55, 20, 45: n~ = 40, 3 rounds of 16
    sigma = [[0.3] * 3] if private else [[0.0] * 3]
    cfg = SGDAConfig(batch=16, epochs=3, eval_every=2, sampling=KEEP_LAST, compat_refcode=True, rng="refcode")
    trainer = SteffleTrainer(data, cfg, [7], [1.0], sigma, sigma)
    seen = []
    trainer.step = lambda t, local, weight, noise: seen.append((local, weight, noise))
    for t in range(cfg.epochs):
        trainer.round(t + 1)
    ref = _authors_draws(7, data.silo_sizes, 16, data.x.shape[1], cfg.epochs, private, cfg.eval_every)
    assert torch.equal(trainer.theta[0, 0], ref["init"])
    k = 0
    for local, weight, noise in seen:
        for j, idx in enumerate(data.silos):
            rows = local[0, j][weight[0, j] > 0]
            assert idx[rows].tolist() == idx.sort().values[ref["batches"][k]].tolist()  # their rows: training order
            if private:
                assert torch.equal(noise["u"][0, j], ref["noise"][k][0])
                assert noise["V"][0, j, 0, 0, 1] == ref["noise"][k][1]
                assert noise["V"][0, j].abs().sum() == noise["V"][0, j, 0, 0, 1].abs()  # only their 1 x 1 W
            else:
                assert not noise["u"].any()
            k += 1
    assert k == len(ref["batches"]) == 3 * 3 * 3


def test_refcode_rng_splits_private_and_non_private_cells_and_keeps_the_job_order():
    """Their stream draws noise only on private runs, so a job mixing eps = inf with finite eps trains
    the two kinds apart (SettingsConcat) and returns each cell as a job of that cell alone."""
    data = synthetic(n=400, silos=3)
    spec = {
        "method": "steffle",
        "fairness": "dp",
        "num_silos": 3,
        "h": 0.0,
        "epsilons": ["inf", 1],
        "lambdas": [0.0, 1.0],
        "train": {
            "batch": 32,
            "epochs": 2,
            "eval_every": 1,
            "sampling": KEEP_LAST,
            "compat_refcode": True,
            "rng": "refcode",
            "clip": 1.0,
            "radius": 1.0,
            "w_step": "fixed",
        },
    }
    trainer, _, settings = jobs.build(spec, data, [0, 1])
    assert settings == [("inf", 0.0), ("inf", 1.0), (1, 0.0), (1, 1.0)]
    assert [idx for idx, _ in trainer.parts] == [[2, 3], [0, 1]]
    joined = trainer.run(None)
    for g, setting in enumerate(settings):
        alone, _, _ = jobs.build(spec, data, [0, 1], only=[setting])
        result = alone.run(None)
        assert np.array_equal(joined.final["error"][:, g], result.final["error"][:, 0])
        # a grid's einsums differ from one cell's in the last float bits
        assert torch.allclose(joined.theta[:, g], result.theta[:, 0], atol=1e-6)
        assert torch.allclose(joined.extra["W"][:, g], result.extra["W"][:, 0], atol=1e-9)
    with pytest.raises(ValueError, match="shuffle_keep_last"):
        SGDAConfig(rng="refcode")
    with pytest.raises(ValueError, match="rng must be one of"):
        SGDAConfig(rng="global")


# The authors' column order as their own dataloader_fed.GeneralData produced it in a run of their code
# with PYTHONHASHSEED=0 (Python 3.11; non_sens_attr, read from the GeneralData object after __init__)
AUTHORS_COLUMNS_HASH0 = [
    "native-country_Poland",
    "native-country_South",
    "education_Preschool",
    "native-country_El-Salvador",
    "education_Prof-school",
    "workclass_Federal-gov",
    "relationship_Wife",
    "education_10th",
    "marital-status_Married-AF-spouse",
    "native-country_Japan",
    "workclass_Local-gov",
    "native-country_Cuba",
    "relationship_Not-in-family",
    "native-country_Italy",
    "native-country_Mexico",
    "native-country_Taiwan",
    "native-country_Haiti",
    "marital-status_Divorced",
    "occupation_Other-service",
    "occupation_Machine-op-inspct",
    "marital-status_Married-spouse-absent",
    "native-country_Outlying-US(Guam-USVI-etc)",
    "marital-status_Widowed",
    "native-country_Hungary",
    "marital-status_Never-married",
    "education_5th-6th",
    "marital-status_Separated",
    "native-country_Thailand",
    "occupation_Handlers-cleaners",
    "native-country_Cambodia",
    "relationship_Other-relative",
    "occupation_Protective-serv",
    "education_Doctorate",
    "occupation_Priv-house-serv",
    "native-country_Philippines",
    "native-country_Hong",
    "race_Black",
    "native-country_Nicaragua",
    "capital-loss",
    "native-country_United-States",
    "education_9th",
    "native-country_Holand-Netherlands",
    "native-country_Peru",
    "native-country_Canada",
    "native-country_Iran",
    "education_Bachelors",
    "native-country_Greece",
    "workclass_Self-emp-not-inc",
    "native-country_China",
    "race_Other",
    "native-country_Vietnam",
    "education-num",
    "relationship_Husband",
    "native-country_India",
    "native-country_Ireland",
    "native-country_Guatemala",
    "native-country_Trinadad&Tobago",
    "native-country_Dominican-Republic",
    "occupation_Adm-clerical",
    "relationship_Unmarried",
    "occupation_Armed-Forces",
    "occupation_Farming-fishing",
    "education_Masters",
    "education_HS-grad",
    "workclass_Without-pay",
    "relationship_Own-child",
    "native-country_Jamaica",
    "education_7th-8th",
    "occupation_Tech-support",
    "native-country_Columbia",
    "occupation_Transport-moving",
    "native-country_Honduras",
    "native-country_Laos",
    "native-country_Scotland",
    "native-country_France",
    "occupation_Sales",
    "workclass_Self-emp-inc",
    "hours-per-week",
    "education_Assoc-acdm",
    "occupation_Exec-managerial",
    "occupation_Prof-specialty",
    "capital-gain",
    "occupation_Craft-repair",
    "native-country_Portugal",
    "native-country_England",
    "native-country_Yugoslavia",
    "native-country_Puerto-Rico",
    "education_1st-4th",
    "race_Amer-Indian-Eskimo",
    "race_Asian-Pac-Islander",
    "race_White",
    "education_Some-college",
    "workclass_State-gov",
    "education_Assoc-voc",
    "native-country_Ecuador",
    "workclass_Private",
    "fnlwgt",
    "education_12th",
    "age",
    "education_11th",
    "marital-status_Married-civ-spouse",
    "native-country_Germany",
]
ADULT_FEATURES = [
    "age",
    "fnlwgt",
    "education-num",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "workclass_Federal-gov",
    "workclass_Local-gov",
    "workclass_Private",
    "workclass_Self-emp-inc",
    "workclass_Self-emp-not-inc",
    "workclass_State-gov",
    "workclass_Without-pay",
    "education_10th",
    "education_11th",
    "education_12th",
    "education_1st-4th",
    "education_5th-6th",
    "education_7th-8th",
    "education_9th",
    "education_Assoc-acdm",
    "education_Assoc-voc",
    "education_Bachelors",
    "education_Doctorate",
    "education_HS-grad",
    "education_Masters",
    "education_Preschool",
    "education_Prof-school",
    "education_Some-college",
    "marital-status_Divorced",
    "marital-status_Married-AF-spouse",
    "marital-status_Married-civ-spouse",
    "marital-status_Married-spouse-absent",
    "marital-status_Never-married",
    "marital-status_Separated",
    "marital-status_Widowed",
    "occupation_Adm-clerical",
    "occupation_Armed-Forces",
    "occupation_Craft-repair",
    "occupation_Exec-managerial",
    "occupation_Farming-fishing",
    "occupation_Handlers-cleaners",
    "occupation_Machine-op-inspct",
    "occupation_Other-service",
    "occupation_Priv-house-serv",
    "occupation_Prof-specialty",
    "occupation_Protective-serv",
    "occupation_Sales",
    "occupation_Tech-support",
    "occupation_Transport-moving",
    "relationship_Husband",
    "relationship_Not-in-family",
    "relationship_Other-relative",
    "relationship_Own-child",
    "relationship_Unmarried",
    "relationship_Wife",
    "race_Amer-Indian-Eskimo",
    "race_Asian-Pac-Islander",
    "race_Black",
    "race_Other",
    "race_White",
    "native-country_Cambodia",
    "native-country_Canada",
    "native-country_China",
    "native-country_Columbia",
    "native-country_Cuba",
    "native-country_Dominican-Republic",
    "native-country_Ecuador",
    "native-country_El-Salvador",
    "native-country_England",
    "native-country_France",
    "native-country_Germany",
    "native-country_Greece",
    "native-country_Guatemala",
    "native-country_Haiti",
    "native-country_Holand-Netherlands",
    "native-country_Honduras",
    "native-country_Hong",
    "native-country_Hungary",
    "native-country_India",
    "native-country_Iran",
    "native-country_Ireland",
    "native-country_Italy",
    "native-country_Jamaica",
    "native-country_Japan",
    "native-country_Laos",
    "native-country_Mexico",
    "native-country_Nicaragua",
    "native-country_Outlying-US(Guam-USVI-etc)",
    "native-country_Peru",
    "native-country_Philippines",
    "native-country_Poland",
    "native-country_Portugal",
    "native-country_Puerto-Rico",
    "native-country_Scotland",
    "native-country_South",
    "native-country_Taiwan",
    "native-country_Thailand",
    "native-country_Trinadad&Tobago",
    "native-country_United-States",
    "native-country_Vietnam",
    "native-country_Yugoslavia",
]  # the prepared Adult feature names (meta.json), x's column order


def test_authors_column_order_is_their_python_set_order_under_the_hash_seed():
    """Their weight i multiplies their column i; that order is a Python set's, fixed by PYTHONHASHSEED.
    Our replay of their set operations gives the order their own code gave under hash seed 0, and
    another seed gives another order (so a run with an unknown seed puts the init on other features)."""
    assert refcode_columns.authors_column_order(ADULT_FEATURES, 0) == AUTHORS_COLUMNS_HASH0
    other = refcode_columns.authors_column_order(ADULT_FEATURES, 1)
    assert sorted(other) == sorted(ADULT_FEATURES) and other != AUTHORS_COLUMNS_HASH0
    perm = refcode_columns.column_permutation(ADULT_FEATURES, 0)
    assert [ADULT_FEATURES[i] for i in perm] == AUTHORS_COLUMNS_HASH0
    assert refcode_columns.column_permutation(ADULT_FEATURES, None) is None
    with pytest.raises(ValueError, match="not one of the authors' Adult columns"):
        refcode_columns.authors_column_order(ADULT_FEATURES + ["colour_red"], 0)


def test_refcode_columns_put_each_init_value_and_noise_draw_on_their_feature():
    """With columns, their weight i (init and noise) lands on our feature columns[i]; the bias stays last."""
    silos = [torch.arange(10), torch.arange(10, 20)]
    plain, moved = RefcodeStream(4, silos, 4), RefcodeStream(4, silos, 4, columns=[2, 0, 1])
    init, init_moved = plain.init_theta(4), moved.init_theta(4)
    assert torch.equal(init_moved[[2, 0, 1]], init[:3]) and init_moved[3] == init[3]
    for stream in (plain, moved):
        stream.next_batch(0)
    (u, v), (u_moved, v_moved) = plain.silo_noise(4), moved.silo_noise(4)
    assert torch.equal(u_moved[[2, 0, 1]], u[:3]) and u_moved[3] == u[3] and v == v_moved
    with pytest.raises(ValueError, match="needs rng 'refcode'"):
        SGDAConfig(sampling=KEEP_LAST, refcode_hash_seed=0)


def test_authors_rows_beside_a_run_are_those_at_its_hash_seed_where_the_cell_has_them():
    """A cell the authors ran at our refcode_hash_seed is compared with those runs only (seed for seed the
    same run); a cell they ran only at a random hash seed keeps those runs; the table says which."""
    rows = [
        (0.75, "inf", 1.0, seed, err, 0.005, tag)
        for tag, errors in (("random", (0.30, 0.31, 0.32)), ("0", (0.2260, 0.2261, 0.2262)))
        for seed, err in enumerate(errors)
    ] + [(0.0, "inf", 1.0, seed, 0.21, 0.01, "random") for seed in range(3)]
    authors = pd.DataFrame(rows, columns=["h", "eps", "lam", "seed", "error", "dp_violation", "pythonhashseed"])
    chosen = report.authors_at_hash_seed(authors, 0)
    assert sorted(chosen.loc[chosen["h"] == 0.75, "error"]) == [0.2260, 0.2261, 0.2262]
    assert len(chosen[chosen["h"] == 0.0]) == 3
    assert sorted(report.authors_at_hash_seed(authors, None).loc[lambda t: t["h"] == 0.75, "error"]) == [
        0.30,
        0.31,
        0.32,
    ]
    ours = pd.DataFrame(
        {
            "h": [0.0, 0.75],
            "eps_label": ["inf", "inf"],
            "lam": [1.0, 1.0],
            "error_mean": [0.21, 0.2261],
            "dp_violation_mean": [0.01, 0.005],
        }
    )
    table = report.beside_authors(ours, chosen, "dp")
    assert table["error_within_authors"].tolist() == [True, True]
    assert table["authors_pythonhashseed"].tolist() == ["random", "0"]


@pytest.mark.parametrize("kill_part", [0, 1])
def test_refcode_rng_split_job_killed_in_either_part_resumes_exactly(tmp_path, kill_part):
    """rng refcode: each part of a split job checkpoints its own stream (one file per part), so a job
    killed in either part ends with the uninterrupted job's numbers, bit for bit."""
    from fedrepro.fl.loop import Checkpoint
    from tests.foundation.conftest import Killed, killed_at

    data = synthetic(n=400, silos=3)
    train = {"batch": 32, "epochs": 3, "eval_every": 1, "sampling": KEEP_LAST, "compat_refcode": True}
    train.update(rng="refcode", clip=1.0, radius=1.0, w_step="fixed")
    spec = {"method": "steffle", "fairness": "dp", "num_silos": 3, "h": 0.0, "epsilons": ["inf", 1]}
    spec.update(lambdas=[1.0], train=train)
    full = jobs.build(spec, data, [0, 1])[0].run(None)
    ckpt = Checkpoint(tmp_path / "state.pt", every=1, minutes=None)
    job = jobs.build(spec, data, [0, 1])[0]
    killed_at(job.parts[kill_part][1], 2)
    with pytest.raises(Killed):
        job.run(ckpt)
    resumed = jobs.build(spec, data, [0, 1])[0].run(Checkpoint(ckpt.path, every=1, minutes=None))
    assert torch.equal(full.theta, resumed.theta) and torch.equal(full.extra["W"], resumed.extra["W"])
    assert all(np.array_equal(full.final[k], resumed.final[k]) for k in full.final)
