"""FedSC (Algorithms 1 and 2), FedAvg+SC and Centralized SC.

FedSC, round t (Algorithm 1, Sections 5.1-5.2, App. C):
1. The server samples J^t and sends theta^{t-1} to them.
2. On a sharing round (schedule below) each participant, or every client on the
   first sharing round (Algorithm 1's t = 1 branch, also under a DP schedule that starts
   later), runs DP-CalR on the synchronised weights and uploads R~_j; the server updates
   R~ incrementally (stale matrices kept, lines 14 and 17) and broadcasts it to every client.
3. Each participant trains E local epochs on Eq. 80 with
   R~_-j = (R~ - q_j R~_j)/(1 - q_j) held fixed and alpha_t decaying linearly
   1 -> 0.2 (App. C). Before the first share the loss is local SC (alpha = 1, as the
   authors' code); between shares the last broadcast matrix is reused.
4. theta^t = unweighted mean of the returned weights (line 23).

Config keys of `spec` (defaults: the authors' code where the paper is silent):
* `loss_scale` 2.0 (the code's 2x form of Eq. 5, for which its lr 0.03 is tuned)
* `mu` NormClip radius^2 in the loss (as the code) and in DP-CalR (2/4/5 at paper scale; null = off)
* `train.views` 2 (2V = 2 views, one positive pair: the paper's "V = 2" read as the code)
* `dpcalr.passes` 5, `dpcalr.views_per_pass` 2, `dpcalr.symmetrize_noise` false
  (Section 7.1's "V = 5" for sharing is the code's 5 passes x 2 views; eval mode, no gradients)
* `sharing.after` (fraction of T: share only for t > after*T) and `sharing.every`
  (share when t % every == 0): Table 6's "t>100" = {after: 0.5, every: 1},
  "t>150" = {0.75, 1}, "t>100, t%2=0" = {0.5, 2}; eps = inf shares every round.
  `sharing: null` is FedAvg+SC (no matrices, alpha = 1).
* `alpha.start` 1.0, `alpha.end` 0.2 (App. C; same alpha for every client)
* `privacy.sigma` (Table 6) or null to calibrate it from `privacy.eps`/`privacy.delta`
  with Prop. 6.6 for the planned number of shares, the smallest |D_j| and
  `privacy.sens_factor` (sqrt2 by default: the sensitivity Table 6's sigmas imply);
  `privacy.partial_scaling` p (sigma_partial = sigma_full * s, s in {p, sqrt_p, one}; Section 7.1 only
  says sigma changes "according to the ratio of participation", the code multiplies by p);
  `privacy.deltas`: the deltas at which every run reports its realised epsilon.
* `client_weights` uniform (q_j = 1/J as the code; `size` = |D_j|/|D| as Section 4)
* `first_round` all: every client trains in round 1 under partial participation, as the authors' code
  (its com == 0 branch); `sampled` trains J^1 only, as Algorithm 1 (line 19: "for j in J^t")

Centralized SC is this class with one client holding the union of the data and
no sharing; with J = 1 FedSC is exactly centralized SC (Eq. 4 with q_1 = 1).
"""

from __future__ import annotations

import math

import torch

from fedrepro.algorithms.fedsc.augment import augment
from fedrepro.algorithms.fedsc.base import FedSSL, local_sgd, uniform_or_size_weights
from fedrepro.algorithms.fedsc.jobs import pretrain, save_prefix, train
from fedrepro.algorithms.fedsc.loss import AlphaTerms, alpha_schedule, local_loss
from fedrepro.algorithms.fedsc.prefix import ROUNDS_KEY, shares_at
from fedrepro.algorithms.fedsc.server import CorrelationServer, client_leave_one_out
from fedrepro.privacy import fedsc as fedsc_privacy
from fedrepro.privacy.fedsc import dp_calr
from fedrepro.privacy.mechanisms import normclip


def planned_shares(num_rounds: int, sharing: dict | None) -> int:
    """T_j under full participation: the number of sharing rounds."""
    return sum(shares_at(t, num_rounds, sharing) for t in range(1, num_rounds + 1))


