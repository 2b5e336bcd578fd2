"""What SteFFLe's privacy mechanism really releases, measured on the wire (Algorithm 1, line 9).

Each test replays a run: before every round, a second trainer is put in the same state
(theta, W) and fed the same batch and noise draws, with one thing changed (no noise, or
one sample's sensitive attribute flipped). The difference of the two messages that reach
the server is then exactly the noise, or exactly what one sample can move, in that round.
"""

import math

import numpy as np
import pytest
import torch

from fedrepro.algorithms.steffle.base import BatchSchedule, FairData
from fedrepro.algorithms.steffle.sgda import SGDAConfig, SteffleTrainer
from fedrepro.privacy import accountant
from fedrepro.privacy import steffle as accounting

from .helpers import ServerInbox, synthetic

KINDS = ("loss_grad", "sens_grad_theta", "sens_grad_w")


def _cfg(**kw):
    base = dict(batch=16, epochs=2, eta_w=0.5, eval_every=2, clip=0.05, radius=1.0)
    base.update(kw)
    return SGDAConfig(**base)


def _replay(data, twin_data, cfg, sigma_theta, sigma_w, twin_sigmas, seeds=(0,), lam=1.0):
    """Run trainer A; in every round run twin B from A's state on the same batch and noise.

    Returns the server inboxes of A and B, both keyed by (round, silo, kind).
    """
    N = data.num_silos
    a_wire, b_wire = ServerInbox(), ServerInbox()
    a = SteffleTrainer(
        data, cfg, list(seeds), [lam], np.full((1, N), sigma_theta), np.full((1, N), sigma_w), wire=a_wire
    )
    b = SteffleTrainer(
        twin_data,
        cfg,
        list(seeds),
        [lam],
        np.full((1, N), twin_sigmas[0]),
        np.full((1, N), twin_sigmas[1]),
        wire=b_wire,
    )
    b.inv_sqrt_p = a.inv_sqrt_p  # P_S is public: the same in both worlds
    own_step = a.step

    def step(t, local, weight, noise):
        b.theta, b.W, b.epoch = a.theta.clone(), a.W.clone(), a.epoch
        b.step(t, local, weight, noise)
        own_step(t, local, weight, noise)

    a.step = step
    a.run()
    return a_wire.got, b_wire.got


def test_noise_on_the_wire_is_sigma_fresh_every_round_and_only_on_sensitive_messages():
    data = synthetic(n=800, d=30)
    sig_t, sig_w = 0.7, 0.3
    noisy, clean = _replay(data, data, _cfg(epochs=1), sig_t, sig_w, (0.0, 0.0), seeds=range(4))
    rounds = sorted({k[0] for k in noisy})
    assert len(rounds) > 5
    for kind, sigma in (("sens_grad_theta", sig_t), ("sens_grad_w", sig_w)):
        per_round = torch.stack(
            [
                torch.stack([noisy[(t, f"silo{j}", kind)] - clean[(t, f"silo{j}", kind)] for j in range(3)])
                for t in rounds
            ]
        )  # (T, N, S, G, ...)
        assert per_round.std().item() == pytest.approx(sigma, rel=0.06), kind
        # fresh draws: consecutive rounds (and silos) are uncorrelated, no round repeats another's noise
        flat = per_round.flatten(1)
        corr = torch.corrcoef(flat)
        off = corr[~torch.eye(len(flat), dtype=torch.bool)]
        assert off.abs().max().item() < 0.6 and off.abs().mean().item() < 0.2, kind  # reused draw: 1
        assert per_round[:, 0].flatten(1).std(0).min().item() > 0
    for t in rounds:  # the loss gradient carries no noise
        for j in range(3):
            assert torch.equal(noisy[(t, f"silo{j}", "loss_grad")], clean[(t, f"silo{j}", "loss_grad")])


def _flip_one(data: FairData, index: int) -> FairData:
    s = data.s.clone()
    s[index] = 1 - s[index]
    return FairData(data.x, data.y, s, data.silos, data.x_test, data.y_test, data.s_test, data.k, data.l)


