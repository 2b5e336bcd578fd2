"""ZOO-VFL (Zhang et al., CIKM 2021) as DPZV's ZO baseline (spec 3.4, 6 item 12).

Follows the VFL-CZOFO repository's "ZO" framework: ZO on the client's and the
server's parameters, one-sided differences [L(w + lambda u) - L(w)]/lambda with
u uniform on the sqrt(d)-sphere (the code's unit u times phi = d), and a deep
copy of the model for the perturbed forward pass (no MeZO memory trick).

One server round with client m: the client sends (ids, h, h') with h from w_m
and h' from a perturbed copy, both clipped and noised (the pair as one release
by default, `zoo_pair_release`). The server computes the batch-mean losses L
and L' with the stale table for the other clients, stores h, updates its head
by the same one-sided ZO on a deep copy, and returns the scalar L' - L (no
clipping, no scalar noise). The client steps w_m -= eta (L' - L)/lambda u.
`zo_momentum` applies to both ZO updates (default 0.9, Table 3).
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from fedrepro.algorithms.dpzv import privacy
from fedrepro.algorithms.dpzv.vfl import VFLAlgorithm, noisy_embedding
from fedrepro.algorithms.dpzv.zo import Direction, ZOUpdater, check_direction


class ZOOVFL(VFLAlgorithm):
    method = "zoo_vfl"

    def __init__(self, data, settings, seed, device="cpu"):
        super().__init__(data, settings, seed, device)
        x = settings.extra
        self.zo_lambda = float(x.get("zo_lambda", 1e-3))
        self.direction = check_direction(x.get("direction", "sphere"))
        self.embed_clip = privacy.parse_clip(x.get("embed_clip", 10.0))
        zo_momentum = float(x.get("zo_momentum", 0.9))
        for client in self.clients:
            client.updater = ZOUpdater(client.params, settings.lr_client, zo_momentum)
        self.server.updater = ZOUpdater(self.server.params, settings.lr_server, zo_momentum)
        self.noise = privacy.embedding_noise(
            settings.eps, settings.delta, self.embed_clip, self.total_rounds, data.num_train, settings.batch_size,
            2, x.get("zoo_pair_release", "joint"), settings.library_accountant)

    def _perturbed_copy(self, model: torch.nn.Module, seed: int) -> torch.nn.Module:
        """A deep copy of `model` moved to w + lambda u (the reference's memory pattern)."""
        twin = copy.deepcopy(model)
        Direction([p for p in twin.parameters() if p.requires_grad], seed, self.direction).add_(self.zo_lambda)
        return twin

    # client side
    @torch.no_grad()
    def client_query(self, client, ids: np.ndarray):
        seed = client.new_seed()
        x = client.x[self.ids_tensor(ids)]
        h = client.model(x)
        twin = self._perturbed_copy(client.model, seed)
        h_pert = twin(x)
        del twin
        sigma = self.noise["sigma"]
        payload = {"ids": self.ids_tensor(ids),
                   "h": noisy_embedding(h, self.embed_clip, sigma, client.noise),
                   "h_perturbed": noisy_embedding(h_pert, self.embed_clip, sigma, client.noise)}
        return payload, seed

    def client_apply(self, client, seed: int, loss_diff: float) -> None:
        u = Direction(client.params, seed, self.direction)
        client.updater.step(u, loss_diff / self.zo_lambda)

    # server side
    @torch.no_grad()
    def server_answer(self, m: int, msg: dict) -> tuple[torch.Tensor, dict]:
        ids = msg["ids"]
        loss = self.server.losses(ids, m, msg["h"]).mean()
        loss_pert = self.server.losses(ids, m, msg["h_perturbed"]).mean()
        self.server.table[ids, m] = msg["h"]
        seed = self.server.new_seed()
        twin = self._perturbed_copy(self.server.head, seed)
        base = self.server.losses(ids).mean()
        head_pert = self.server.losses(ids, head=twin).mean()
        del twin
        self.server.updater.step(Direction(self.server.params, seed, self.direction),
                                 float(head_pert - base) / self.zo_lambda)
        return loss_pert - loss, {"train_loss": float(loss)}

    def exchange(self, m: int, ids: np.ndarray) -> dict:
        client = self.clients[m]
        payload, seed = self.client_query(client, ids)
        msg = self.wire.send(client.name, "server", "embedding_pair", payload)
        answer, stats = self.server_answer(m, msg)
        diff = self.wire.send("server", client.name, "loss_difference", answer)
        self.client_apply(client, seed, float(diff))
        return stats

    def privacy(self) -> dict:
        return {**self.noise, "embed_clip": self.embed_clip,
                "mechanism": "clipped embedding pair plus Gaussian vector noise (local, per coordinate)"}


def run_job(job) -> None:
    from fedrepro.algorithms.dpzv.jobs import run_vfl_job

    run_vfl_job(job, ZOOVFL)
