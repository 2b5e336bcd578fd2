"""Every method runs, is seeded, and sends only what its paper says over the Wire."""

import math

import pytest
import torch

from fedrepro.algorithms.fedsc.fedsc import FedSC, noise_sigma, planned_shares, shares_at
from tests.fedsc.helpers import method_classes, tiny_spec

torch.set_num_threads(1)

CLASSES = method_classes()
SERVER_RECEIVES = {
    "fedsc": {"weights", "corr_matrix"},
    "fedavg_sc": {"weights"},
    "fedavg_byol": {"weights"},
    "fedu": {"weights"},
    "fedema": {"weights"},
    "fedx": {"weights"},
    "fedca": {"weights", "dictionary"},
}


def _spec(method, **over):
    spec = tiny_spec(**over)
    if method == "fedsc":
        spec["sharing"] = {"after": 0.0, "every": 1}
    return spec


def _run(algo, rounds):
    rows = [algo.round(t) for t in range(1, rounds + 1)]
    return rows, algo.evaluate(rounds)


@pytest.mark.parametrize("method", sorted(CLASSES))
def test_method_runs_and_server_sees_only_its_messages(method, tiny_digits):
    torch.manual_seed(0)
    algo = CLASSES[method](_spec(method, rounds=2), tiny_digits, seed=0)
    rows, ev = _run(algo, 2)
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert 0.0 <= ev["knn_acc"] <= 1.0
    assert algo.wire.kinds("server") == SERVER_RECEIVES[method]
    senders = {m.sender for m in algo.wire.messages if m.receiver == "server"}
    assert senders <= {f"client{j}" for j in range(5)}


def test_fedsc_same_seed_same_numbers_and_resume(tiny_digits):
    def build():
        torch.manual_seed(0)
        return FedSC(_spec("fedsc", rounds=3), tiny_digits, seed=3)

    a = build()
    rows_a, ev_a = _run(a, 3)
    b = build()
    b.round(1)
    state = b.state_dict()
    torch_state = torch.get_rng_state()
    c = build()
    c.load_state_dict(state)
    torch.set_rng_state(torch_state)
    rows_c = [c.round(t) for t in (2, 3)]
    assert [r["loss"] for r in rows_a[1:]] == [r["loss"] for r in rows_c]
    assert c.evaluate(3) == ev_a
    for k, v in a.net.state_dict().items():
        assert torch.equal(v, c.net.state_dict()[k])


def test_fedsc_partial_participation_keeps_stale_matrices_and_first_round_collects_all(tiny_digits):
    algo = FedSC(_spec("fedsc", rounds=4, participation=2), tiny_digits, seed=1)
    algo.round(1)
    assert algo.shares == [1] * 5  # Algorithm 1, t = 1: every client uploads
    first = {j: m.clone() for j, m in algo.server.latest.items()}
    algo.round(2)
    assert sum(algo.shares) == 7  # then only the 2 participants
    changed = [j for j in range(5) if not torch.equal(first[j], algo.server.latest[j])]
    assert len(changed) == 2
    assert torch.allclose(algo.server.aggregate, algo.server.direct_sum(), atol=1e-10)
    uploads = [m for m in algo.wire.messages if m.kind == "corr_matrix"]
    assert [m.round for m in uploads].count(2) == 2


def test_fedsc_alpha_one_equals_fedavg_sc(tiny_digits):
    """alpha = 1 makes the received matrices irrelevant: a FedSC client update equals FedAvg+SC's (Eq. 80 at alpha = 1)."""
    torch.manual_seed(0)
    fedsc = FedSC(_spec("fedsc", rounds=2, alpha={"start": 1.0, "end": 1.0}), tiny_digits, seed=0)
    fedsc.round(1)
    assert fedsc.received  # matrices were shared and are used below
    fedavg = FedSC(_spec("fedavg_sc", rounds=2), tiny_digits, seed=0)
    weights = fedsc.global_state()
    g0 = fedsc.gen.get_state()
    fedavg.gen.set_state(g0)
    state_sc, loss_sc = fedsc.client_update(1, weights, 2, 0.03)
    state_sc = {k: v.clone() for k, v in state_sc.items()}
    state_avg, loss_avg = fedavg.client_update(1, weights, 2, 0.03)
    assert loss_sc == pytest.approx(loss_avg)
    for k in state_sc:
        assert torch.allclose(state_sc[k], state_avg[k], atol=1e-6)
    # with alpha < 1 the inter-client term changes the update
    fedsc.alpha_end = 0.2
    fedsc.gen.set_state(g0)
    other, _ = fedsc.client_update(1, weights, 2, 0.03)
    assert any(not torch.allclose(other[k], state_avg[k], atol=1e-6) for k in state_avg)


