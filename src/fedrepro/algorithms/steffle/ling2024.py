"""The ling2024 baselines of the SteFFLe figures (Section 5).

FedFDPTrainer (method "ling2024") -- Ling et al. (2024), "FedFDP: Fairness-Aware Federated
Learning with Differential Privacy", as published (the authors' code, one1Mouth/FedFDP:
clientfdp.py, dp_optimizer.py, privacy.py, serverfdp.py). The Ling et al. curve.
  Per round each client takes one DP-SGD step on a Poisson batch: the per-sample loss
  gradient g_i is reweighted by w_i = 1 + lambda (loss_i - L) with L the server's global
  loss, w_i g_i is clipped to C (dp_norm), the batch sum gets N(0, (C z)^2) and is divided
  by the (expected) batch size; the client then releases the mean of its per-sample losses
  under the updated model, each clipped to B_t (the client's last released loss, first
  clip_norm_for_loss), with N(0, (B_t z)^2) on the sum; the server averages the models and
  sets L = sum_j (n_j/n) loss_j. It never reads the sensitive attribute: its fairness is
  loss parity across clients. Its DP is record-level (add/remove of a whole record), both
  releases of one batch with multiplier z, accounted jointly (RDP / PLD, q = m/n_j), and z
  is calibrated to the target epsilon. Adaptations: the authors' clip of a negatively
  weighted gradient (w_i < 0) takes C g_i/||g_i||; here w_i g_i keeps its sign (w_i < 0 needs
  loss_i < L - 1/lambda, which does not occur at lambda <= 2 with L < 0.5); the released
  loss mean divides by the expected batch size m, as every sum here does.

GroupGapTrainer (method "ling2024_groupgap") -- the earlier adaptation of FedFDP to group
fairness, kept as a named variant (FedFair + DP).
  Follows the paper: federated; each client runs DP-SGD with record-level DP
  (the whole record is private, per-sample clipping + Gaussian noise, noise
  calibrated per client to (eps, delta)); the fairness-aware clipping clips the
  loss part (C1) and the fairness part (C2) of each per-sample gradient separately;
  clients also upload noised statistics the fairness term needs (FedFDP uploads
  clipped, noised loss values); FedFair's penalty is lambda times the squared
  deviation of a unit's statistic from the average.
  Adapted: FedFair penalises the deviation of each CLIENT's loss from the mean
  loss (performance fairness); the SteFFLe paper compares it on demographic parity
  and equalized odds, so the penalty here is lambda * sum_{z,a} (r_{za} - r_z)^2
  (squared deviation of each sensitive group's positive rate from the stratum
  rate), with the rates estimated by the server from the noised per-cell sums of
  sigma the silos upload each round (used in the next round). One local step
  per round (the uploaded model update is then exactly the noisy gradient step),
  giving the same round and batch budget as SteFFLe. Group sums have replace-one
  sensitivity sqrt(2), the clipped gradient mean 2 (C1 + C2) / m.
"""

from __future__ import annotations

import torch

from fedrepro.fl.transport import Wire
from fedrepro.privacy import accountant
from fedrepro.privacy import steffle as accounting

from . import fermi, jobs
from .base import FairData, GridTrainer, clip_coef
from .baselines import BaselineConfig, CellMixin, config


