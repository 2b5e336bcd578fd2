"""SteFFLe, Algorithm 1 (noisy ISRL-DP federated SGDA on the FERMI min-max objective).

One vectorised program trains S seeds x G settings (lambda, eps, ...) of binary
logistic regression at once. Per round t (paper Algorithm 1):

* line 4: the server sends (theta_t, W_t) to every silo;
* line 7: silo j's NON-SENSITIVE division computes the loss gradient g_{t,j} (no
  noise: x and y are not private) and hands F(x_i), grad F(x_i) and the batch
  indices to its SENSITIVE division;
* line 8: the sensitive division forms grad_theta psi_i = sum_u a_iu grad F_u(x_i)
  (per-sample clipped to C = L_theta, App E.2.1), h_theta = batch mean + N(0, sigma_theta^2),
  h_w = batch mean of grad_W psi + N(0, sigma_w^2) (one noise draw per W^{(z)} entry);
* line 9: the silo sends g, h_theta, h_w to the server through `transport.Wire`;
* line 11: theta <- theta - eta_theta/N sum_j (g_j + lambda h_theta_j),
  W <- Pi_W(W + lambda eta_w / N sum_j h_w_j), Pi_W = Frobenius ball of radius D.

Only these three messages per silo ever reach the server (a test asserts it). In
`protocol=True` mode the division-to-division message (F, grad F, indices) also
goes through the wire and the sensitive division really computes from it; the
fast mode computes the same quantities in factorised form (grad F_1 = sigma(1-sigma) x,
so per-sample clipping only needs |c_i| ||x_i||), which a test checks is identical.

Choices the paper leaves open (config keys in brackets):
* [compat_refcode=False] clip grad_theta psi_i (without lambda) to C, take the
  mean, add noise, apply lambda at the server (Algorithm 1 lines 8 and 11). compat_refcode=True
  follows the authors' code instead: clip lambda*grad psi_i per sample, SUM over the batch, add
  noise (not x lambda); W <- W + eta_w mean_j(lambda mean grad_W psi + V); and
  their 1 x 1 W (fermi.w_mask), with their per-silo group numbering (`refcode_groups`).
* grad_W is not clipped: its sensitivity is bounded by F in [0,1] and ||W|| <= D.
* [eta_w, w_step] the paper's eta_w = 1e-5 (App. E.2.1) is kept as a config value; experiments
  may set larger, and w_step="capped" keeps eta_w * lambda <= 1/2 so the W ascent cannot flip
  sign (`w_step_sizes`); each evaluation logs W's norm and sign-flip rate (`diagnostics`).
* [radius] D is a Frobenius-ball radius (the set W of Algorithm 1 line 11); the same D enters
  sigma_theta (Theorem 3.3).
* [sampling="poisson"] Poisson batches with every sum divided by the expected size m
  (base.BatchSchedule), so no batch is under-noised; shuffled fixed-size batches and Algorithm 2's
  replacement as options, and "shuffle_keep_last" (the authors' code: every sample once per epoch,
  the last batch short, sums divided by the real batch size, `GridTrainer.batch_mean`). The clear-text g of line 7 is computed on the same batch B_t, so the
  server learns B_t and the Poisson amplification of the paper's accounting does not hold against
  it (privacy.steffle section 4: every record also carries the bound with the batches revealed).
* [loss_batch="same"] Algorithm 1 as written. "independent" is our sound variant: g comes from a
  second Poisson batch drawn independently of B_t (its own generator stream), so g reveals nothing
  about B_t and the paper's accounting holds; g stays an unbiased estimate of the loss gradient.
* [rng="streams"] one generator per seed and purpose; "refcode" draws init, batches and noise from
  one torch stream per seed as the authors' code does (base.RefcodeStream; needs shuffle_keep_last):
  seed s then gives their torch.manual_seed(s) run. Their stream draws noise only on private runs,
  so `build` trains a job's private and non-private cells apart (base.SettingsConcat).
* [iterate] "final" (default: the paper's figures plot trained models, not a random draw),
  "random" (Algorithm 1 line 13, theta_t with t uniform in {1..T}) or "refcode_avg" (metrics
  averaged over the evaluations at epochs >= 20, the authors' protocol).
* Equalized odds (eq. 12): one W per label value with P_{S|Y=y}; each gets its own noise and
  projection.
* Unequal silo sizes (Algorithm 3 leaves n mod N points with their block): each silo
  averages over its real batch; its sigma may use its own n_j (the caller decides).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from fedrepro.fl.transport import Wire
from fedrepro.privacy import steffle as accounting

from . import fermi, jobs
from .base import FairData, GridTrainer, ScheduleConfig, SettingsConcat, clip_coef, seed_generator, strata

log = logging.getLogger(__name__)

W_STEPS = ("capped", "fixed")


def w_step_sizes(eta_w: float, lam: torch.Tensor, rule: str) -> torch.Tensor:
    """The W ascent step per setting, i.e. the factor of h_w in W <- W + eta lambda h_w (paper mode).

    h_w's W-dependent part is -2 W diag(p_hat) (p_hat_u = batch mean of F_u <= 1), so one
    step multiplies W[r, u] by 1 - 2 eta_w lambda p_hat_u. With eta_w lambda > 1/2 that factor
    can go negative: W flips sign every round and sits at the projection radius instead of
    tracking the maximiser W*(theta). "capped" keeps eta_w lambda <= 1/2, so the factor stays
    in [0, 1) for every p_hat (a contraction towards W*, no flips); "fixed" is eta_w as given.
    """
    eta = torch.full_like(lam, float(eta_w))
    if rule == "capped":
        eta = torch.where(lam > 0, torch.minimum(eta, 0.5 / lam.clamp_min(1e-30)), eta)
    return eta


@dataclass
class SGDAConfig(ScheduleConfig):
    eta_w: float = 1e-5
    w_step: str = "capped"  # capped: eta_w(lambda) = min(eta_w, 1/(2 lambda)) (stable, see below) | fixed
    clip: float = 1.0  # L_theta: per-sample clip of the sensitive theta-gradient
    radius: float = 1.0  # D: Frobenius radius of the W ball
    compat_refcode: bool = False
    noise: str = (
        "theorem"  # theorem: Theorem 3.3's sigmas | calibrated: scaled to meet eps (privacy.steffle.steffle_noise)
    )
    loss_batch: str = "same"  # same: Algorithm 1 line 7 | independent: g from its own batch (B_t stays secret)

    positive = ("eta_theta", "clip", "radius")

    def __post_init__(self):
        super().__post_init__()
        if self.eta_w < 0:
            raise ValueError(f"eta_w must be >= 0, got {self.eta_w}")
        if self.noise not in ("theorem", "calibrated"):
            raise ValueError(f"noise must be one of ('theorem', 'calibrated'), got {self.noise!r}")
        if self.loss_batch not in accounting.LOSS_BATCHES:
            raise ValueError(f"loss_batch must be one of {accounting.LOSS_BATCHES}, got {self.loss_batch!r}")
        if self.w_step not in W_STEPS:
            raise ValueError(f"w_step must be one of {W_STEPS}, got {self.w_step!r}")


def refcode_groups(data: FairData) -> tuple[torch.Tensor, torch.Tensor]:
    """The authors' group indices (compat_refcode): (per-silo index, index of the normaliser P_S).

    Their loader (dataloader_fed.py, TabularDataset) numbers a silo's sensitive values in
    order of first appearance in THAT silo's rows, and P_S in order of first appearance in
    the whole training set; their 1 x 1 W then reads "column 0" of the silo's one-hot. So
    group 0 is the value of the silo's first row (in training-set order: silos hold sorted
    indices and the arrays keep the df.sample order), normalised by the global frequency of
    the training set's first value. With a binary attribute the other value is group 1.
    Returns (s_silo, s_global) as 0/1 tensors: 0 = that first value.
    """
    if data.k != 2:
        raise ValueError(f"compat_refcode's group indexing needs a binary sensitive attribute, got k = {data.k}")
    s_silo = torch.empty_like(data.s)
    for idx in data.silos:
        first = data.s[idx.min()]
        s_silo[idx] = (data.s[idx] != first).long()
    return s_silo, (data.s != data.s[0]).long()


class SteffleTrainer(GridTrainer):
    """Algorithm 1 for a grid of models; `run()` trains and evaluates.

    lam (G,), sigma_theta (G, N), sigma_w (G, N): per-setting fairness weight and the
    per-silo noise std of h_theta and h_w (0 = non-private).
    """

    real_batch_means = True

    def __init__(
        self,
        data: FairData,
        cfg: SGDAConfig,
        seeds: list[int],
        lam,
        sigma_theta,
        sigma_w,
        wire: Wire | None = None,
        protocol: bool = False,
    ):
        self.lam = torch.as_tensor(lam, dtype=torch.float32).reshape(-1)
        G, N = len(self.lam), data.num_silos
        super().__init__(data, cfg, seeds, G)
        self.sigma_theta = torch.as_tensor(sigma_theta, dtype=torch.float32).reshape(G, N)
        self.sigma_w = torch.as_tensor(sigma_w, dtype=torch.float32).reshape(G, N)
        self.wire = wire if wire is not None else Wire(record=False)
        self.protocol = protocol
        self.Z, z = strata(data, cfg.fairness)
        s_silo, s_global = refcode_groups(data) if cfg.compat_refcode else (data.s, data.s)
        self.cells_of = z * data.k + s_silo  # (stratum, group) cell per sample
        self.inv_sqrt_p = fermi.strata_inv_sqrt_p(s_global, z, data.k, self.Z).float()
        self.mask = fermi.w_mask(data.k, data.l, cfg.compat_refcode)
        self.W = torch.zeros(len(self.seeds), G, self.Z, data.k, data.l)
        self.noise_shapes = {"u": (N, data.x.shape[1]), "V": (N, self.Z, data.k, data.l)}
        self.sensitive_needed = bool((self.lam != 0).any()) or (
            cfg.compat_refcode and bool((self.sigma_theta != 0).any())
        )
        self.eta_w = w_step_sizes(cfg.eta_w, self.lam, cfg.w_step)  # (G,)
        self.w_flips = torch.zeros(len(self.seeds), G)  # rounds where W changed sign
        self.w_rounds = 0
        if cfg.loss_batch == "independent":
            self.gens["loss_batches"] = [seed_generator(s, "loss_batches") for s in self.seeds]
        if cfg.rng == "refcode":
            self.draws_noise()  # mixed settings fail here, before training

    def draws_noise(self) -> bool:
        """Whether the settings draw noise (sigma_theta > 0); rng refcode needs all or none (their
        stream draws noise only on private runs, so the two kinds of cells see different batches)."""
        private = (self.sigma_theta != 0).any(dim=1)
        if self.cfg.rng == "refcode" and private.any() and not private.all():
            raise ValueError(
                "rng 'refcode': a trainer's settings must be all private or all non-private (build splits)"
            )
        return bool(private.any())

    def round(self, t: int) -> dict:
        """One epoch; with loss_batch="independent" first the epoch's batches of g (own stream)."""
        if self.cfg.loss_batch == "independent":
            batches = [self.schedule.epoch(g) for g in self.gens["loss_batches"]]
            width = max(b[0].shape[-1] for b in batches)
            self.loss_batches = [
                torch.stack([torch.nn.functional.pad(b[i], (0, width - b[i].shape[-1])) for b in batches])
                for i in (0, 1)
            ]  # local indices and weights, (S, N, R, width)
        return super().round(t)

    def _loss_grad(self, t, resid, xb):
        """g of line 7: on the sensitive batch (paper) or on this round's independent batch."""
        if self.cfg.loss_batch == "same":
            return self.batch_mean(torch.einsum("sgnm,snmd->sgnd", resid, xb), self._weight)
        r = t - self.epoch * self.schedule.rounds_per_epoch
        local, weight = (b[:, :, r] for b in self.loss_batches)
        xl, yl, _, _ = self.batch(local)
        p1 = torch.sigmoid(torch.einsum("snmd,sgd->sgnm", xl, self.theta))
        return self.batch_mean(torch.einsum("sgnm,snmd->sgnd", (p1 - yl[:, None]) * weight[:, None], xl), weight)

    def _sensitive(self, logits, p1, xb, xnorm, cell, weight, V, messages=None):
        """Line 8 without the theta-noise: clipped per-sample coefficients c (grad psi_i = c_i x_i;
        per-sample vectors in protocol mode) and the noisy h_w (S, G, N, Z, k, l)."""
        cfg, (Z, k, l) = self.cfg, self.W.shape[2:]
        S_, N, m = cell.shape
        C1 = fermi.onehot(cell, Z * k) * weight[..., None]  # (S, N, m, Zk); pads -> 0
        silo_weight, weight = weight, weight[:, None]  # (S, 1, N, m) over settings
        scale = self.lam.view(1, -1, 1, 1) if cfg.compat_refcode else torch.ones(1, 1, 1, 1)
        table = fermi.coef_table(self.W, self.inv_sqrt_p)  # (S, G, Z, k, l)
        if messages is None:  # factorised: grad psi_i = sigma(1-sigma)(a_i1 - a_i0) x_i
            delta = (table[..., 1] - table[..., 0]).reshape(S_, -1, Z * k)
            delta_i = torch.gather(delta, 2, cell.reshape(S_, 1, -1).expand(-1, delta.shape[1], -1))
            c = clip_coef(p1 * (1.0 - p1) * delta_i.view_as(p1) * scale, xnorm, cfg.clip) * weight
        else:  # from the (F, grad F) message: grad psi_i = sum_u a_iu grad F_u, clipped to C
            S1, Z1 = fermi.onehot(cell % k, k)[:, None], fermi.onehot(cell // k, Z)[:, None]
            a = fermi.coef_a(S1, Z1, self.W[:, :, None], self.inv_sqrt_p)  # (S, G, N, m, l)
            grads = torch.einsum("sgnml,sgnmld->sgnmd", a, messages["grad_F"]) * scale[..., None]
            grads = grads * (cfg.clip / grads.norm(dim=-1, keepdim=True).clamp_min(1e-30)).clamp(max=1.0)
            c = grads * weight[..., None]  # (S, G, N, m, D)
        F1 = torch.einsum("sgnm,snmc->sgnc", p1, C1)  # cell sums of F_1
        Fcell = torch.stack([C1.sum(2)[:, None] - F1, F1], dim=-1).view(S_, -1, N, Z, k, l)
        h_w = self.batch_mean(fermi.grad_w_from_cells(self.W[:, :, None], Fcell, self.inv_sqrt_p), silo_weight)
        if cfg.compat_refcode:
            h_w = h_w * self.lam[None, :, None, None, None, None]
        h_w = (h_w + self.sigma_w[None, :, :, None, None, None] * V[:, None]) * self.mask
        return c, h_w

    def _division_message(self, logits, xb, local, j):
        """Line 7 message of silo j's non-sensitive division: F, grad F (per sample) and indices."""
        p1 = torch.sigmoid(logits[:, :, j])
        dF1 = (p1 * (1 - p1))[..., None] * xb[:, None, j]  # (S, G, m, D)
        payload = {
            "F": fermi.logistic_probs(logits[:, :, j]),
            "grad_F": torch.stack([-dF1, dF1], dim=-2),
            "index": local[:, j],
        }
        return self.wire.send(f"silo{j}/nonsensitive", f"silo{j}/sensitive", "outputs", payload)

    def step(self, t: int, local, weight, noise):
        N = self.data.num_silos
        self.wire.round = t
        for j in range(N):
            self.wire.send("server", f"silo{j}", "model", {"theta": self.theta, "W": self.W})
        self._weight = weight
        xb, yb, xnorm, cell = self.batch(local, self.cells_of)
        logits = torch.einsum("snmd,sgd->sgnm", xb, self.theta)  # line 7 (non-sensitive)
        p1 = torch.sigmoid(logits)
        resid = (p1 - yb[:, None]) * weight[:, None]
        G = resid.shape[1]
        if not self.sensitive_needed:
            g = self._loss_grad(t, resid, xb)
            h_theta, h_w = torch.zeros_like(g), torch.zeros(g.shape[:3] + self.W.shape[2:])
        elif self.protocol:
            msgs = [self._division_message(logits, xb, local, j) for j in range(N)]
            c, h_w = self._sensitive(
                logits,
                p1,
                xb,
                xnorm,
                cell,
                weight,
                noise["V"],
                {"grad_F": torch.stack([m["grad_F"] for m in msgs], dim=2)},
            )
            g = self._loss_grad(t, resid, xb)
            h_theta = self._finish_h_theta(c.sum(-2), noise["u"])
        else:  # one contraction against x for the loss residuals and the sensitive coefficients
            c, h_w = self._sensitive(logits, p1, xb, xnorm, cell, weight, noise["V"])
            both = torch.einsum("sgnm,snmd->sgnd", torch.cat([resid, c], dim=1), xb)
            g = self.batch_mean(both[:, :G], weight) if self.cfg.loss_batch == "same" else self._loss_grad(t, resid, xb)
            h_theta = self._finish_h_theta(both[:, G:], noise["u"])
        received = [
            (
                self.wire.send(f"silo{j}", "server", "loss_grad", g[:, :, j]),
                self.wire.send(f"silo{j}", "server", "sens_grad_theta", h_theta[:, :, j]),
                self.wire.send(f"silo{j}", "server", "sens_grad_w", h_w[:, :, j]),
            )
            for j in range(N)
        ]
        self._server_update(t, received)

    def _finish_h_theta(self, summed, u):
        """Batch mean (paper; `batch_mean`) or sum (compat_refcode) of the clipped grad psi_i,
        plus N(0, sigma_theta^2)."""
        h = summed if self.cfg.compat_refcode else self.batch_mean(summed, self._weight)
        return h + self.sigma_theta[None, :, :, None] * u[:, None]

    def _server_update(self, t, received):
        """Line 11 on what the server received, then remember theta_t if t is the random output index."""
        cfg = self.cfg
        g, h_theta, h_w = (torch.stack([r[i] for r in received]).mean(0) for i in range(3))
        eta, lam = self.lr(), self.lam[None, :, None]
        eta_w = self.eta_w[None, :, None, None, None]
        before = self.W
        if cfg.compat_refcode:
            self.theta = self.theta - eta * (g + h_theta)
            self.W = fermi.project_frobenius(self.W + eta_w * h_w, cfg.radius)
        else:
            self.theta = self.theta - eta * (g + lam * h_theta)
            self.W = fermi.project_frobenius(self.W + eta_w * lam[..., None, None] * h_w, cfg.radius)
        flipped = (before * self.W < 0).flatten(2).any(-1)  # (S, G): an entry changed sign
        self.w_flips += flipped.float()
        self.w_rounds += 1
        self.remember_iterate(t)

    def diagnostics(self) -> dict:
        """W's trajectory: its Frobenius norm (all strata) and the share of rounds since the last
        evaluation in which an entry of W changed sign (an unstable ascent flips every round)."""
        out = {
            "w_norm": self.W.flatten(2).norm(dim=-1).numpy().astype(np.float64),
            "w_flip_rate": (self.w_flips / max(self.w_rounds, 1)).numpy().astype(np.float64),
            "w_radius_share": (self.W.flatten(2).norm(dim=-1) >= 0.999 * self.cfg.radius).float().numpy(),
        }
        self.w_flips.zero_()
        self.w_rounds = 0
        return out

    def extra_state(self) -> dict:
        return {"W": self.W, "w_flips": self.w_flips, "w_rounds": self.w_rounds}

    def load_extra_state(self, state: dict) -> None:
        self.W = state["W"]
        self.w_flips, self.w_rounds = state.get("w_flips", self.w_flips), state.get("w_rounds", 0)

    def result_extra(self) -> dict:
        return {"W": self.W}


def config(spec: dict) -> SGDAConfig:
    return SGDAConfig(fairness=spec["fairness"], **spec["train"])


def build(spec, data, seeds, settings, epsilons):
    """The SGDA trainer of `settings` and Theorem 3.3's noise for every epsilon of the job."""
    cfg = config(spec)
    ctx = jobs.privacy_context(data, cfg)
    lambdas = sorted({lam for _, lam in jobs.grid(spec)[0]})
    noise = {
        str(e): accounting.steffle_noise(
            e,
            ctx["delta"],
            ctx["rounds"],
            ctx["silo_sizes"],
            ctx["rho"],
            cfg.clip,
            cfg.radius,
            ctx["batch"],
            cfg.compat_refcode,
            cfg.sampling,
            lambdas,
            cfg.noise,
            cfg.loss_batch,
            ctx["rho_w"],
            ctx["batch_sizes"],
        )
        for e in epsilons
    }
    for e, record in noise.items():
        if record["precondition_messages"]:
            log.warning("eps=%s: Theorem 3.3 preconditions broken: %s", e, "; ".join(record["precondition_messages"]))

    def trainer(part):
        lam = [lam for _, lam in part]
        sig_t = [noise[str(e)]["sigma_theta"] for e, _ in part]
        sig_w = [noise[str(e)]["sigma_w"] for e, _ in part]
        return SteffleTrainer(data, cfg, seeds, lam, sig_t, sig_w)

    if not settings:
        return None, {**ctx, "per_eps": noise}
    private = [i for i, (e, _) in enumerate(settings) if np.any(noise[str(e)]["sigma_theta"])]
    if cfg.rng == "refcode" and 0 < len(private) < len(settings):  # the two kinds draw different streams
        public = [i for i in range(len(settings)) if i not in private]
        parts = [(idx, trainer([settings[i] for i in idx])) for idx in (private, public)]
        return SettingsConcat(parts), {**ctx, "per_eps": noise}
    return trainer(settings), {**ctx, "per_eps": noise}


def run_job(job) -> None:
    """Pipeline entry of the methods trained by Algorithm 1: steffle, steffle_nonprivate,
    dp_fermi, fermi, fedavg and erm (`fedrepro.algorithms.steffle.METHODS`)."""
    jobs.run_job(job)