@pytest.mark.parametrize("fairness", ["dp", "eo"])
def test_one_sensitive_attribute_moves_each_release_by_at_most_the_accounted_sensitivity(fairness):
    """In EVERY round (small Poisson batches included) one flipped s_i moves h_theta by <= 2C/m and
    h_w by <= 2 sqrt(1/p_0 + 1/p_1)/m (the accountant's 2 sqrt(2/rho)/m with p_S >= rho); the other
    silos' messages and the loss gradient do not move at all."""
    data = synthetic(n=200, d=6, silos=2)
    target = int(data.silos[0][3])
    cfg = _cfg(batch=12, epochs=3, fairness=fairness, clip=0.05)
    base, flipped = _replay(data, _flip_one(data, target), cfg, 0.0, 0.0, (0.0, 0.0), seeds=range(3))
    m = BatchSchedule(data.silo_sizes, cfg.batch).batch
    tr = SteffleTrainer(data, cfg, [0], [1.0], np.zeros((1, 2)), np.zeros((1, 2)))
    p = 1.0 / tr.inv_sqrt_p.double() ** 2  # (Z, k) public group frequencies
    bound_w = (2 * torch.sqrt(1 / p[..., 0] + 1 / p[..., 1]) / m).max().item()
    moved_theta, moved_w = [], []
    for (t, silo, kind), value in base.items():
        diff = value - flipped[(t, silo, kind)]
        if silo != "silo0" or kind == "loss_grad":
            assert torch.equal(diff, torch.zeros_like(diff)), (t, silo, kind)
        elif kind == "sens_grad_theta":
            moved_theta.append(diff.norm(dim=-1).max().item())
        else:
            moved_w.append(diff.flatten(-2).norm(dim=-1).max().item())
    assert max(moved_theta) <= 2 * cfg.clip / m * (1 + 1e-5)
    assert max(moved_theta) > 0.5 * 2 * cfg.clip / m  # clipping is active, the sample counts
    assert max(moved_w) <= bound_w * (1 + 1e-5)
    assert max(moved_w) > 0


def test_poisson_batches_have_the_accounted_rate_and_binomial_sizes():
    """Each sample joins a round's batch with probability q = m/n_j independently (Poisson
    subsampling, what the accountant composes): mean size m, binomial variance n q (1 - q)."""
    sched = BatchSchedule([300, 200], 20)
    gen = torch.Generator().manual_seed(0)
    member = [torch.zeros(300), torch.zeros(200)]
    sizes = [[], []]
    epochs = 60
    for _ in range(epochs):
        idx, w = sched.epoch(gen)
        for j in range(2):
            for r in range(sched.rounds_per_epoch):
                chosen = idx[j, r][w[j, r] > 0]
                assert len(torch.unique(chosen)) == len(chosen)  # no sample twice in a batch
                member[j][chosen] += 1
                sizes[j].append(len(chosen))
    rounds = epochs * sched.rounds_per_epoch
    for j, n_j in enumerate((300, 200)):
        q = 20 / n_j
        assert member[j].mean().item() / rounds == pytest.approx(q, rel=0.02)
        assert np.mean(sizes[j]) == pytest.approx(20, rel=0.03)
        assert np.var(sizes[j]) == pytest.approx(n_j * q * (1 - q), rel=0.2)


def test_realised_epsilon_is_the_joint_subsampled_gaussian_of_what_runs():
    """The summary's epsilon: one Poisson-subsampled Gaussian per round whose multiplier combines the
    theta and W releases of the same batch, recomputed here by hand, at q = m/n_j and T rounds."""
    delta, T, n_j, m, rho, clip, radius = 1e-8, 300, 5000, 64, 0.3, 2.0, 2.0
    rec = accounting.steffle_noise(2, delta, T, [n_j, n_j], rho, clip, radius, m)
    st, sw = rec["sigma_theta"][0], rec["sigma_w"][0]
    z = 1 / math.sqrt((2 * clip / m / st) ** 2 + (2 * math.sqrt(2 / rho) / m / sw) ** 2)
    expected = accountant.epsilon(z, T, delta, m / n_j, "pld")
    assert rec["realised_epsilon"] == pytest.approx(expected, rel=1e-6)
    # joint accounting costs more than either release alone
    alone = accountant.epsilon(st * m / (2 * clip), T, delta, m / n_j, "pld")
    assert rec["realised_epsilon"] > alone
    assert rec["sampling"] == "poisson" and "if the batch membership stays secret" in rec["sampling_note"]
    # g reveals the batch (Algorithm 1 line 7): the bound for what is sent has no amplification
    known = accounting.known_membership_epsilon([accountant.GaussianComposition(z, T, m / n_j, "")], delta)
    assert rec["sound_epsilon"] == rec["known_membership_epsilon"] == pytest.approx(known, rel=1e-9)
    assert rec["sound_epsilon"] > 2 * rec["realised_epsilon"]
    # compat_refcode: the same sigma against a batch SUM is (almost) no privacy, and lambda = 0 releases nothing
    compat = accounting.steffle_noise(2, delta, T, [n_j], rho, clip, radius, m, compat_refcode=True, lambdas=[0.0, 1.0])
    assert compat["realised_by_lambda"]["0.0"] == 0.0
    assert compat["realised_epsilon"] > 50 * rec["realised_epsilon"]
    assert math.isinf(accounting.joint_multiplier([1.0, 0.0], [0.0, 0.0]))
    assert accounting.joint_multiplier([1.0, 0.0], [1.0, 1.0]) == 0.0