def noise_sigma(spec: dict, sizes: list[int], per_round: int) -> float:
    """sigma of DP-CalR for this run: Table 6's value or calibrated, then scaled for partial participation."""
    priv = spec.get("privacy") or {}
    eps = priv.get("eps", "inf")
    if eps in ("inf", math.inf):
        return 0.0
    if spec.get("mu") is None:
        raise ValueError(
            "privacy.eps is finite but mu is null: DP-CalR needs NormClip (mu > 0) to bound the sensitivity"
        )
    sigma = priv.get("sigma")
    if sigma is None:
        steps = planned_shares(int(spec["rounds"]), spec.get("sharing"))
        sigma = fedsc_privacy.sigma_for_epsilon(
            float(eps), steps, float(spec["mu"]), min(sizes), float(priv["delta"]), sens_factor(priv)
        )
    p = per_round / len(sizes)
    if p < 1.0:
        sigma = fedsc_privacy.partial_participation_sigma(float(sigma), p, priv.get("partial_scaling", "p"))
    return float(sigma)


def sens_factor(priv: dict) -> float:
    name = priv.get("sens_factor", "sqrt2")
    if name not in fedsc_privacy.SENS_FACTORS:
        raise ValueError(f"privacy.sens_factor {name!r} unknown; allowed: {', '.join(fedsc_privacy.SENS_FACTORS)}")
    return fedsc_privacy.SENS_FACTORS[name]


def realised_epsilons(shares: list[int], sizes: list[int], mu: float, sigma: float, deltas: list[float]) -> list[dict]:
    """Per client: T_j and eps under the paper formula, the sqrt(2) sensitivity and the library accountant
    (RDP, and PLD: the tight value of the composed Gaussian mechanism)."""
    rows = []
    for j, (t_j, n_j) in enumerate(zip(shares, sizes)):
        for delta in deltas:
            row = {"client": j, "T_j": int(t_j), "n_j": int(n_j), "delta": float(delta), "sigma": sigma}
            if t_j == 0:
                row.update(eps_paper=0.0, eps_sqrt2=0.0, eps_accountant=0.0, eps_pld=0.0)
            elif sigma == 0:
                row.update(eps_paper=math.inf, eps_sqrt2=math.inf, eps_accountant=math.inf, eps_pld=math.inf)
            else:
                row["eps_paper"] = fedsc_privacy.epsilon(t_j, mu, sigma, n_j, delta, fedsc_privacy.PAPER_SENS_FACTOR)
                row["eps_sqrt2"] = fedsc_privacy.epsilon(t_j, mu, sigma, n_j, delta, fedsc_privacy.RIGOROUS_SENS_FACTOR)
                mechanism = fedsc_privacy.fedsc_mechanism(sigma, mu, n_j, t_j)
                row["eps_accountant"] = mechanism.epsilon(delta)  # RDP
                row["eps_pld"] = mechanism.epsilon(delta, "pld")  # the realised tight value
            rows.append(row)
    return rows


