"""Noise (Theorem 3.3 reference row, preconditions, library epsilon) and the two baselines."""

import math

import numpy as np
import pytest
import torch

from fedrepro.algorithms.steffle.baselines import BaselineConfig
from fedrepro.algorithms.steffle.ling2024 import FedFDPTrainer, GroupGapTrainer
from fedrepro.algorithms.steffle.sgda import SGDAConfig, SteffleTrainer
from fedrepro.algorithms.steffle.tran2021 import TranTrainer
from fedrepro.fl.transport import Wire
from fedrepro.privacy import accountant
from fedrepro.privacy import steffle as accounting

from .helpers import ServerInbox, synthetic

CREDIT = dict(delta=1 / 22500**2, rounds=1200, silo_sizes=[7500] * 3, rho=0.396, batch=256)


def test_theorem_33_reference_row_and_scaling():
    rec = accounting.steffle_noise(1, clip=5, radius=5, **CREDIT)
    assert rec["sigma_w"][0] == pytest.approx(0.1314, abs=1e-4)  # Theorem 3.3 by hand: Credit N=3 eps=1
    assert rec["sigma_theta"][0] == pytest.approx(25 * rec["sigma_w"][0])
    assert rec["preconditions_hold"]
    three = accounting.steffle_noise(3, clip=5, radius=5, **CREDIT)
    assert three["sigma_w"][0] == pytest.approx(rec["sigma_w"][0] / 3)
    nine = accounting.steffle_noise(9, clip=5, radius=5, **CREDIT)
    assert not nine["preconditions_hold"] and "T = 1200" in nine["precondition_messages"][0]
    assert accounting.steffle_noise("inf", clip=5, radius=5, **CREDIT)["sigma_w"] == [0.0] * 3
    assert 0 < rec["library_epsilon"] < math.inf


def test_central_noise_is_dp_fermi():
    """N = 1 with n~ = n: the SteFFLe formula is DP-FERMI's central noise (Lowy et al. 2023;
    SteFFLe Section 5 compares with it as the N = 1 case)."""
    central = accounting.steffle_noise(1, 1 / 22500**2, 3520, [22500], 0.396, 1.0, 1.0, 256)
    assert central["sigma_w"][0] == pytest.approx(0.0750, abs=1e-4)


def test_calibrated_multiplier_meets_target():
    def comp(z):
        return [accountant.GaussianComposition(z, 300, 0.05, "a"), accountant.GaussianComposition(z, 10, 1.0, "b")]

    z, eps_z = accounting.calibrate_multiplier(2.0, 1e-5, comp)
    assert eps_z == pytest.approx(accountant.combined_epsilon(comp(z), 1e-5)) and eps_z <= 2.0
    assert accountant.combined_epsilon(comp(0.97 * z), 1e-5) > 2.0


def _sgd(data, lam=0.0):
    cfg = SGDAConfig(batch=32, epochs=2, eval_every=1)
    G, N = 1, data.num_silos
    return SteffleTrainer(data, cfg, [3], [lam], np.zeros((G, N)), np.zeros((G, N))).run()


def test_baselines_reduce_to_sgd_without_fairness_and_noise():
    data = synthetic()
    cfg = BaselineConfig(batch=32, epochs=2, eval_every=1, clip_loss=1e9)
    ling = GroupGapTrainer(data, cfg, [3], lam=[0.0], multiplier=[0.0]).run()
    assert torch.allclose(ling.theta, _sgd(data).theta, atol=1e-5)
    tran = TranTrainer(data.centralised(), cfg, [3], dual_lr=[0.0], multiplier=[0.0]).run()
    assert torch.allclose(tran.theta, _sgd(data.centralised()).theta, atol=1e-5)


def _rates_objective(data, theta, fairness):
    """Full-data soft group rates r_{za}, r_z as autograd functions of theta."""
    p = torch.sigmoid(data.x @ theta)
    z = data.y if fairness == "eo" else torch.zeros_like(data.y)
    Z = 2 if fairness == "eo" else 1
    r = torch.stack([torch.stack([p[(z == a) & (data.s == b)].mean() for b in (0, 1)]) for a in range(Z)])
    rz = torch.stack([p[z == a].mean() for a in range(Z)])[:, None]
    return p, r, rz