def test_single_client_fedsc_is_centralized_sc(tiny_digits):
    """J = 1: one client holding everything, FedAvg over one model = plain SC training (Eq. 4 with q_1 = 1)."""
    from dataclasses import replace

    from fedrepro.algorithms.fedsc.base import local_sgd
    from fedrepro.algorithms.fedsc.loss import local_loss
    from fedrepro.privacy.mechanisms import normclip

    one = replace(tiny_digits, clients=[torch.arange(tiny_digits.x_train.shape[0])])
    torch.manual_seed(0)
    fed = FedSC(_spec("fedavg_sc", rounds=2), one, seed=0)
    torch.manual_seed(0)
    ref = FedSC(_spec("fedavg_sc", rounds=2), one, seed=0)  # same init and generator
    for t in (1, 2):
        fed.round(t)
        local_sgd(
            ref.net,
            one.x_train,
            lambda b: local_loss(normclip(ref.views(ref.net, b), 2.0), scale=2.0),
            ref.train_cfg,
            ref.train_cfg.lr_at(t),
            ref.gen,
        )
    for k, v in fed.net.state_dict().items():
        assert torch.allclose(v, ref.net.state_dict()[k], atol=1e-6)
    with pytest.raises(ValueError, match="at least two clients"):
        FedSC(_spec("fedsc"), one, seed=0)


def test_sharing_schedules_of_table6():
    assert planned_shares(200, {"after": 0.5, "every": 1}) == 100  # t > 100
    assert planned_shares(200, {"after": 0.75, "every": 1}) == 50  # t > 150
    assert planned_shares(200, {"after": 0.5, "every": 2}) == 50  # t > 100, t % 2 = 0
    assert not shares_at(100, 200, {"after": 0.5, "every": 1}) and shares_at(101, 200, {"after": 0.5, "every": 1})
    assert planned_shares(200, None) == 0
    for bad in ({"after": 0.5, "every": 0}, {"after": 1.0, "every": 1}, {"after": -0.1, "every": 1}):
        with pytest.raises(ValueError, match="every >= 1"):
            shares_at(1, 200, bad)


def test_noise_sigma_calibration_and_partial_scaling():
    from fedrepro.privacy import fedsc as priv

    spec = {
        "rounds": 200,
        "mu": 4.0,
        "sharing": {"after": 0.5, "every": 2},
        "privacy": {"eps": 6, "delta": 1e-2, "sigma": None},
    }
    sigma = noise_sigma(spec, [5000] * 10, 10)
    assert priv.epsilon(50, 4.0, sigma, 5000, 1e-2) == pytest.approx(6.0)
    assert sigma == pytest.approx(0.0052, rel=0.03)  # Table 6, CIFAR10 (6, 1e-2)
    spec["privacy"]["sigma"] = 0.0052
    assert noise_sigma(spec, [5000] * 10, 2) == pytest.approx(0.0052 * 0.2)  # the code's sigma * p
    spec["privacy"]["partial_scaling"] = "sqrt_p"
    assert noise_sigma(spec, [5000] * 10, 2) == pytest.approx(0.0052 * math.sqrt(0.2))
    assert noise_sigma({"privacy": {"eps": "inf"}}, [10], 1) == 0.0


