"""FedCA (Zhang et al. 2023), standard form (the authors' FedSC code has no FedCA driver).

Besides the weights, every participant uploads a "dictionary": one L2-normalised
representation per local sample (mean of the projections of two augmented
views under its trained local model), kept as an EMA (`fedca.dict_ema` 0.5)
across rounds. The server keeps the latest dictionary of every client and sends
each participant the dictionaries of all other clients, which serve as extra
negatives in a SimCLR NT-Xent loss (temperature `fedca.tau` 0.1): positives are
the two local views, negatives the other local views and the global dictionary.
The alignment module is omitted: it needs public data, which no FedSC setting has.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrepro.algorithms.fedsc.base import FedSSL, local_sgd
from fedrepro.algorithms.fedsc.fedx import nt_xent
from fedrepro.algorithms.fedsc.jobs import pretrain


class FedCA(FedSSL):
    def __init__(self, spec, data, seed, device="cpu"):
        super().__init__(spec, data, seed, device)
        self.work = self.build_net()
        cfg = spec.get("fedca", {})
        self.tau, self.dict_ema = float(cfg.get("tau", 0.1)), float(cfg.get("dict_ema", 0.5))
        self.own: dict[int, torch.Tensor] = {}  # client side: its dictionary
        self.dictionaries: dict[int, torch.Tensor] = {}  # server side: latest upload per client
        self.negatives: dict[int, torch.Tensor] = {}  # client side: the dictionary it received

    def before_training(self, t, participants, synced):
        for j in participants:
            others = [d for k, d in sorted(self.dictionaries.items()) if k != j]
            if others:
                self.negatives[j] = self.wire.send("server", f"client{j}", "dictionary", torch.cat(others))
        return None

    def client_update(self, j, weights, t, lr):
        self.work.load_state_dict(weights)
        negatives = self.negatives.get(j)

        def batch_loss(x):  # x: the two augmented views, drawn before the step (FedSSL.augmented)
            z = self.project(self.work, x, 2)
            return nt_xent(z[0], z[1], self.tau, negatives)

        x_local = self.data.client_x(j)
        loss = local_sgd(
            self.work, x_local, batch_loss, self.train_cfg, lr, self.gen, draw=lambda batch: self.augmented(batch, 2)
        )
        self.own[j] = self.local_dictionary(j, x_local)
        self.dictionaries[j] = self.wire.send(f"client{j}", "server", "dictionary", self.own[j])
        return self.work.state_dict(), loss

    @torch.no_grad()
    def local_dictionary(self, j: int, x_local: torch.Tensor) -> torch.Tensor:
        self.work.eval()
        reps = []
        for start in range(0, x_local.shape[0], self.train_cfg.batch_size):
            batch = x_local[start : start + self.train_cfg.batch_size]
            z = self.views(self.work, batch, 2).mean(0)
            reps.append(F.normalize(z, dim=1))
        new = torch.cat(reps)
        if j in self.own:
            new = F.normalize(self.dict_ema * self.own[j] + (1 - self.dict_ema) * new, dim=1)
        return new

    def extra_state(self):
        return {"own": self.own, "dictionaries": self.dictionaries, "negatives": self.negatives}

    def load_extra_state(self, state):
        self.own, self.dictionaries, self.negatives = state["own"], state["dictionaries"], state["negatives"]


def run_fedca(job) -> None:
    pretrain(job, FedCA)