@pytest.mark.parametrize("fairness", ["dp", "eo"])
def test_cell_coefficients_give_the_penalty_gradients(fairness):
    data = synthetic(n=400).centralised()
    trainer = GroupGapTrainer(data, BaselineConfig(fairness=fairness), [0], lam=[1.0], multiplier=[0.0])
    theta = torch.randn(data.x.shape[1], generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.3
    x64 = data.x.double()
    data.x = x64
    th = theta.clone().requires_grad_(True)
    p, r, rz = _rates_objective(data, th, fairness)
    cells = trainer.cells_of
    for A_fn, obj_fn in (
        (lambda r, rz: 2 * (r - rz), lambda r, rz: ((r - rz) ** 2).sum()),  # Ling (FedFair-style)
        (lambda r, rz: 0.7 * torch.sign(r - rz), lambda r, rz: (0.7 * (r - rz).abs()).sum()),  # Tran (Lagrangian)
    ):
        (auto,) = torch.autograd.grad(obj_fn(r, rz), th, retain_graph=True)
        kappa = trainer.cell_coef(A_fn(r.detach(), rz.detach()).float()).double()
        pd_ = p.detach()
        manual = ((kappa[cells] * pd_ * (1 - pd_))[:, None] * x64).mean(0)
        assert torch.allclose(auto, manual, atol=1e-5)


def test_group_gap_variant_messages_and_fairness_effect():
    data = synthetic(n=2000)
    wire = Wire()
    cfg = BaselineConfig(batch=32, epochs=6, eval_every=3)
    res = GroupGapTrainer(data, cfg, [0, 1], lam=[0.0, 20.0], multiplier=[0.3, 0.3], wire=wire).run()
    assert wire.kinds("server") == {"model_update", "fair_stats"}
    dp = res.final["dp_violation"].mean(0)
    assert dp[1] < dp[0]


def test_tran_dual_ascent_raises_multipliers_and_lowers_violation():
    data = synthetic(n=2000).centralised()
    cfg = BaselineConfig(batch=32, epochs=6, eval_every=3)
    res = TranTrainer(data, cfg, [0, 1], dual_lr=[0.0, 1.0], multiplier=[0.3, 0.3]).run()
    assert (res.extra["mu"][:, 0] == 0).all() and (res.extra["mu"][:, 1] > 0).any()
    dp = res.final["dp_violation"].mean(0)
    assert dp[1] < dp[0]
    with pytest.raises(ValueError, match="central"):
        TranTrainer(synthetic(), cfg, [0], dual_lr=[0.0], multiplier=[0.0])


# ----------------------------------------------------------------------------- FedFDP (Ling et al. 2024)


def _fdp_step(data, lam, z, noise, global_loss=0.4, **cfg):
    """One FedFDP round from a fixed state (theta, global loss) on fixed full-size batches."""
    base = dict(batch=16, epochs=1, eval_every=1, dp_norm=0.5, clip_norm_for_loss=0.6)
    base.update(cfg)
    wire = ServerInbox()
    tr = FedFDPTrainer(data, BaselineConfig(**base), [0], lam=[lam], multiplier=[z], wire=wire)
    tr.theta[:] = torch.randn(data.x.shape[1], generator=torch.Generator().manual_seed(1)) * 0.5
    tr.global_loss[:] = global_loss
    local = torch.arange(16).expand(1, data.num_silos, 16).clone()
    theta0 = tr.theta.clone()
    tr.step(0, local, torch.ones(1, data.num_silos, 16), noise)
    got = {(silo, kind): value for (_, silo, kind), value in wire.got.items()}  # one round
    return tr, got, theta0, local


def test_fedfdp_reweights_each_clipped_gradient_by_its_loss_gap():
    """model_update = sum_i clip_C(w_i grad loss_i)/m with w_i = 1 + lambda (loss_i - L), per sample
    by autograd; loss_stat = sum_i min(loss_i(theta'), B)/m under the updated model; the server keeps
    the size-weighted mean of the released losses as L. The sensitive attribute is never read."""
    data = synthetic(n=400)
    N, D, lam, L, C, B = data.num_silos, data.x.shape[1], 1.5, 0.4, 0.5, 0.6
    zero = {"u": torch.zeros(1, N, D), "l": torch.zeros(1, N)}
    tr, got, theta0, local = _fdp_step(data, lam, 0.0, zero, global_loss=L, dp_norm=C, clip_norm_for_loss=B)
    th0 = theta0[0, 0].double()
    for j, idx in enumerate(data.silos):
        rows = idx[local[0, j]]
        total = torch.zeros(D, dtype=torch.float64)
        for i in rows:
            th = th0.clone().requires_grad_(True)
            loss_i = torch.nn.functional.binary_cross_entropy_with_logits(data.x[i].double() @ th, data.y[i].double())
            (g,) = torch.autograd.grad(loss_i, th)
            v = (1 + lam * (loss_i.item() - L)) * g
            total += v * min(1.0, C / v.norm().item())
        expected = total / 16
        assert torch.allclose(got[(f"silo{j}", "model_update")][0, 0].double(), expected, atol=1e-5)
        new = th0 - 0.25 * expected
        after = torch.nn.functional.binary_cross_entropy_with_logits(
            data.x[rows].double() @ new, data.y[rows].double(), reduction="none"
        )
        assert got[(f"silo{j}", "loss_stat")][0, 0].item() == pytest.approx(
            after.clamp(max=B).sum().item() / 16, rel=1e-4
        )
    sizes = torch.tensor(data.silo_sizes, dtype=torch.float32)
    stats = torch.stack([got[(f"silo{j}", "loss_stat")][0, 0] for j in range(N)])
    assert tr.global_loss[0, 0].item() == pytest.approx(float((sizes / sizes.sum()) @ stats), rel=1e-5)
    flipped = synthetic(n=400)
    flipped.s = 1 - flipped.s
    _, got_flipped, _, _ = _fdp_step(flipped, lam, 0.0, zero, global_loss=L, dp_norm=C, clip_norm_for_loss=B)
    assert all(torch.equal(got[k], got_flipped[k]) for k in got)


def test_fedfdp_noise_on_the_wire_is_z_times_each_sensitivity():
    """The noise that reaches the server: z C / m on the gradient mean, z B / m on the loss mean."""
    data = synthetic(n=400, d=40)
    N, D, z, C, B = data.num_silos, data.x.shape[1], 0.8, 0.5, 0.6
    g = torch.Generator().manual_seed(3)
    noise = {"u": torch.randn(1, N, D, generator=g), "l": torch.randn(1, N, generator=g)}
    zero = {"u": torch.zeros(1, N, D), "l": torch.zeros(1, N)}
    _, noisy, _, _ = _fdp_step(data, 1.0, z, noise, dp_norm=C, clip_norm_for_loss=B)
    _, clean, _, _ = _fdp_step(data, 1.0, z, zero, dp_norm=C, clip_norm_for_loss=B)
    _, grad_only, _, _ = _fdp_step(data, 1.0, z, {"u": noise["u"], "l": zero["l"]}, dp_norm=C, clip_norm_for_loss=B)
    for j in range(N):
        diff = noisy[(f"silo{j}", "model_update")] - clean[(f"silo{j}", "model_update")]
        assert torch.allclose(diff[0, 0], z * C / 16 * noise["u"][0, j], atol=1e-6)
        d_loss = noisy[(f"silo{j}", "loss_stat")] - grad_only[(f"silo{j}", "loss_stat")]
        assert d_loss.item() == pytest.approx(z * B / 16 * noise["l"][0, j].item(), abs=1e-6)


def test_fedfdp_without_fairness_and_noise_is_fedsgd():
    data = synthetic()
    cfg = BaselineConfig(batch=32, epochs=2, eval_every=1, dp_norm=1e9)
    fdp = FedFDPTrainer(data, cfg, [3], lam=[0.0], multiplier=[0.0]).run()
    assert torch.allclose(fdp.theta, _sgd(data).theta, atol=1e-5)


def test_tran_dual_noise_is_z_times_the_measured_sensitivity_of_the_group_sums():
    """The dual release (PF-LD's noisy group sums over the training set) carries noise z * Delta,
    Delta its replace-one L2 sensitivity. Delta is measured here: with sigma_i close to 1, flipping
    one s_i moves the sums by sqrt(2) sigma_i ~ 1.41; the noise, recovered from the seed's draws,
    must be >= z times that (dropping the sqrt(2) leaves z / 1.41)."""
    from fedrepro.algorithms.steffle.base import seed_generator

    data = synthetic(n=400).centralised()
    cfg = BaselineConfig(batch=32, epochs=1, eval_every=1)
    z = 0.7

    def release(d):
        tr = TranTrainer(d, cfg, [0], [1.0], [z])
        tr.theta[..., -1] = 12.0  # bias: sigma_i ~ 1 for every row
        return tr.dual_release()

    flipped = data.s.clone()
    flipped[5] = 1 - flipped[5]
    other = type(data)(data.x, data.y, flipped, data.silos, data.x_test, data.y_test, data.s_test, data.k, data.l)
    sums, noisy = release(data)
    sums_flip, _ = release(other)
    sensitivity = (sums - sums_flip).norm(dim=-1).max().item()
    assert 1.4 < sensitivity <= math.sqrt(2) * (1 + 1e-6)
    draws = torch.randn(sums.shape[-1], generator=seed_generator(0, "noise"))
    scale = ((noisy - sums)[0, 0] / draws).mean().item()
    assert scale >= z * sensitivity * (1 - 1e-5)
    assert scale == pytest.approx(z * math.sqrt(2), rel=1e-5)


def test_tran_record_bounds_what_is_sent_with_the_batches_revealed():
    """Item 4: the unclipped loss gradient rides in the noisy primal release, so the record's
    sound_epsilon is the revealed-batch bound of its T primal (q = m/n) and E dual (q = 1) releases,
    recomputed here with dp_accounting's PLD (one Gaussian of std z / sqrt(K + E) given K)."""
    from dp_accounting.pld import privacy_loss_distribution as pld
    from scipy import stats

    from fedrepro.algorithms.steffle import tran2021

    data = synthetic(n=1600)
    spec = {"method": "tran2021", "fairness": "dp", "train": dict(batch=64, epochs=3, clip_primal=1.0)}
    spec |= {"epsilons": [2], "lambdas": [1.0]}
    _, privacy = tran2021.build(spec, data.centralised(), [0], [(2, 1.0)], [2])
    rec = privacy["per_eps"]["2"]
    z, T, E = rec["noise_multiplier"], privacy["rounds"], 3
    q = 64 / privacy["n"]
    assert "unclipped loss gradient" in rec["sound_note"]
    assert rec["sound_epsilon"] == rec["known_membership_epsilon"] > rec["realised_epsilon"]
    delta = sum(
        stats.binom.pmf(k, T, q)
        * pld.from_gaussian_mechanism(z / math.sqrt(k + E), value_discretization_interval=1e-2).get_delta_for_epsilon(
            rec["sound_epsilon"]
        )
        for k in range(T + 1)
        if stats.binom.pmf(k, T, q) > 1e-14
    )
    assert delta == pytest.approx(privacy["delta"], rel=0.02)


def test_fedfdp_record_keeps_the_paper_accounting_as_its_bound():
    """FedFDP sends only noised statistics of a secret Poisson batch: its bound is the paper's accounting."""
    from fedrepro.algorithms.steffle import ling2024

    data = synthetic(n=800)
    spec = {"method": "ling2024", "fairness": "dp", "train": dict(batch=32, epochs=2)}
    spec |= {"epsilons": [2], "lambdas": [1.0]}
    _, privacy = ling2024.build(spec, data, [0], [(2, 1.0)], [2])
    rec = privacy["per_eps"]["2"]
    assert rec["sound_epsilon"] == rec["realised_epsilon"] < rec["known_membership_epsilon"]