def test_calibrated_noise_meets_the_label_where_the_theorem_overshoots():
    """Few rounds (T below Theorem 3.3's precondition): the theorem's sigma realises more than the label;
    noise="calibrated" scales both sigmas by one factor so the accountant confirms the label."""
    args = dict(delta=1e-8, rounds=40, silo_sizes=[5000, 4000], rho=0.3, clip=2.0, radius=2.0, batch=64)
    theorem = accounting.steffle_noise(3, **args)
    assert not theorem["preconditions_hold"] and theorem["realised_epsilon_rdp"] > 3.3
    calibrated = accounting.steffle_noise(3, noise="calibrated", **args)
    assert 2.9 <= calibrated["realised_epsilon_rdp"] <= 3.0 + 1e-9
    assert calibrated["realised_epsilon"] <= 3.0
    k = calibrated["theorem_scale"]
    assert k > 1 and calibrated["sigma_w"] == pytest.approx([k * v for v in theorem["sigma_w"]])
    assert calibrated["sigma_theta"][1] / calibrated["sigma_w"][1] == pytest.approx(
        theorem["sigma_theta"][1] / theorem["sigma_w"][1]
    )
    with pytest.raises(ValueError, match="noise"):
        accounting.steffle_noise(3, noise="exact", **args)


def _trainers(data, sigma):
    """One of each trainer family, all private at `sigma` (multiplier for the baselines)."""
    from fedrepro.algorithms.steffle.baselines import BaselineConfig
    from fedrepro.algorithms.steffle.ling2024 import FedFDPTrainer, GroupGapTrainer
    from fedrepro.algorithms.steffle.tran2021 import TranTrainer

    N, base = data.num_silos, BaselineConfig(batch=32, epochs=2, eval_every=2)
    return {
        "steffle": SteffleTrainer(data, _cfg(batch=32), [0, 1], [1.0], np.full((1, N), sigma), np.full((1, N), sigma)),
        "tran2021": TranTrainer(data.centralised(), base, [0, 1], [1.0], [sigma]),
        "ling2024": FedFDPTrainer(data, base, [0, 1], [1.0], [sigma]),
        "ling2024_groupgap": GroupGapTrainer(data, base, [0, 1], [1.0], [sigma]),
    }


def test_every_noise_draw_goes_through_the_mechanism(monkeypatch):
    """With privacy.mechanisms.gaussian_noise silenced, every private trainer ends where its
    noiseless twin does (no noise enters another way), and the mechanism draws exactly the
    standard normals of each seed's noise generator (the numbers before it was used)."""
    from fedrepro.algorithms.steffle import base

    data = synthetic(n=400, d=4)
    noiseless = {name: t.run().theta for name, t in _trainers(data, 0.0).items()}
    noisy = {name: t.run().theta for name, t in _trainers(data, 0.5).items()}
    assert all(not torch.equal(noisy[name], noiseless[name]) for name in noisy)
    monkeypatch.setattr(base, "gaussian_noise", lambda shape, sigma, generator: torch.zeros(shape))
    silenced = {name: t.run().theta for name, t in _trainers(data, 0.5).items()}
    for name, theta in silenced.items():
        torch.testing.assert_close(theta, noiseless[name], rtol=0, atol=1e-6, msg=name)
    monkeypatch.undo()
    trainer = _trainers(data, 0.5)["steffle"]
    drawn = trainer.standard_normal((3, 5))
    expected = torch.stack([torch.randn(3, 5, generator=base.seed_generator(s, "noise")) for s in (0, 1)])
    assert torch.equal(drawn, expected)


def _unique_feature_data(n=240, silos=2):
    """Synthetic data plus one one-hot column that is 1 for a single training row (row 0 of silo 0)."""
    data = synthetic(n=n, d=4, silos=silos)
    x = torch.cat([data.x, torch.zeros(len(data.x), 1)], dim=1)
    x[data.silos[0][0], -1] = 1.0
    x_test = torch.cat([data.x_test, torch.zeros(len(data.x_test), 1)], dim=1)
    return FairData(x, data.y, data.s, data.silos, x_test, data.y_test, data.s_test, data.k, data.l), 0


