"""The BYOL family: FedAvg+BYOL, FedU and FedEMA (FedSC paper, Section 7.1 baselines).

Locally every method is BYOL: online = backbone + projector + predictor,
target = EMA (beta = `byol.ema`, 0.99) of the online backbone + projector,
updated after every step; loss = symmetric 2 - 2 cos(p_online(view a), z_target(view b)),
summed over both directions and averaged over the batch. The server averages the
online model, predictor included (FedAvg, equal weights). The methods differ only
in how a client starts its local round from the downloaded global model:

* FedAvg+BYOL: online <- global; target <- online (reset at every sync).
* FedU (Zhuang et al., ICCV 2021, §3.3 "divergence-aware predictor update"),
  `fedu.rule: dapu` (default): the online encoder (backbone + projector) is
  always replaced by the global one, the target stays the client's own (EMA of
  its online encoder), and the predictor is replaced by the global predictor
  only when the divergence d of the online encoder is below `fedu.threshold`
  (mu = 0.4). d is measured where the authors' code measures it (EasyFL
  applications/fedssl/client.py, `_calculate_divergence`, which mu is calibrated to):
  at the end of the client's local training, between the online encoder it
  started the round from (the global one) and the one it trained, as the mean
  over the backbone's conv layers of ||W_start - W_trained||_2 (`encoder_divergence`);
  the client's next download uses it.
  `fedu.rule: keep_or_replace` is the FedSC authors' code instead: with
  d = sqrt(sum over conv weights ||W_g - W_l||^2) / #conv layers the whole local
  model (and its target) is replaced by the global one when 1 - min(1, d) >
  `fedu.threshold`, otherwise the local model is kept whole.
* FedEMA (Zhuang et al., ICLR 2022, §4 Eq. 4-5), `fedema.convention: paper`
  (default): the online encoder and the predictor become
  mu * local + (1 - mu) * global with mu = min(lambda_k ||W_g - W_k||, 1), the
  divergence taken at download between the new global online encoder and the
  client's own, reduced as the authors' code reduces it: the mean over the
  backbone's conv layers of the per-layer L2 distance (`encoder_divergence`; the
  code takes it at the end of local training, between the encoder the round
  started from and the trained one, which is the paper's pair only when that
  start is the global model). Buffers and the target stay the client's own. lambda_k
  is the paper's autoscaler, lambda_k = tau / ||W_g - W_k|| at the client's first
  EMA update (so mu = tau then; `fedema.tau` = 0.7: the value of the FedEMA authors'
  published run command, "Run FedEMA with auto scaler tau = 0.7" in
  weimingwill/EasyFL applications/fedssl/README.md; their argparse default is 0.8),
  or a fixed `fedema.lambda`. The paper evaluates the autoscaler
  with the global model right after the client's first round; we evaluate it at the
  client's next download, which is the same model under full participation.
  `fedema.convention: fedsc_code` is the FedSC authors' code: d divided by the
  number of conv layers, 1 - mu on the local model, lambda fixed (0.2 there).
  Each round's metrics carry the mean mu over participants ("fedema_mu", 0 for a first
  participation); the summary lists every divergence and mu.

Every conv layer of the backbone counts in `encoder_divergence`; EasyFL selects its layers by
the name "conv", which leaves out its ResNet's 1x1 shortcut convolutions.

The published FedU and FedEMA rows of the FedSC paper come from the FedSC authors'
implementations (`keep_or_replace`, `fedsc_code`); each run's summary names the rule that ran
("rule"), and the tables say it.

A client's first participation starts from the global model (it has no local
model yet) in every method.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrepro.algorithms.fedsc.base import FedSSL, local_sgd
from fedrepro.algorithms.fedsc.jobs import pretrain

FEDU_RULES = ("dapu", "keep_or_replace")
FEDEMA_CONVENTIONS = ("paper", "fedsc_code")
RULE_NOTES = {  # what a table says about the rule that produced a row
    ("fedu", "dapu"): "FedU: its paper's divergence-aware predictor update (encoder divergence as its authors' code)",
    ("fedu", "keep_or_replace"): "FedU: the FedSC authors' whole-model keep-or-replace rule",
    ("fedema", "paper"): "FedEMA: its paper's EMA with the autoscaler (divergence reduced as its authors' code)",
    ("fedema", "fedsc_code"): "FedEMA: the FedSC authors' convention (1 - mu on the local model, fixed lambda)",
}
PREDICTOR = ("predictor.",)


def byol_loss(p: torch.Tensor, z_target: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of 2 - 2 cos(p, z) (z is a constant)."""
    return (2 - 2 * F.cosine_similarity(p, z_target.detach(), dim=-1)).mean()