class FedSC(FedSSL):
    """FedSC; with `sharing: null` it is FedAvg+SC. See the module docstring."""

    def __init__(self, spec: dict, data, seed: int, device="cpu"):
        super().__init__(spec, data, seed, device)
        self.work = self.build_net()
        self.mu = spec.get("mu")
        self.loss_scale = float(spec.get("loss_scale", 2.0))
        alpha = spec.get("alpha", {})
        self.alpha_start, self.alpha_end = float(alpha.get("start", 1.0)), float(alpha.get("end", 0.2))
        self.sharing = spec.get("sharing")
        if self.sharing is not None and self.num_clients < 2:
            raise ValueError("sharing correlation matrices needs at least two clients; set sharing: null")
        self.q = uniform_or_size_weights(data.sizes, spec.get("client_weights", "uniform"))
        self.dpcalr = {
            "passes": 5,
            "views_per_pass": 2,
            "symmetrize_noise": False,
            "batch_size": 1024,
            **spec.get("dpcalr", {}),
        }
        self.sigma = noise_sigma(spec, data.sizes, self.per_round) if self.sharing else 0.0
        self.server = CorrelationServer(self.q)
        self.own: dict[int, torch.Tensor] = {}  # client side: its last uploaded R~_j
        self.received: dict[int, torch.Tensor] = {}  # client side: the last broadcast R~
        self.shares = [0] * self.num_clients
        self.alpha_terms = AlphaTerms(self.device)  # the training step's alpha, set in place per client-round

    def sample(self, t: int) -> list[int]:
        # the authors' code trains every client in round 1 under partial participation too (its com == 0
        # branch selects all); Algorithm 1 trains J^1 only: first_round "sampled"
        first = self.spec.get("first_round", "all")
        if first not in ("all", "sampled"):
            raise ValueError(f"first_round {first!r} unknown; allowed: all, sampled")
        if t == 1 and first == "all":
            return list(range(self.num_clients))
        return super().sample(t)

    def sharing_now(self, t: int) -> bool:
        return shares_at(t, self.train_cfg.rounds, self.sharing)

    def sync_set(self, t, participants):
        if self.sharing_now(t) and not self.server.complete:
            return list(range(self.num_clients))  # first sharing round: every client uploads
        return participants

    def before_training(self, t, participants, synced):
        if not self.sharing_now(t):
            return {"shared": 0}
        for j, weights in synced.items():
            matrix = self.client_correlation(j, weights)
            self.own[j] = matrix
            self.server.receive(j, self.wire.send(f"client{j}", "server", "corr_matrix", matrix))
            self.shares[j] += 1
        global_matrix = self.server.broadcast()
        for j in range(self.num_clients):
            self.received[j] = self.wire.send("server", f"client{j}", "global_corr", global_matrix)
        return {"shared": 1}

    def client_correlation(self, j: int, weights: dict) -> torch.Tensor:
        """Client j runs DP-CalR (Algorithm 2) on the synchronised weights."""
        self.work.load_state_dict(weights)
        self.work.eval()
        cfg = self.dpcalr
        return dp_calr(
            self.work,
            self.data.client_x(j),
            lambda b: augment(b, self.aug_cfg, self.gen),
            self.mu,
            self.sigma,
            self.gen,
            cfg["passes"],
            cfg["views_per_pass"],
            cfg["batch_size"],
            cfg["symmetrize_noise"],
        )

    def client_update(self, j, weights, t, lr):
        self.work.load_state_dict(weights)
        r_minus = None
        if j in self.received:
            r_minus = client_leave_one_out(self.received[j], self.own[j], self.q[j])
        alpha = (
            alpha_schedule(t, self.train_cfg.rounds, self.alpha_start, self.alpha_end) if r_minus is not None else 1.0
        )

        loss = local_sgd(
            self.work,
            self.data.client_x(j),
            self.step_loss(self.alpha_terms.set(alpha), r_minus),
            self.train_cfg,
            lr,
            self.gen,
            draw=self.augmented,
        )
        return self.work.state_dict(), loss

    def step_loss(self, alpha: float | AlphaTerms, r_minus: torch.Tensor | None):
        """Eq. 80 on a batch's augmented views (drawn before the step, `FedSSL.augmented`)."""

        def batch_loss(x):
            return local_loss(normclip(self.project(self.work, x), self.mu), alpha, r_minus, self.loss_scale)

        return batch_loss

    def after_training(self, t, participants):
        alpha = alpha_schedule(t, self.train_cfg.rounds, self.alpha_start, self.alpha_end) if self.received else 1.0
        return {"alpha": alpha}

    def extra_state(self):
        return {
            "server": self.server.state_dict(),
            "own": dict(self.own),
            "received": dict(self.received),
            "shares": list(self.shares),
        }

    def load_extra_state(self, state):
        self.server.load_state_dict(state["server"])
        self.own, self.received = dict(state["own"]), dict(state["received"])
        self.shares = list(state["shares"])

    def summary(self):
        out = super().summary()
        if self.sharing is not None:
            priv = self.spec.get("privacy") or {}
            deltas = priv.get("deltas") or ([priv["delta"]] if "delta" in priv else [])
            out["privacy"] = {
                "sigma": self.sigma,
                "mu": self.mu,
                "shares": list(self.shares),
                "epsilons": realised_epsilons(
                    self.shares, self.data.sizes, float(self.mu or 0.0), self.sigma, [float(d) for d in deltas]
                ),
            }
        return out


def run_fedsc(job) -> None:
    if job.spec.get("sharing") is None:
        raise ValueError("fedsc: the spec needs a sharing schedule {after, every}")
    pretrain(job, FedSC)


def run_fedavg_sc(job) -> None:
    _check_no_sharing(job)
    pretrain(job, FedSC)


def run_prefix(job) -> None:
    """The first `prefix_rounds` rounds of FedAvg+SC, which the private runs of its setting (before their
    first sharing round), a longer prefix and the FedAvg+SC run resume from (`fedsc.prefix`)."""
    _check_no_sharing(job)
    train(job, FedSC, int(job.spec[ROUNDS_KEY]))
    save_prefix(job)


def run_centralized_sc(job) -> None:
    _check_no_sharing(job)
    pretrain(job, FedSC, centralized=True)


def _check_no_sharing(job) -> None:
    if job.spec.get("sharing") is not None:
        raise ValueError(f"{job.spec.get('method')}: sharing must be null (no correlation matrices)")