class FedFDPTrainer(GridTrainer):
    """FedFDP (Ling et al. 2024) as published. lam (G,): lambda of the loss reweighting;
    multiplier (G,): noise multiplier z of both releases."""

    def __init__(self, data: FairData, cfg: BaselineConfig, seeds, lam, multiplier, wire: Wire | None = None):
        self.lam = torch.as_tensor(lam, dtype=torch.float32).reshape(-1)
        G, N = len(self.lam), data.num_silos
        super().__init__(data, cfg, seeds, G)
        self.z_mult = torch.as_tensor(multiplier, dtype=torch.float32).reshape(G)
        self.wire = wire if wire is not None else Wire(record=False)
        S = len(self.seeds)
        self.global_loss = torch.zeros(S, G)  # server.global_loss starts at 0
        self.loss_clip = torch.full((S, G, N), float(cfg.clip_norm_for_loss))
        sizes = torch.tensor(data.silo_sizes, dtype=torch.float32)
        self.client_weight = sizes / sizes.sum()  # uploaded_weights: n_j / n
        self.noise_shapes = {"u": (N, data.x.shape[1]), "l": (N,)}

    def step(self, t, local, weight, noise):
        cfg, N = self.cfg, self.data.num_silos
        self.wire.round = t
        for j in range(N):
            self.wire.send("server", f"silo{j}", "model", {"theta": self.theta, "global_loss": self.global_loss})
        xb, yb, xnorm, _ = self.batch(local)
        weight = weight[:, None]  # (S, 1, N, m)
        logits = torch.einsum("snmd,sgd->sgnm", xb, self.theta)
        y = yb[:, None]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y.expand_as(logits), reduction="none")
        w = 1.0 + self.lam[None, :, None, None] * (loss - self.global_loss[..., None, None])
        # per-sample gradient g_i = (p_i - y_i) x_i; w_i g_i clipped to C (done on the scalar coefficient)
        c = clip_coef(w * (torch.sigmoid(logits) - y), xnorm, cfg.dp_norm) * weight
        summed = torch.einsum("sgnm,snmd->sgnd", c, xb)
        sigma = (self.z_mult * cfg.dp_norm)[None, :, None, None]
        update = (summed + sigma * noise["u"][:, None]) / self.m
        new_theta = self.theta[:, :, None] - self.lr() * update  # each client's model after its step
        # released loss: per-sample losses of the updated model on the same batch, clipped to B_t
        after = torch.nn.functional.binary_cross_entropy_with_logits(
            torch.einsum("snmd,sgnd->sgnm", xb, new_theta), y.expand_as(logits), reduction="none"
        )
        clipped = torch.minimum(after, self.loss_clip[..., None]) * weight
        loss_stat = (clipped.sum(-1) + self.z_mult[None, :, None] * self.loss_clip * noise["l"][:, None]) / self.m
        received = [
            (
                self.wire.send(f"silo{j}", "server", "model_update", update[:, :, j]),
                self.wire.send(f"silo{j}", "server", "loss_stat", loss_stat[:, :, j]),
            )
            for j in range(N)
        ]
        self.loss_clip = loss_stat.clamp_min(0.0)  # client.last_loss = max(0, released)
        cw = self.client_weight
        self.theta = self.theta - self.lr() * torch.einsum("n,nsgd->sgd", cw, torch.stack([r[0] for r in received]))
        self.global_loss = torch.einsum("n,nsg->sg", cw, torch.stack([r[1] for r in received]))
        self.remember_iterate(t)

    def extra_state(self):
        return {"global_loss": self.global_loss, "loss_clip": self.loss_clip}

    def load_extra_state(self, state):
        self.global_loss, self.loss_clip = state["global_loss"], state["loss_clip"]


