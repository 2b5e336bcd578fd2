"""ZOO-VFL (Zhang et al., CIKM 2021) as DPZV's ZO baseline (Section 7).

The paper says only that it "substitutes the first order optimization by ZO
optimization"; the details follow the VFL-CZOFO repository's "ZO" framework:
ZO on the client's and the server's parameters, one-sided differences
[L(w + lambda u) - L(w)]/lambda with u uniform on the sqrt(d)-sphere (the code's
unit u times phi = d), and a deep copy of the model for the perturbed forward
pass (no MeZO memory trick).

One server round with client m: the client sends (ids, h, h') with h from w_m
and h' from a perturbed copy, both clipped and noised (the pair as one release
by default, `zoo_pair_release`). The server computes the batch-mean losses L
and L' with the stale table for the other clients, stores h, updates its head
(`server_update`: the same one-sided ZO on a deep copy, as in ZOO-VFL, or SGD,
so that all four methods of a comparison can share one server update) and
returns the scalar L' - L (no clipping, no scalar noise). The client steps
w_m -= eta (L' - L)/lambda u. `zo_momentum` applies to the ZO updates (default
0.9, Table 3).

Noise on the pair (`zoo_noise`): ZOO-VFL's estimator needs L(h') - L(h) at the
scale of lambda. With independent draws on h and h' (`independent`) the
difference is noise of size sigma_h / lambda (x1000): the client walks at random
(weights grew from 0.5 to 1e10 in 100 rounds). `shared` (default) adds ONE draw
z to both, so the server reads L(h' + z) - L(h + z), a finite difference at a
noisy point. Privacy under `shared`: the message is a function of (h + z, h' - h),
and h' - h (of order lambda) crosses without noise, so the Gaussian accounting
covers h only; the privacy record says so.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from fedrepro.algorithms.dpzv.base import (
    SERVER_UPDATES,
    VFLAlgorithm,
    choice,
    embedding_input_scale,
    noisy_embedding,
    sgd,
)
from fedrepro.algorithms.dpzv.zo import (
    Direction,
    ZOUpdater,
    add_launches,
    as_float64,
    bucket_sizes,
    check_direction,
    direction_from,
    norm_launches,
    step_launches,
)
from fedrepro.privacy import dpzv as privacy
from fedrepro.privacy.mechanisms import clip_by_norm, gaussian_noise

NOISE_MODES = ("shared", "independent")


def client_direction_launches(numels: list[int], buffers: int, kind: str, momentum: float) -> int:
    """Kernel launches of a client's direction in one round besides its two forwards (`fedrepro.plan`):
    the twin's refresh (one foreach copy of the parameters, one of the buffers if the model has any), its
    direction's norm and perturbation, then client_apply's direction (its norm again), the coefficient (a
    float64 copy of the loss difference, divided by lambda) and step."""
    b = len(bucket_sizes(numels))
    return 1 + (buffers > 0) + 2 * norm_launches(b, kind) + add_launches(b, kind) + 2 + step_launches(b, momentum)


class ZOOVFL(VFLAlgorithm):
    method = "zoo_vfl"
    up_kind, down_kind = "embedding_pair", "loss_difference"

    def __init__(self, data, settings, seed, device="cpu"):
        super().__init__(data, settings, seed, device)
        x = settings.extra
        self.zo_lambda = float(x.get("zo_lambda", 1e-3))
        self.direction = check_direction(x.get("direction", "sphere"))
        self.embed_clip = privacy.parse_clip(x["embed_clip"])
        zo_momentum = float(x.get("zo_momentum", 0.9))
        for client in self.clients:
            client.updater = ZOUpdater(client.params, settings.lr_client, zo_momentum)
        self.server_update = choice("server_update", x["server_update"], SERVER_UPDATES)
        if self.server_update == "zo":
            self.server.updater = ZOUpdater(self.server.params, settings.lr_server, zo_momentum)
        else:
            self.server.optimizer = sgd(self.server.params, settings.lr_server, settings.momentum)
        self.noise_mode = choice("zoo_noise", x.get("zoo_noise", "shared"), NOISE_MODES)
        if self.noise_mode == "shared":  # one release of h; h' - h is not covered (module docstring)
            self.noise = self.embedding_noise(1, "joint")
            if self.noise["sigma"] > 0:
                self.noise["note"] = "shared noise on (h, h'): eps covers h; h' - h crosses without noise"
        else:
            self.noise = self.embedding_noise(2, x.get("zoo_pair_release", "joint"))
        self.server.input_scale = embedding_input_scale(self.embed_clip, self.noise["sigma"], settings.embed_dim)
        self.server_u = None  # the round's server direction (a seed or its draws), drawn before the round
        self.use_stacks(per_client=2)

    def eval_embedding(self, h: torch.Tensor) -> torch.Tensor:
        return clip_by_norm(h, self.embed_clip, dim=1) if self.noise["sigma"] > 0 else h

    @torch.no_grad()
    def _perturbed_copy(self, owner, model: torch.nn.Module, source) -> torch.nn.Module:
        """A copy of `model` moved to w + lambda u, u of `source` (a seed or its bucket draws) (the reference's
        deep copy per round). The copy is made once per party (`owner.twin`) and refreshed each round by
        foreach copies of the parameters and buffers: the same values as a fresh deep copy, one kernel launch
        instead of one per tensor."""
        twin = getattr(owner, "twin", None)
        if twin is None:
            twin = owner.twin = copy.deepcopy(model)
        else:
            torch._foreach_copy_(list(twin.parameters()), list(model.parameters()))
            buffers = list(model.buffers())
            if buffers:
                torch._foreach_copy_(list(twin.buffers()), buffers)
            twin.train(model.training)
        direction_from([p for p in twin.parameters() if p.requires_grad], source, self.direction).add_(self.zo_lambda)
        return twin

    # one round as a device program: as DPZV's (`DPZV.exchange`), the round's randomness is drawn on the host
    # first (the seeds of the client's and the server's directions, the embedding noise), then
    # `exchange_drawn` runs with no host sync and no host randomness (torch.compile traces it whole).
    def round_program(self, m: int, ids: np.ndarray) -> dict:
        client = self.clients[m]
        seed = client.new_seed()
        noises = self.noise_draws(client, (len(ids), self.cfg.embed_dim))
        server_u = self.server.new_seed() if self.server_update == "zo" else None
        return self.exchange_drawn(m, self.ids_tensor(ids), seed, noises, server_u)

    def exchange_drawn(self, m: int, ids: torch.Tensor, client_u, noises: tuple, server_u) -> dict:
        """One server round with client m on batch `ids`, its direction `client_u` and the noise of its two
        embeddings `noises` (`noise_draws`), the server's direction `server_u` (ZO server; a seed or draws)."""
        self.server_u = server_u
        payload, private = self.query(self.clients[m], ids, client_u, noises)
        return self.serve(m, payload, private)

    def noise_draws(self, client, shape: tuple) -> tuple:
        """The noise of h and h' from the client's generator, in the order `message` adds it: one draw for both
        (`shared`) or one each; none at sigma = 0."""
        sigma = self.noise["sigma"]
        if sigma == 0.0:
            return None, None
        dtype, device = client.params[0].dtype, client.params[0].device
        first = gaussian_noise(shape, sigma, client.noise, dtype, device)
        return first, first if self.noise_mode == "shared" else gaussian_noise(
            shape, sigma, client.noise, dtype, device
        )

    # client side
    def client_query(self, client, ids: np.ndarray):
        return self.query(client, self.ids_tensor(ids), client.new_seed())

    @torch.no_grad()
    def query(self, client, ids: torch.Tensor, source, noises: tuple | None = None):
        x = client.x[ids]
        h = self.client_embed(client.model, x)
        h_pert = self.client_embed(self._perturbed_copy(client, client.model, source), x)
        return self.message(client, ids, h, h_pert, noises), source

    @torch.no_grad()
    def stacked_queries(self, turns) -> list[tuple[dict, int]]:
        """`client_query` of each turn (distinct clients): w in slot k, the twin's w + lambda u (the same copy
        and in-place perturbation) in slot K + k, one forward of the 2K slots, then each client's noise."""
        out = [None] * len(turns)
        for stack, positions in self.stacks.split(turns):
            count = len(positions)
            seeds = []
            for slot, i in enumerate(positions):
                client = self.clients[turns[i][0]]
                seeds.append(client.new_seed())
                stack.snapshot(client.model, slot)
                stack.snapshot(client.model, count + slot)
                Direction(stack.trainable(count + slot), seeds[-1], self.direction).add_(self.zo_lambda)
            x = self.stacked_inputs(turns, positions)
            h = self.client_embed(stack.forward, torch.cat([x, x]))
            for slot, (i, seed) in enumerate(zip(positions, seeds)):
                m, ids = turns[i]
                out[i] = self.message(self.clients[m], self.ids_tensor(ids), h[slot], h[count + slot]), seed
        return out

    def message(self, client, ids: torch.Tensor, h: torch.Tensor, h_pert: torch.Tensor, noises=None) -> dict:
        """The pair the client sends: both embeddings clipped and noised from the client's own generator
        (`noise_draws`, unless drawn before the round)."""
        noises = self.noise_draws(client, h.shape) if noises is None else noises
        sigma = self.noise["sigma"]
        return {
            "ids": ids,
            "h": noisy_embedding(h, self.embed_clip, sigma, client.noise, noises[0]),
            "h_perturbed": noisy_embedding(h_pert, self.embed_clip, sigma, client.noise, noises[1]),
        }

    def client_apply(self, client, source, loss_diff: float | torch.Tensor) -> None:
        u = direction_from(client.params, source, self.direction)
        client.updater.step(u, as_float64(loss_diff) / self.zo_lambda)

    # server side
    @torch.no_grad()
    def server_answer(self, m: int, msg: dict) -> tuple[torch.Tensor, dict]:
        ids = msg["ids"]
        loss = self.server.losses(ids, m, msg["h"]).mean()
        loss_pert = self.server.losses(ids, m, msg["h_perturbed"]).mean()
        self.server.table[ids, m] = msg["h"]
        if self.server_update == "sgd":
            with torch.enable_grad():
                self.server.optimizer.zero_grad()
                self.server.losses(ids).mean().backward()
            self.server.optimizer.step()
            return loss_pert - loss, {"train_loss": loss}  # read once per evaluation block
        source, self.server_u = (self.server.new_seed() if self.server_u is None else self.server_u), None
        twin = self._perturbed_copy(self.server, self.server.head, source)
        base = self.server.losses(ids).mean()
        head_pert = self.server.losses(ids, head=twin).mean()
        self.server.updater.step(
            direction_from(self.server.params, source, self.direction), as_float64(head_pert - base) / self.zo_lambda
        )
        return loss_pert - loss, {"train_loss": loss}

    def client_reply(self, client, source, diff: torch.Tensor) -> None:
        self.client_apply(client, source, diff)

    def privacy(self) -> dict:
        return {
            **self.embedding_privacy(self.noise, clear_difference=self.noise_mode == "shared"),
            "embed_clip": self.embed_clip,
            "mechanism": "clipped embedding pair plus Gaussian vector noise (local, per coordinate)",
        }


ALGORITHM = ZOOVFL


def run_job(job) -> None:
    from fedrepro.algorithms.dpzv.jobs import run_vfl_job

    run_vfl_job(job, ALGORITHM)