@pytest.mark.parametrize("loss_batch", ["same", "independent"])
def test_the_clear_text_loss_gradient_reveals_the_sensitive_batch_unless_drawn_independently(loss_batch):
    """Issue 27, item 2, on the wire: a row alone with a one-hot feature makes that coordinate of g
    non-zero exactly in the rounds its row is in the sensitive batch (Algorithm 1 as written, every
    round); with loss_batch="independent" g's rounds are another Poisson draw (about q T of them)
    that does not follow the sensitive batch."""
    data, local_row = _unique_feature_data()
    cfg = _cfg(batch=12, epochs=8, loss_batch=loss_batch)
    wire = ServerInbox()
    tr = SteffleTrainer(data, cfg, [0, 1, 2], [1.0], np.full((1, 2), 0.3), np.full((1, 2), 0.3), wire=wire)
    member = {}
    own_step = tr.step

    def step(t, local, weight, noise):
        member[t] = ((local[:, 0] == local_row) & (weight[:, 0] > 0)).any(-1)  # (S,) in silo 0's batch
        own_step(t, local, weight, noise)

    tr.step = step
    tr.run()
    rounds = sorted(member)
    in_batch = torch.stack([member[t] for t in rounds])  # (T, S)
    in_g = torch.stack([wire.got[(t, "silo0", "loss_grad")][:, 0, -1] != 0 for t in rounds])  # (T, S)
    q = cfg.batch / data.silo_sizes[0]
    assert 0 < in_batch.float().mean().item() < 3 * q
    if loss_batch == "same":
        assert torch.equal(in_g, in_batch)
    else:
        assert q / 3 < in_g.float().mean().item() < 3 * q
        assert (in_g != in_batch).float().mean().item() > q / 2  # other rounds than the sensitive batch's


def test_independent_loss_batch_is_accounted_with_amplification_and_trains():
    """The sound variant's record: its bound for what is sent is the paper's Poisson accounting;
    its model learns like Algorithm 1's (same data, same noise)."""
    data = synthetic(n=1200, d=6)
    runs = {}
    for loss_batch in ("same", "independent"):
        cfg = _cfg(batch=32, epochs=4, loss_batch=loss_batch, clip=1.0)
        tr = SteffleTrainer(data, cfg, [0, 1], [1.0], np.full((1, 3), 0.05), np.full((1, 3), 0.05))
        runs[loss_batch] = tr.run().final["error"].mean()
    assert abs(runs["same"] - runs["independent"]) < 0.05
    with pytest.raises(ValueError, match="loss_batch"):
        _cfg(loss_batch="shared")


def test_equalized_odds_accounts_w_with_the_conditional_rho():
    """eq. 6 divides W^(y)'s gradient by sqrt(P(S = s | Y = y)): a flipped attribute in a rare
    (s, y) cell moves h_w by more than the marginal rho allows, and no more than rho_w allows;
    the job's record accounts h_w with rho_w (recomputed here by hand)."""
    from fedrepro.algorithms.steffle import jobs, sgda

    rng = np.random.default_rng(3)
    n = 600
    y = (rng.random(n) < 0.5).astype(np.int64)
    s = np.where(y == 1, rng.random(n) < 0.08, rng.random(n) < 0.6).astype(np.int64)  # rare (s=1, y=1)
    x = rng.normal(size=(n, 3)).astype(np.float32) + 2.0 * y[:, None]
    data = FairData.from_arrays(x, y, s, x[:50], y[:50], s[:50], np.array_split(np.arange(n), 2))
    cfg = _cfg(batch=40, epochs=3, fairness="eo", clip=0.05)
    ctx = jobs.privacy_context(data, cfg)
    assert ctx["rho_w"] < 0.5 * ctx["rho"]
    target = int(np.flatnonzero((y == 1) & (s == 0))[0])  # to the rare cell
    base, flipped = _replay(data, _flip_one(data, target), cfg, 0.0, 0.0, (0.0, 0.0), seeds=range(3))
    m = BatchSchedule(data.silo_sizes, cfg.batch).batch
    moved = max(
        (v - flipped[key]).flatten(-2).norm(dim=-1).max().item() for key, v in base.items() if key[2] == "sens_grad_w"
    )
    assert 2 * math.sqrt(2 / ctx["rho"]) / m < moved <= 2 * math.sqrt(2 / ctx["rho_w"]) / m
    spec = {"method": "steffle", "fairness": "eo", "train": dict(batch=40, epochs=3, clip=0.05, radius=1.0)}
    spec |= {"epsilons": [1], "lambdas": [1.0]}
    _, privacy = sgda.build(spec, data, [0], [(1, 1.0)], [1])
    rec = privacy["per_eps"]["1"]
    st, sw = rec["sigma_theta"][0], rec["sigma_w"][0]
    z = 1 / math.sqrt((2 * 0.05 / m / st) ** 2 + (2 * math.sqrt(2 / ctx["rho_w"]) / m / sw) ** 2)
    q = m / min(data.silo_sizes)
    assert rec["realised_epsilon"] == pytest.approx(accountant.epsilon(z, ctx["rounds"], ctx["delta"], q, "pld"))
