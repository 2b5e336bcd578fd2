"""The BYOL family: FedAvg+BYOL, FedU and FedEMA (spec §3.5 items 2-4).

Locally every method is BYOL: online = backbone + projector + predictor,
target = EMA (beta = `byol.ema`, 0.99) of the online backbone + projector,
updated after every step; loss = symmetric 2 - 2 cos(p_online(view a), z_target(view b)),
summed over both directions and averaged over the batch. The server averages the
online model, predictor included (FedAvg, equal weights). The methods differ only
in how a client starts its local round from the downloaded global model:

* FedAvg+BYOL: online <- global; target <- online (reset at every sync).
* FedU (DECISION 18, the official FedSC code's rule): clients keep their local
  online and target networks; with d = sqrt(sum over conv weights ||W_g - W_l||^2)
  divided by the number of conv layers, the local model (and its target) is
  replaced by the global one when 1 - min(1, d) > `fedu.threshold` (0.2),
  otherwise the local model is kept. A client's first round starts from global.
* FedEMA (DECISION 18, the original paper's convention, Zhuang et al. 2022):
  online <- m * local + (1 - m) * global with m = min(1, `fedema.lambda` * d)
  on parameters (buffers stay local); the target stays the client's own. The
  official FedSC code puts 1 - m on the local model instead; `fedema.convention:
  code` selects that.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrepro.algorithms.fedsc.augment import augment
from fedrepro.algorithms.fedsc.common import FedSSL, local_sgd

CONVENTIONS = ("original", "code")


def byol_loss(p: torch.Tensor, z_target: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of 2 - 2 cos(p, z) (z is a constant)."""
    return (2 - 2 * F.cosine_similarity(p, z_target.detach(), dim=-1)).mean()


def conv_divergence(global_state: dict, local_state: dict) -> float:
    """sqrt(sum_conv ||W_g - W_l||^2) / #conv layers (the official code's d); all weight
    matrices when the backbone has no conv layer."""
    keys = [k for k, v in global_state.items() if k.startswith("backbone.") and v.dim() == 4]
    if not keys:
        keys = [k for k, v in global_state.items() if k.startswith("backbone.") and v.dim() == 2]
    total = sum(float(((global_state[k] - local_state[k]).float() ** 2).sum()) for k in keys)
    return total**0.5 / len(keys)


class FedBYOL(FedSSL):
    uses_predictor = True
    keeps_local = False  # FedU and FedEMA keep each client's online and target networks

    def __init__(self, spec, data, seed, device="cpu"):
        super().__init__(spec, data, seed, device)
        self.work = self.build_net(predictor=True)
        self.target = self.build_net()
        self.beta = float(spec.get("byol", {}).get("ema", 0.99))
        self.local: dict[int, dict] = {}  # client side: {"online": state, "target": state}

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

        def batch_loss(batch):
            x = torch.cat([augment(batch, self.aug_cfg, self.gen) for _ in range(2)])
            p = self.work.predictor(self.forward(self.work, x)).view(2, batch.shape[0], -1)
            with torch.no_grad():
                zt = self.forward(self.target, x).view(2, batch.shape[0], -1)
            return byol_loss(p[0], zt[1]) + byol_loss(p[1], zt[0])

        loss = local_sgd(self.work, self.data.client_x(j), batch_loss, self.train_cfg, lr, self.gen,
                         after_step=self._ema_step)
        if self.keeps_local:
            self.local[j] = {"online": {k: v.detach().clone() for k, v in self.work.state_dict().items()},
                             "target": {k: v.detach().clone() for k, v in self.target.state_dict().items()}}
        return self.work.state_dict(), loss

    def extra_state(self):
        return {"local": self.local}

    def load_extra_state(self, state):
        self.local = state["local"]


class FedU(FedBYOL):
    keeps_local = True

    def __init__(self, spec, data, seed, device="cpu"):
        super().__init__(spec, data, seed, device)
        self.threshold = float(spec.get("fedu", {}).get("threshold", 0.2))
        self.replaced = 0

    def start_local(self, j, weights):
        if j not in self.local:
            return super().start_local(j, weights)
        d = conv_divergence(weights, self.local[j]["online"])
        if 1 - min(1.0, d) > self.threshold:
            self.replaced += 1
            return super().start_local(j, weights)
        self.work.load_state_dict(self.local[j]["online"])
        self.target.load_state_dict(self.local[j]["target"])

    def summary(self):
        return {**super().summary(), "fedu_replaced": self.replaced}


class FedEMA(FedBYOL):
    keeps_local = True

    def __init__(self, spec, data, seed, device="cpu"):
        super().__init__(spec, data, seed, device)
        cfg = spec.get("fedema", {})
        self.lam = float(cfg.get("lambda", 0.2))
        self.convention = cfg.get("convention", "original")
        if self.convention not in CONVENTIONS:
            raise ValueError(f"fedema.convention {self.convention!r} unknown; allowed: {', '.join(CONVENTIONS)}")

    def local_weight(self, d: float) -> float:
        m = min(1.0, self.lam * d)
        return m if self.convention == "original" else 1.0 - m

    def start_local(self, j, weights):
        if j not in self.local:
            return super().start_local(j, weights)
        local = self.local[j]["online"]
        m = self.local_weight(conv_divergence(weights, local))
        params = {name for name, _ in self.work.named_parameters()}
        mixed = {k: (m * local[k] + (1 - m) * weights[k]) if k in params else local[k] for k in weights}
        self.work.load_state_dict(mixed)
        self.target.load_state_dict(self.local[j]["target"])
