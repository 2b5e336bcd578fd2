"""Algorithm 1 as a vectorised program: protocol, reductions, unbiasedness, noise, resume."""

import itertools

import numpy as np
import pytest
import torch

from fedrepro.algorithms.steffle import fermi
from fedrepro.algorithms.steffle.base import BatchSchedule, seed_generator
from fedrepro.algorithms.steffle.sgda import SGDAConfig, SteffleTrainer
from fedrepro.fl.loop import Checkpoint
from fedrepro.fl.transport import Wire
from tests.foundation.conftest import Killed, killed_at

from .helpers import synthetic


class RecordingWire(Wire):
    def __init__(self):
        super().__init__(record=True)
        self.payloads = []

    def send(self, sender, receiver, kind, payload):
        out = super().send(sender, receiver, kind, payload)
        self.payloads.append((self.round, sender, receiver, kind, out))
        return out


def _trainer(data, seeds=(0,), lam=(0.0, 1.0), sigma=0.0, wire=None, protocol=False, **cfg):
    G, N = len(lam), data.num_silos
    base = dict(batch=32, epochs=2, eta_w=0.1, eval_every=1, clip=1.0, radius=1.0)
    base.update(cfg)
    return SteffleTrainer(
        data,
        SGDAConfig(**base),
        list(seeds),
        lam,
        np.full((G, N), sigma),
        np.full((G, N), sigma),
        wire=wire,
        protocol=protocol,
    )


def test_server_receives_only_the_three_silo_messages():
    data = synthetic()
    wire = RecordingWire()
    _trainer(data, sigma=0.3, wire=wire, protocol=True, epochs=1).run()
    assert wire.kinds("server") == {"loss_grad", "sens_grad_theta", "sens_grad_w"}
    senders = {m.sender for m in wire.messages if m.receiver == "server"}
    assert senders == {"silo0", "silo1", "silo2"}
    # the division message (F, grad F, indices) stays inside each silo
    for _, sender, receiver, kind, payload in wire.payloads:
        if kind == "outputs":
            assert sender.split("/")[0] == receiver.split("/")[0] and receiver.endswith("sensitive")
            assert set(payload) == {"F", "grad_F", "index"}
    # silos only ever receive the model (theta, W) from the server
    assert {k for _, s, r, k, _ in wire.payloads if s == "server"} == {"model"}


@pytest.mark.parametrize("compat", [False, True])
@pytest.mark.parametrize("fairness", ["dp", "eo"])
def test_protocol_mode_equals_fast_mode(compat, fairness):
    data = synthetic()
    kw = dict(sigma=0.2, lam=(0.5, 2.0), compat_refcode=compat, fairness=fairness, clip=0.05)
    fast = _trainer(data, protocol=False, **kw).run()
    slow = _trainer(data, protocol=True, **kw).run()
    assert torch.allclose(fast.theta, slow.theta, atol=1e-5)
    assert torch.allclose(fast.extra["W"], slow.extra["W"], atol=1e-5)
    assert fast.extra["W"].shape[2] == (2 if fairness == "eo" else 1)
    if compat:  # only the ref-code's single W entry moves
        assert (fast.extra["W"][..., 0, 1] != 0).any() and (
            fast.extra["W"].sum((-2, -1)) == fast.extra["W"][..., 0, 1]
        ).all()