def param_distance(global_state: dict, local_state: dict, prefixes: tuple[str, ...], names: set[str]) -> float:
    """||W_g - W_l||_2 over the parameters `names` whose key starts with one of `prefixes` (buffers excluded).

    Summed in the state dict's order: a set's order changes with PYTHONHASHSEED, and so would the last bit."""
    keys = [k for k in global_state if k in names and k.startswith(prefixes)]
    if not keys:
        raise ValueError(f"no parameters under {prefixes}")
    return sum(float(((global_state[k] - local_state[k]).double() ** 2).sum()) for k in keys) ** 0.5


def conv_keys(state: dict) -> list[str]:
    """The backbone's conv weights (4-D), or its weight matrices when it has no conv layer."""
    keys = [k for k, v in state.items() if k.startswith("backbone.") and v.dim() == 4]
    return keys or [k for k, v in state.items() if k.startswith("backbone.") and v.dim() == 2]


def conv_divergence(global_state: dict, local_state: dict) -> float:
    """sqrt(sum_conv ||W_g - W_l||^2) / #conv layers (the FedSC authors' code's d)."""
    keys = conv_keys(global_state)
    total = sum(float(((global_state[k] - local_state[k]).float() ** 2).sum()) for k in keys)
    return total**0.5 / len(keys)


def encoder_divergence(state_a: dict, state_b: dict) -> float:
    """mean over conv layers of ||W_a - W_b||_2 (the FedU/FedEMA authors' `_calculate_divergence`)."""
    keys = conv_keys(state_a)
    return sum(float(torch.linalg.vector_norm(state_a[k].double() - state_b[k].double())) for k in keys) / len(keys)