def test_fedsc_summary_records_epsilons_per_client(tiny_digits):
    spec = _spec(
        "fedsc",
        rounds=2,
        privacy={"eps": 3, "delta": 1e-2, "sigma": None, "deltas": [1e-2, 1e-4]},
        sharing={"after": 0.0, "every": 1},
    )
    algo = FedSC(spec, tiny_digits, seed=0)
    _run(algo, 2)
    from fedrepro.algorithms.fedsc.loss import alpha_schedule

    assert algo.after_training(2, list(range(5))) == {
        "alpha": pytest.approx(alpha_schedule(2, 2, algo.alpha_start, algo.alpha_end))
    }
    privacy = algo.summary()["privacy"]
    assert privacy["sigma"] == algo.sigma > 0
    rows = privacy["epsilons"]
    assert len(rows) == 5 * 2 and sorted(r["client"] for r in rows) == sorted(list(range(5)) * 2)
    at_1e2 = [r for r in rows if r["delta"] == 1e-2]
    assert all(r["T_j"] == 2 for r in at_1e2)
    assert max(r["eps_sqrt2"] for r in at_1e2) == pytest.approx(3.0)  # calibrated on the smallest client
    assert all(r["eps_paper"] < r["eps_sqrt2"] for r in rows)
    assert all(r["eps_accountant"] <= r["eps_sqrt2"] * 1.01 for r in rows)


@pytest.mark.parametrize("method", ["fedsc", "fedavg_byol", "fedx"])
def test_bf16_trains_the_networks_but_dp_calr_and_the_knn_monitor_stay_fp32(method, tiny_digits):
    torch.manual_seed(0)
    algo = CLASSES[method](_spec(method, rounds=1, precision="bf16", channels_last=True), tiny_digits, seed=0)
    seen = []
    record = lambda module, args, out: seen.append((module.training, out.dtype))  # noqa: E731
    for net in {id(n): n for n in (algo.net, algo.work)}.values():
        net.projector[0].register_forward_hook(record)
    rows, ev = _run(algo, 1)
    assert math.isfinite(rows[0]["loss"]) and 0.0 <= ev["knn_acc"] <= 1.0
    assert {dtype for training, dtype in seen if training} == {torch.bfloat16}
    assert {dtype for training, dtype in seen if not training} == {torch.float32}  # DP-CalR (eval mode), kNN
    assert not algo.work.backbone.features[2].weight.is_contiguous()  # NHWC, not NCHW


def test_probe_measures_collapse_against_the_same_seeds_untrained_encoder(tmp_path):
    """The probe stage compares the trained embeddings' spread with the untrained encoder's of the same seed:
    the untrained probe has ratio 1; a projector squeezed to one vector (scaled by 1e-3, a bias of ones) is
    collapsed by its spread although its centered rank is high."""
    import json

    from fedrepro.algorithms.fedsc.base import build_net
    from fedrepro.algorithms.fedsc.probing import probe_job, random_probe_job
    from fedrepro.pipeline import make_job
    from tests.fedsc.helpers import write_prepared_digits

    data = write_prepared_digits(tmp_path)
    tiny = tiny_spec()
    spec = {"encoder": tiny["encoder"], "projector": tiny["projector"], "probe": {"epochs": 2, "batch_size": 64}}
    out = tmp_path / "random" / "probe.json"
    random_probe_job(make_job(spec, {"probe": str(out)}, {"data": str(data)}, seeds=[0, 1]))
    for seed in json.loads(out.read_text())["seeds"].values():
        assert seed["spread_ratio"] == 1.0 and seed["status"] != "collapsed"  # a 2-epoch probe may sit at chance

    torch.manual_seed(0)
    net = build_net(tiny, 1)
    projector = dict(net.projector.state_dict())
    projector["2.weight"], projector["2.bias"] = 1e-3 * projector["2.weight"], torch.ones_like(projector["2.bias"])
    torch.save({"seeds": {0: {"backbone": net.backbone.state_dict(), "projector": projector}}}, tmp_path / "m.pt")
    out = tmp_path / "trained" / "probe.json"
    probe_job(make_job(spec, {"probe": str(out)}, {"data": str(data), "model": str(tmp_path / "m.pt")}))
    seed = json.loads(out.read_text())["seeds"]["0"]
    assert seed["embedding_rank_centered"] > 2.0 and seed["spread_ratio"] < 1e-4
    assert seed["status"] == "collapsed" and "spread" in seed["status_reason"]