def _sgd_reference(data, seed, cfg, epochs):
    """Plain minibatch SGD on BCE with the trainer's Poisson batches: per silo the batch SUM of the
    loss gradients over the expected batch size m (not the realised size), averaged over silos."""
    theta = _trainer(data, seeds=(seed,), lam=(0.0,)).theta[0, 0].clone()
    sched = BatchSchedule(data.silo_sizes, cfg["batch"])
    gen = seed_generator(seed, "batches")
    for epoch in range(epochs):
        local, weight = sched.epoch(gen)
        eta = 0.25 * 0.8 ** (epoch // 10)
        for r in range(sched.rounds_per_epoch):
            grads = []
            for j, idx in enumerate(data.silos):
                rows = idx[local[j, r][weight[j, r] > 0]]
                xb, yb = data.x[rows], data.y[rows].float()
                theta_req = theta.clone().requires_grad_(True)
                loss = (
                    torch.nn.functional.binary_cross_entropy_with_logits(xb @ theta_req, yb, reduction="sum")
                    / sched.batch
                )
                grads.append(torch.autograd.grad(loss, theta_req)[0])
            theta = theta - eta * torch.stack(grads).mean(0)
    return theta


@pytest.mark.parametrize("silos", [1, 3])
def test_lambda_zero_sigma_zero_is_sgd_or_fedsgd(silos):
    data = synthetic(silos=silos, n=400)
    result = _trainer(data, seeds=(4,), lam=(0.0,), epochs=2).run()
    ref = _sgd_reference(data, 4, {"batch": 32}, epochs=2)
    assert torch.allclose(result.theta[0, 0], ref, atol=1e-5)


def test_stochastic_gradient_is_unbiased():
    """Enumerate every pair of size-m batches of two silos (sigma = 0): the mean server step is grad F."""
    data = synthetic(n=16, silos=2, d=3)  # 12 training points, 6 per silo
    m, lam = 2, 1.5
    combos = list(itertools.product(itertools.combinations(range(6), m), repeat=2))
    tr = _trainer(data, seeds=tuple(range(len(combos))), lam=(lam,), batch=m, clip=1e6, radius=10.0)
    g = torch.Generator().manual_seed(0)
    theta0 = torch.randn(data.x.shape[1], generator=g)
    W0 = 0.3 * torch.randn(1, 2, 2, generator=g)
    tr.theta[:] = theta0
    tr.W[:] = W0
    local = torch.tensor([[list(a), list(b)] for a, b in combos])
    weight = torch.ones(len(combos), 2, m)
    tr.step(
        0, local, weight, {"u": torch.zeros(len(combos), 2, len(theta0)), "V": torch.zeros(len(combos), 2, 1, 2, 2)}
    )
    mean_step = (theta0 - tr.theta[:, 0]).mean(0) / 0.25
    # full-data gradient of F(theta, W) = mean BCE + lam * mean psi (autograd)
    th = theta0.clone().requires_grad_(True)
    rows = torch.cat(data.silos)
    logits = data.x[rows] @ th
    S, Zs = fermi.onehot(data.s[rows], 2), fermi.onehot(torch.zeros_like(rows), 1)
    obj = (
        torch.nn.functional.binary_cross_entropy_with_logits(logits, data.y[rows].float())
        + lam * fermi.psi(fermi.logistic_probs(logits), S, Zs, W0, tr.inv_sqrt_p).mean()
    )
    (full,) = torch.autograd.grad(obj, th)
    assert torch.allclose(mean_step, full, atol=1e-5)


def test_noise_on_sensitive_messages_and_its_average():
    data = synthetic(n=800, d=30)
    sigma = 0.7
    sent = {}
    for name, sig in (("clean", 0.0), ("noisy", sigma)):
        wire = RecordingWire()
        _trainer(data, seeds=tuple(range(40)), lam=(1.0,), sigma=sig, wire=wire, epochs=1).run()
        sent[name] = {(r, s, k): p for r, s, _, k, p in wire.payloads if r == 0 and _ == "server"}
    diffs = [sent["noisy"][key] - sent["clean"][key] for key in sent["clean"] if key[2] == "sens_grad_theta"]
    noise = torch.stack(diffs)  # (N, S, G, D) at round 0
    assert noise.std().item() == pytest.approx(sigma, rel=0.05)
    assert noise.mean(0).var().item() == pytest.approx(sigma**2 / 3, rel=0.1)  # server average: sigma^2/N
    for key in sent["clean"]:  # loss gradients carry no noise
        if key[2] == "loss_grad":
            assert torch.equal(sent["clean"][key], sent["noisy"][key])


def test_projection_keeps_w_in_ball_every_round():
    data = synthetic()
    tr = _trainer(data, lam=(2.0,), eta_w=50.0, radius=0.3, sigma=1.0)
    radius_seen = []
    original = tr._server_update

    def spy(t, received):
        original(t, received)
        radius_seen.append(torch.linalg.matrix_norm(tr.W).max().item())

    tr._server_update = spy
    tr.run()
    assert max(radius_seen) <= 0.3 + 1e-6 and max(radius_seen) > 0.29


def test_seed_results_do_not_depend_on_batching():
    data = synthetic()
    both = _trainer(data, seeds=(0, 1), lam=(0.0, 1.0), sigma=0.1).run()
    alone = _trainer(data, seeds=(1,), lam=(1.0,), sigma=0.1).run()
    assert torch.allclose(both.theta[1, 1], alone.theta[0, 0], atol=1e-6)
    again = _trainer(data, seeds=(0, 1), lam=(0.0, 1.0), sigma=0.1).run()
    assert torch.equal(both.theta, again.theta)


@pytest.mark.parametrize(("every", "kill"), [(1, 3), (2, 4), (2, 2)])
def test_kill_and_resume_is_exact(tmp_path, every, kill):
    """A job killed at any epoch resumes from its last checkpoint (every `every` epochs: fl.loop's
    Checkpoint) and ends with the uninterrupted run's numbers, bit for bit."""
    data = synthetic()
    full = _trainer(data, sigma=0.2, epochs=4, eval_every=1).run()
    ckpt = Checkpoint(tmp_path / "state.pt", every=every, minutes=None)
    with pytest.raises(Killed):
        killed_at(_trainer(data, sigma=0.2, epochs=4, eval_every=1), kill).run(ckpt)
    saved = torch.load(ckpt.path, weights_only=False)["rounds_done"] if ckpt.path.exists() else 0
    assert saved == (kill - 1) // every * every
    resumed = _trainer(data, sigma=0.2, epochs=4, eval_every=1).run(Checkpoint(ckpt.path, every=every, minutes=None))
    assert torch.equal(full.theta, resumed.theta)
    assert torch.equal(full.extra["W"], resumed.extra["W"])
    assert [e for e, _ in resumed.history] == [1, 2, 3, 4]
    for (_, got), (_, want) in zip(resumed.history, full.history):
        assert all(np.array_equal(got[k], want[k]) for k in want)
    assert [f.name for f in tmp_path.iterdir()] == ["state.pt"]  # written by rename: no temporary left


def test_a_torn_checkpoint_trains_from_the_start(tmp_path):
    data = synthetic()
    full = _trainer(data, sigma=0.2, epochs=3).run()
    ckpt = Checkpoint(tmp_path / "state.pt", every=1, minutes=None)
    _trainer(data, sigma=0.2, epochs=3).run(ckpt)
    ckpt.path.write_bytes(ckpt.path.read_bytes()[:100])  # a torn file (e.g. a disk fault)
    again = _trainer(data, sigma=0.2, epochs=3).run(Checkpoint(ckpt.path, every=1, minutes=None))
    assert torch.equal(full.theta, again.theta)  # detected, dropped, trained from the start


def test_iterate_choices():
    data = synthetic()
    final = _trainer(data, epochs=4).run()
    rnd = _trainer(data, epochs=4, iterate="random").run()
    avg = _trainer(data, epochs=4, iterate="refcode_avg").run()
    np.testing.assert_allclose(final.final["error"], final.history[-1][1]["error"])
    np.testing.assert_allclose(avg.final["error"], avg.history[-1][1]["error"])  # shorter than 20 epochs: last
    long = _trainer(data, epochs=30, eval_every=10, batch=128, iterate="refcode_avg").run()
    assert [e for e, _ in long.history] == [10, 20, 30]  # the authors average epochs 20 and 30
    np.testing.assert_allclose(long.final["error"], np.mean([m["error"] for e, m in long.history[1:]], 0))
    assert rnd.final["error"].shape == final.final["error"].shape


def test_fair_term_reduces_violation():
    data = synthetic(n=2000)
    res = _trainer(data, seeds=(0, 1), lam=(0.0, 3.0), epochs=8, eta_w=1.0, radius=5.0, clip=5.0).run()
    dp = res.final["dp_violation"].mean(0)
    assert dp[1] < dp[0] - 0.05


def test_bad_config_raises():
    with pytest.raises(ValueError, match="fairness"):
        SGDAConfig(fairness="parity")
    with pytest.raises(ValueError, match="iterate"):
        SGDAConfig(iterate="best")


def test_compat_refcode_numbers_groups_per_silo_as_the_authors_loader():
    """The authors' TabularDataset numbers sensitive values by first appearance (pandas unique) in each
    silo's rows, and P_S by first appearance in the whole training set; compat mode must do the same."""
    import pandas as pd

    data = synthetic(n=400)
    s = data.s.numpy()
    starts = [int(s[idx.min()]) for idx in data.silos]
    if len(set(starts)) == 1:  # make the silos disagree on "group 0"
        j = int(data.silos[1].min())
        data.s[j] = 1 - data.s[j]
        s = data.s.numpy()
    tr = _trainer(data, compat_refcode=True, lam=(1.0,))
    for idx in data.silos:
        rows = np.sort(idx.numpy())
        order = {v: i for i, v in enumerate(pd.unique(s[rows]))}
        np.testing.assert_array_equal(tr.cells_of[rows].numpy(), [order[v] for v in s[rows]])
    global_order = {v: i for i, v in enumerate(pd.unique(s))}
    p0 = np.mean([global_order[v] == 0 for v in s])
    assert tr.inv_sqrt_p[0, 0].item() == pytest.approx(p0**-0.5, rel=1e-6)
    assert len({int(tr.cells_of[idx.min()]) for idx in data.silos}) == 1  # every silo's first row is its group 0
    assert not torch.equal(tr.cells_of, data.s)  # which is not one global numbering


def test_capped_w_step_keeps_the_ascent_stable_where_the_fixed_step_flips():
    """eta_w = 1 at lambda >= 1: the fixed step multiplies W by 1 - 2 eta_w lambda p_hat < 0 and W flips
    sign every round at the projection radius; the capped step (eta_w lambda <= 1/2) never flips.
    Where the cap is inactive (lambda = 0.5) both rules give the same run."""
    data = synthetic(n=1200)
    runs = {}
    for rule in ("capped", "fixed"):
        runs[rule] = _trainer(
            data, seeds=(0,), lam=(0.5, 4.0), epochs=2, batch=64, eta_w=1.0, clip=2.0, radius=2.0, w_step=rule
        ).run()
    capped, fixed = (runs[r].history[-1][1] for r in ("capped", "fixed"))
    assert capped["w_flip_rate"].max() == 0.0
    assert fixed["w_flip_rate"][0, 1] > 0.9 and fixed["w_radius_share"][0, 1] == 1.0
    assert capped["w_norm"][0, 1] < 0.95 * 2.0
    assert torch.equal(runs["capped"].theta[:, 0], runs["fixed"].theta[:, 0])


def test_independent_loss_batches_resume_exactly(tmp_path):
    """loss_batch="independent" draws g's batches from their own per-seed stream, saved with the
    checkpoint: a killed run resumes to the uninterrupted run's numbers, and the variant is not the
    paper's algorithm (other batches for g, other model)."""
    data = synthetic()
    kw = dict(sigma=0.2, epochs=3, eval_every=1, loss_batch="independent")
    full = _trainer(data, **kw).run()
    ckpt = Checkpoint(tmp_path / "state.pt", every=1, minutes=None)
    with pytest.raises(Killed):
        killed_at(_trainer(data, **kw), 2).run(ckpt)
    resumed = _trainer(data, **kw).run(Checkpoint(ckpt.path, every=1, minutes=None))
    assert torch.equal(full.theta, resumed.theta)
    assert not torch.equal(full.theta, _trainer(data, sigma=0.2, epochs=3, eval_every=1).run().theta)