class FedBYOL(FedSSL):
    uses_predictor = True
    keeps_local = False  # FedU and FedEMA keep each client's online and target networks

    def __init__(self, spec, data, seed, device="cpu"):
        super().__init__(spec, data, seed, device)
        self.work = self.build_net(predictor=True)
        self.target = self.build_net()
        self.beta = float(spec.get("byol", {}).get("ema", 0.99))
        self.local: dict[int, dict] = {}  # client side: {"online": state, "target": state}
        self.param_names = {name for name, _ in self.work.named_parameters()}
        self.stats: list[float] = []  # this round: each participant's download statistic (see `record`)
        self.divergences: list[list] = []  # [round, client, divergence, statistic] of every returning client

    def start_local(self, j: int, weights: dict) -> None:
        """FedAvg+BYOL: start from the global online model, target reset to it."""
        self.work.load_state_dict(weights)
        self._reset_target()

    def _reset_target(self) -> None:
        online = self.work.state_dict()
        self.target.load_state_dict({k: v for k, v in online.items() if not k.startswith("predictor.")})

    @torch.no_grad()
    def _ema_step(self) -> None:
        for t_p, o_p in zip(self.target.parameters(), self._online_params()):
            t_p.mul_(self.beta).add_(o_p.detach(), alpha=1 - self.beta)

    def _online_params(self):
        return list(self.work.backbone.parameters()) + list(self.work.projector.parameters())

    def client_update(self, j, weights, t, lr):
        self.start_local(j, weights)
        self.target.train()

        def batch_loss(x):  # x: the two augmented views, drawn before the step (FedSSL.augmented)
            p = self.work.predictor(self.project(self.work, x, 2))
            with torch.no_grad():
                zt = self.project(self.target, x, 2)
            return byol_loss(p[0], zt[1]) + byol_loss(p[1], zt[0])

        loss = local_sgd(
            self.work,
            self.data.client_x(j),
            batch_loss,
            self.train_cfg,
            lr,
            self.gen,
            after_step=self._ema_step,
            draw=lambda batch: self.augmented(batch, 2),
        )
        if self.keeps_local:
            self.local[j] = {
                "online": {k: v.detach().clone() for k, v in self.work.state_dict().items()},
                "target": {k: v.detach().clone() for k, v in self.target.state_dict().items()},
            }
        return self.work.state_dict(), loss

    stat_name = ""  # FedU: fedu_global (1 = took the global predictor); FedEMA: fedema_mu (weight on local)

    def record(self, j: int, value: float, divergence: float | None) -> None:
        """One participant's download: its statistic (also for a first participation, which takes the
        global model: fedu_global 1, fedema_mu 0) and, for a returning client, its divergence."""
        self.stats.append(float(value))
        if divergence is not None:
            self.divergences.append([self.wire.round, j, float(divergence), float(value)])

    def after_training(self, t, participants):
        """The round's mean statistic over participants and how many of them had a local model."""
        if not self.stat_name:
            return None
        returning = sum(1 for row in self.divergences if row[0] == t)
        out = {self.stat_name: sum(self.stats) / len(self.stats), f"{self.stat_name}_returning": returning}
        self.stats = []
        return out

    def extra_state(self):
        return {"local": self.local, "divergences": [list(r) for r in self.divergences]}

    def load_extra_state(self, state):
        self.local = state["local"]
        self.divergences = [list(r) for r in state.get("divergences", [])]

    def divergence_summary(self) -> dict:
        """Divergence and statistic over every returning download (the issue's before/after numbers)."""
        if not self.divergences:
            return {"downloads": 0}
        d = [r[2] for r in self.divergences]
        v = [r[3] for r in self.divergences]
        return {
            "downloads": len(d),
            "divergence_min": min(d),
            "divergence_mean": sum(d) / len(d),
            "divergence_max": max(d),
            f"{self.stat_name}_min": min(v),
            f"{self.stat_name}_mean": sum(v) / len(v),
            f"{self.stat_name}_max": max(v),
            "log": self.divergences,
        }


class FedU(FedBYOL):
    """FedU; `fedu.rule` dapu (the FedU paper) or keep_or_replace (the FedSC authors' code)."""

    keeps_local = True

    def __init__(self, spec, data, seed, device="cpu"):
        super().__init__(spec, data, seed, device)
        cfg = spec.get("fedu", {})
        self.rule = cfg.get("rule", "dapu")
        if self.rule not in FEDU_RULES:
            raise ValueError(f"fedu.rule {self.rule!r} unknown; allowed: {', '.join(FEDU_RULES)}")
        self.threshold = float(cfg.get("threshold", 0.4 if self.rule == "dapu" else 0.2))
        self.replaced = 0  # downloads that took the global predictor (dapu) / the whole global model

    stat_name = "fedu_global"

    def start_local(self, j, weights):
        if j not in self.local:
            self.record(j, 1.0, None)
            return super().start_local(j, weights)
        local = self.local[j]
        if self.rule == "keep_or_replace":
            d = conv_divergence(weights, local["online"])
            take_global = 1 - min(1.0, d) > self.threshold
            self.record(j, float(take_global), d)
            if take_global:
                self.replaced += 1
                return super().start_local(j, weights)
            self.work.load_state_dict(local["online"])
            self.target.load_state_dict(local["target"])
            return
        # dapu: online encoder <- global; predictor <- global only if the divergence its last round
        # measured is below mu; own target
        d = local["divergence"]
        take_global = d < self.threshold
        self.record(j, float(take_global), d)
        self.replaced += int(take_global)
        state = {
            k: (local["online"][k] if k.startswith(PREDICTOR) and not take_global else v) for k, v in weights.items()
        }
        self.work.load_state_dict(state)
        self.target.load_state_dict(local["target"])

    def client_update(self, j, weights, t, lr):
        state, loss = super().client_update(j, weights, t, lr)
        if self.rule == "dapu":  # the encoder it started from is the global one (start_local)
            self.local[j]["divergence"] = encoder_divergence(weights, state)
        return state, loss

    def extra_state(self):
        return {**super().extra_state(), "replaced": self.replaced}

    def load_extra_state(self, state):
        super().load_extra_state(state)
        self.replaced = int(state.get("replaced", 0))

    def summary(self):
        return {
            **super().summary(),
            "fedu_rule": self.rule,
            "rule": RULE_NOTES["fedu", self.rule],
            "fedu_replaced": self.replaced,
            "fedu_downloads": self.divergence_summary(),
        }