class GroupGapTrainer(CellMixin, GridTrainer):
    """FedFDP adapted to group fairness. lam (G,): FedFair weight; multiplier (G,): noise multiplier z."""

    def __init__(self, data: FairData, cfg: BaselineConfig, seeds, lam, multiplier, wire: Wire | None = None):
        self.lam = torch.as_tensor(lam, dtype=torch.float32).reshape(-1)
        G = len(self.lam)
        super().__init__(data, cfg, seeds, G)
        self.z_mult = torch.as_tensor(multiplier, dtype=torch.float32).reshape(G)
        self._setup_cells(data, cfg.fairness)
        self.wire = wire if wire is not None else Wire(record=False)
        self.rates = torch.zeros(len(self.seeds), G, self.Z, data.k)  # server's estimate of r_{za}
        N = data.num_silos
        self.noise_shapes = {"u": (N, data.x.shape[1]), "r": (N, self.C)}

    def step(self, t, local, weight, noise):
        cfg, N = self.cfg, self.data.num_silos
        self.wire.round = t
        for j in range(N):
            self.wire.send("server", f"silo{j}", "model", {"theta": self.theta, "rates": self.rates})
        xb, yb, xnorm, cell = self.batch(local, self.cells_of)
        logits = torch.einsum("snmd,sgd->sgnm", xb, self.theta)
        p1 = torch.sigmoid(logits)
        loss_c = clip_coef(p1 - yb[:, None], xnorm, cfg.clip_loss)
        stratum_rate = (self.rates * self.p_cell).sum(-1, keepdim=True) / self.p_stratum
        kappa = self.per_sample(self.cell_coef(2.0 * (self.rates - stratum_rate)), cell)
        fair_c = clip_coef(self.lam[None, :, None, None] * p1 * (1 - p1) * kappa, xnorm, cfg.clip_fair)
        summed = torch.einsum("sgnm,snmd->sgnd", (loss_c + fair_c) * weight[:, None], xb)
        primal, group_sums = accounting.fair_baseline_sensitivities(cfg.clip_loss + cfg.clip_fair)
        sigma = (self.z_mult * primal / self.m)[None, :, None, None]
        update = summed / self.m + sigma * noise["u"][:, None]
        C1 = fermi.onehot(cell, self.C) * weight[..., None]
        stats = (
            torch.einsum("sgnm,snmc->sgnc", p1, C1)
            + (self.z_mult * group_sums)[None, :, None, None] * noise["r"][:, None]
        )
        received = [
            (
                self.wire.send(f"silo{j}", "server", "model_update", update[:, :, j]),
                self.wire.send(f"silo{j}", "server", "fair_stats", stats[:, :, j]),
            )
            for j in range(N)
        ]
        self.theta = self.theta - self.lr() * torch.stack([r[0] for r in received]).mean(0)
        expected = N * self.m * self.p_cell.flatten()  # public expected cell counts
        total = torch.stack([r[1] for r in received]).sum(0)
        self.rates = (total / expected).view_as(self.rates)
        self.remember_iterate(t)

    def extra_state(self):
        return {"rates": self.rates}

    def load_extra_state(self, state):
        self.rates = state["rates"]


def build(spec, data, seeds, settings, epsilons):
    """FedFDP (ling2024) or the group-gap variant (ling2024_groupgap): each silo releases two
    Gaussian statistics of one Poisson batch per round with the same multiplier z (FedFDP: the
    reweighted clipped gradient, sensitivity C, and the clipped loss sum, sensitivity B_t, both
    record-level add/remove; the variant: gradient and group sums, replace-one)."""
    cfg = config(spec)
    ctx = jobs.privacy_context(data, cfg)
    q = min(1.0, ctx["batch"] / min(ctx["silo_sizes"]))  # smallest silo: conservative for all

    def compositions(z):  # per silo and round: gradient and group statistics of ONE batch, both with
        # multiplier z, released together: one Gaussian with multiplier z / sqrt(2) (joint_multiplier)
        joint = accounting.joint_multiplier([z, z], [1.0, 1.0])
        return [accountant.GaussianComposition(joint, ctx["rounds"], q, "FedFDP gradient and group statistics")]

    noise = {str(e): accounting.baseline_noise(e, ctx, compositions, 2 * ctx["rounds"], q) for e in epsilons}
    mult = [noise[str(e)]["noise_multiplier"] for e, _ in settings]
    cls = FedFDPTrainer if spec["method"] == "ling2024" else GroupGapTrainer
    trainer = cls(data, cfg, seeds, [lam for _, lam in settings], mult) if settings else None
    return trainer, {**ctx, "per_eps": noise}


def run_job(job) -> None:
    """Pipeline entry of ling2024 and ling2024_groupgap."""
    jobs.run_job(job)
