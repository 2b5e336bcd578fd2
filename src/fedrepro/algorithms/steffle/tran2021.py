"""The tran2021 baseline of the SteFFLe figures (Section 5): Tran, Fioretto, Van Hentenryck
(AAAI 2021), "Differentially Private and Fair Deep Learning: A Lagrangian Dual Approach",
algorithm PF-LD, re-implemented (no public code used) as `TranTrainer`.
  Follows the paper: central (not federated) DP w.r.t. the sensitive attribute
  only; constraints |r_{za} - r_z| <= alpha per group (their DP / EO constraints on
  soft predictions); primal step = noiseless loss gradient (x, y are public) plus
  the Lagrangian-term gradient clipped per sample to C_p with Gaussian noise;
  dual step once per epoch: multipliers mu <- max(0, mu + s (|v| - alpha)) from the
  privately released violations v (noisy group sums of sigma over the training set);
  privacy of both steps composed by an accountant (here the library's RDP).
  Adapted: (1) the dual step size s is the swept "lambda" (mu_0 = 0), which traces
  the trade-off curve as lambda does for the other methods; (2) the sign of each
  |.| in the primal gradient is taken from the last released (noisy) violation, so
  the primal step touches s only through the clipped, noised term; (3) one noise
  multiplier z for both steps, calibrated with the library so the composition
  meets (eps, delta); C_p is the config key clip_primal: their experiments use 10 (deep
  networks), the configs use 1, which suits logistic regression (10 never binds and only
  scales the noise up).
"""

from __future__ import annotations

import torch

from fedrepro.privacy import accountant
from fedrepro.privacy import steffle as accounting

from . import fermi, jobs
from .base import FairData, GridTrainer, clip_coef
from .baselines import BaselineConfig, CellMixin, config


class TranTrainer(CellMixin, GridTrainer):
    """PF-LD (central). dual_lr (G,): the swept step size s; multiplier (G,): noise multiplier z."""

    def __init__(self, data: FairData, cfg: BaselineConfig, seeds, dual_lr, multiplier):
        if data.num_silos != 1:
            raise ValueError("Tran et al. (PF-LD) is central: pass data.centralised()")
        self.dual_lr = torch.as_tensor(dual_lr, dtype=torch.float32).reshape(-1)
        G = len(self.dual_lr)
        super().__init__(data, cfg, seeds, G)
        self.z_mult = torch.as_tensor(multiplier, dtype=torch.float32).reshape(G)
        self._setup_cells(data, cfg.fairness)
        S = len(self.seeds)
        self.mu = torch.zeros(S, G, self.Z, data.k)
        self.sign = torch.zeros(S, G, self.Z, data.k)
        self.noise_shapes = {"u": (1, data.x.shape[1])}

    def step(self, t, local, weight, noise):
        cfg = self.cfg
        xb, yb, xnorm, cell = self.batch(local, self.cells_of)
        weight = weight[:, None]  # (S, 1, N, m)
        logits = torch.einsum("snmd,sgd->sgnm", xb, self.theta)
        p1 = torch.sigmoid(logits)
        resid = (p1 - yb[:, None]) * weight
        kappa = self.per_sample(self.cell_coef(self.mu * self.sign), cell)
        c = clip_coef(p1 * (1 - p1) * kappa, xnorm, cfg.clip_primal) * weight
        G = resid.shape[1]
        both = torch.einsum("sgnm,snmd->sgnd", torch.cat([resid, c], dim=1), xb) / self.m
        sigma = (self.z_mult * accounting.fair_baseline_sensitivities(cfg.clip_primal)[0] / self.m)[None, :, None, None]
        step = both[:, :G] + both[:, G:] + sigma * noise["u"][:, None]
        self.theta = self.theta - self.lr() * step[:, :, 0]
        self.remember_iterate(t)

    def dual_release(self):
        """The dual step's release: group sums of sigma over the training set and their noisy copy.

        Replacing one s_i moves sigma_i from one cell to another: the sum vector moves by
        sqrt(2) sigma_i <= sqrt(2) in L2, so the noise is z sqrt(2) (multiplier z, as the primal's)."""
        p1 = torch.sigmoid(torch.einsum("nd,sgd->sgn", self.data.x, self.theta))
        sums = torch.einsum("sgn,nc->sgc", p1, fermi.onehot(self.cells_of, self.C))
        noise = self.standard_normal((self.C,))[:, None]
        group_sums = accounting.fair_baseline_sensitivities(self.cfg.clip_primal)[1]
        return sums, sums + (self.z_mult * group_sums)[None, :, None] * noise

    def end_epoch(self):
        """Dual step: noisy group sums of sigma over the training set -> violations -> multipliers."""
        sums, noisy = self.dual_release()
        Zk = self.p_cell.shape
        rate = (noisy / self.cell_counts).view(*noisy.shape[:2], *Zk)
        stratum_rate = sums.view(*sums.shape[:2], *Zk).sum(-1, keepdim=True) / self.cell_counts.view(Zk).sum(
            -1, keepdim=True
        )  # does not depend on s
        violation = rate - stratum_rate
        self.sign = torch.sign(violation)
        self.mu = (self.mu + self.dual_lr[None, :, None, None] * (violation.abs() - self.cfg.alpha)).clamp_min(0)

    def extra_state(self):
        return {"mu": self.mu, "sign": self.sign}

    def load_extra_state(self, state):
        self.mu, self.sign = state["mu"], state["sign"]

    def result_extra(self):
        return {"mu": self.mu}


def build(spec, data, seeds, settings, epsilons):
    """PF-LD of `settings` and its multiplier, calibrated to every epsilon of the job."""
    cfg = config(spec)
    ctx = jobs.privacy_context(data, cfg)
    q = min(1.0, ctx["batch"] / ctx["n"])

    def compositions(z):  # T primal releases (q = m/n) + one dual release per epoch (q = 1)
        return [
            accountant.GaussianComposition(z, ctx["rounds"], q, "PF-LD primal"),
            accountant.GaussianComposition(z, cfg.epochs, 1.0, "PF-LD dual"),
        ]

    why = (
        "the unclipped loss gradient of the same batch sits inside the noisy primal release, which the "
        "subsampled Gaussian's dominating pair ignores: bound with the batches revealed (an upper bound "
        "by data processing, whatever the loss gradients are)"
    )
    noise = {str(e): accounting.baseline_noise(e, ctx, compositions, ctx["rounds"], q, why) for e in epsilons}
    mult = [noise[str(e)]["noise_multiplier"] for e, _ in settings]
    trainer = TranTrainer(data, cfg, seeds, [lam for _, lam in settings], mult) if settings else None
    return trainer, {**ctx, "per_eps": noise}


def run_job(job) -> None:
    """Pipeline entry of tran2021."""
    jobs.run_job(job)