class FedEMA(FedBYOL):
    """FedEMA; `fedema.convention` paper (default) or fedsc_code. See the module docstring."""

    keeps_local = True

    def __init__(self, spec, data, seed, device="cpu"):
        super().__init__(spec, data, seed, device)
        cfg = spec.get("fedema", {})
        self.convention = cfg.get("convention", "paper")
        if self.convention not in FEDEMA_CONVENTIONS:
            raise ValueError(f"fedema.convention {self.convention!r} unknown; allowed: {', '.join(FEDEMA_CONVENTIONS)}")
        self.fixed_lambda = cfg.get("lambda")
        if self.convention == "fedsc_code" and self.fixed_lambda is None:
            raise ValueError("fedema.convention fedsc_code needs a fixed fedema.lambda (0.2 in the FedSC code)")
        self.tau = float(cfg.get("tau", 0.7))
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"fedema.tau must lie in (0, 1], got {self.tau}")
        self.lambdas: dict[int, float] = {}  # client side: the autoscaler's lambda_k, set once

    def divergence(self, weights: dict, local: dict) -> float:
        if self.convention == "fedsc_code":
            return conv_divergence(weights, local)
        return encoder_divergence(weights, local)

    def local_weight(self, j: int, d: float) -> float:
        """mu: the weight on the client's local model (FedEMA Eq. 4; 1 - that in the FedSC code)."""
        if self.fixed_lambda is not None:
            lam = float(self.fixed_lambda)
        else:  # autoscaler: lambda_k = tau / divergence at the client's first EMA update
            lam = self.lambdas.setdefault(j, self.tau / d if d > 0 else 0.0)
        mu = min(1.0, lam * d)
        return mu if self.convention == "paper" else 1.0 - mu

    stat_name = "fedema_mu"

    def start_local(self, j, weights):
        if j not in self.local:
            self.record(j, 0.0, None)
            return super().start_local(j, weights)
        local = self.local[j]["online"]
        d = self.divergence(weights, local)
        m = self.local_weight(j, d)
        self.record(j, m, d)
        mixed = {k: (m * local[k] + (1 - m) * weights[k]) if k in self.param_names else local[k] for k in weights}
        self.work.load_state_dict(mixed)
        self.target.load_state_dict(self.local[j]["target"])

    def extra_state(self):
        return {**super().extra_state(), "lambdas": dict(self.lambdas)}

    def load_extra_state(self, state):
        super().load_extra_state(state)
        self.lambdas = {int(k): float(v) for k, v in state.get("lambdas", {}).items()}

    def summary(self):
        return {
            **super().summary(),
            "fedema_convention": self.convention,
            "rule": RULE_NOTES["fedema", self.convention],
            "fedema_lambdas": dict(self.lambdas),
            "fedema_downloads": self.divergence_summary(),
        }


def run_fedavg_byol(job) -> None:
    pretrain(job, FedBYOL)


def run_fedu(job) -> None:
    pretrain(job, FedU)


def run_fedema(job) -> None:
    pretrain(job, FedEMA)
