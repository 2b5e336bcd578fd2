"""VAFL (Chen et al. 2020) as DPZV's first-order baseline (Section 7).

One server round with client m: the client computes h = h(w_m; x_ids) with
autograd, clips each row to C_h and adds N(0, sigma_h^2) per coordinate (local
Gaussian DP, none at eps = inf) and sends (ids, h~). The server writes h~ into
its table, backpropagates the batch-mean cross-entropy, takes an SGD step on its
head and returns dL/dh_m (a B x e matrix, not privatised, as in the paper). The
client backpropagates that through its own model and takes an SGD step.
Both sides use SGD with Table 3's momentum 0.9 (the paper does not say which optimiser the
momentum belongs to; every first-order part uses it).
"""

from __future__ import annotations

import numpy as np
import torch

from fedrepro.algorithms.dpzv.base import VFLAlgorithm, embedding_input_scale, noisy_embedding, sgd
from fedrepro.fl.optim import backward_into
from fedrepro.privacy import dpzv as privacy
from fedrepro.privacy.mechanisms import clip_by_norm, gaussian_noise


class EmbeddingBaseline(VFLAlgorithm):
    """Shared by VAFL and VFL-CZOFO: the client sends one noisy embedding, gets a B x e gradient."""

    embeddings_per_round = 1
    up_kind, down_kind = "embedding", "embedding_grad"

    def __init__(self, data, settings, seed, device="cpu"):
        super().__init__(data, settings, seed, device)
        x = settings.extra
        self.embed_clip = privacy.parse_clip(x["embed_clip"])
        for client in self.clients:
            client.optimizer = sgd(client.params, settings.lr_client, settings.momentum)
        self.server.optimizer = sgd(self.server.params, settings.lr_server, settings.momentum)
        self.noise = self.embedding_noise(self.embeddings_per_round, x.get("zoo_pair_release", "joint"))
        self.server.input_scale = embedding_input_scale(self.embed_clip, self.noise["sigma"], settings.embed_dim)
        self.server_drawn = None  # the round's server draws, drawn before the round (`server_draws`)
        self.use_stacks(per_client=1, requires_grad=True)

    def eval_embedding(self, h: torch.Tensor) -> torch.Tensor:
        """Evaluation: the clipped embedding without noise (the head was trained on clipped ones)."""
        return clip_by_norm(h, self.embed_clip, dim=1) if self.noise["sigma"] > 0 else h

    # one round as a device program: as DPZV's (`DPZV.exchange`), the round's randomness is drawn on the host
    # first (the client's embedding noise, the server's `server_draws`), then `exchange_drawn` runs with no
    # host sync and no host randomness (torch.compile traces it whole)
    def round_program(self, m: int, ids: np.ndarray) -> dict:
        client = self.clients[m]
        noise = self.noise_draw(client, len(ids))
        return self.exchange_drawn(m, self.ids_tensor(ids), noise, self.server_draws(len(ids)))

    def exchange_drawn(self, m: int, ids: torch.Tensor, noise, server_drawn) -> dict:
        """One server round with client m on batch `ids`, the noise of its embedding (`noise_draw`) and the
        server's draws (`server_draws`)."""
        self.server_drawn = server_drawn
        payload, h = self.client_forward(self.clients[m], ids, noise)
        return self.serve(m, payload, h)

    def noise_draw(self, client, batch: int) -> torch.Tensor | None:
        """The noise of the client's embedding from its own generator (none at sigma = 0)."""
        if self.noise["sigma"] == 0.0:
            return None
        p = client.params[0]
        return gaussian_noise((batch, self.cfg.embed_dim), self.noise["sigma"], client.noise, p.dtype, p.device)

    def server_draws(self, batch: int):
        """The server's randomness of a round (VFL-CZOFO's perturbations); VAFL's server draws none."""
        return None

    # client side
    def client_forward(self, client, ids, noise: torch.Tensor | None = None):
        """The client's clipped embedding of batch `ids` (ids or their tensor) and the noisy one it sends."""
        ids = self.ids_tensor(ids)
        h = self.client_embed(client.model, client.x[ids])  # its backward runs in the same precision
        if self.noise["sigma"] > 0:
            # the client's backward goes through its own clip: with the clip's Jacobian a bound clip
            # passes no radial gradient, where straight through the norm of h grew to inf (NaN at eps 10)
            h = clip_by_norm(h, self.embed_clip, dim=1)
        sent = noisy_embedding(h.detach(), self.embed_clip, self.noise["sigma"], client.noise, noise)
        return {"ids": ids, "h": sent}, h

    def client_query(self, client, ids: np.ndarray):
        return self.client_forward(client, ids)

    def client_backward(self, client, h: torch.Tensor, grad_h: torch.Tensor) -> None:
        client.optimizer.zero_grad()
        backward_into(h, client.optimizer.params, grad_h)
        client.optimizer.step()

    def client_reply(self, client, h: torch.Tensor, grad_h: torch.Tensor) -> None:
        if self.stacks is None:
            self.client_backward(client, h, grad_h)
        else:  # the segment's one backward (segment_end)
            self.replies.append((client, h, grad_h))

    def stacked_queries(self, turns) -> list[tuple[dict, torch.Tensor]]:
        """`client_forward` of each turn (distinct clients): w in slot k (a leaf with gradients), one forward
        of the K slots with autograd, the clip on the stack, then each client's noise."""
        out = [None] * len(turns)
        self.replies = []
        self.slots = {}
        for stack, positions in self.stacks.split(turns):
            stack.clear_gradients()
            for slot, i in enumerate(positions):
                stack.snapshot(self.clients[turns[i][0]].model, slot)
                self.slots[turns[i][0]] = stack, slot
            h = self.client_embed(stack.forward, self.stacked_inputs(turns, positions))
            if self.noise["sigma"] > 0:  # as client_forward: the backward goes through the clip
                h = clip_by_norm(h, self.embed_clip, dim=-1)
            for slot, i in enumerate(positions):
                m, ids = turns[i]
                sent = noisy_embedding(h[slot].detach(), self.embed_clip, self.noise["sigma"], self.clients[m].noise)
                out[i] = {"ids": self.ids_tensor(ids), "h": sent}, h[slot]
        return out

    def segment_end(self) -> None:
        """One backward over the segment's stacked graph (each slot gets its own client's gradient: the clients
        share no parameter), then each client's SGD step on its own parameters, in schedule order."""
        clients, hs, grads = zip(*self.replies)
        torch.autograd.backward(list(hs), list(grads))
        for client in clients:
            stack, slot = self.slots[client.index]
            client.optimizer.zero_grad()
            for p, g in zip(client.params, stack.gradients(slot)):
                p.grad = g
            client.optimizer.step()
        self.replies, self.slots = [], {}

    # server side
    def server_answer(self, m: int, msg: dict) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError

    def server_sgd(self, ids: torch.Tensor) -> torch.Tensor:
        """SGD step of the head on the batch-mean loss over the table's embeddings; the loss stays on the
        device (read once per evaluation block)."""
        self.server.optimizer.zero_grad()
        loss = self.server.losses(ids).mean()
        backward_into(loss, self.server.optimizer.params)
        self.server.optimizer.step()
        return loss.detach()

    def privacy(self) -> dict:
        return {
            **self.embedding_privacy(self.noise),
            "embed_clip": self.embed_clip,
            "mechanism": "clipped embeddings plus Gaussian vector noise (local, per coordinate)",
        }


class VAFL(EmbeddingBaseline):
    method = "vafl"

    def server_answer(self, m: int, msg: dict) -> tuple[torch.Tensor, dict]:
        ids = msg["ids"]
        self.server.table[ids, m] = msg["h"]
        h_m = msg["h"].clone().requires_grad_(True)
        self.server.optimizer.zero_grad()
        loss = self.server.losses(ids, m, h_m).mean()
        backward_into(loss, [h_m, *self.server.optimizer.params])
        self.server.optimizer.step()
        return h_m.grad.detach(), {"train_loss": loss.detach()}


ALGORITHM = VAFL


def run_job(job) -> None:
    from fedrepro.algorithms.dpzv.jobs import run_vfl_job

    run_vfl_job(job, ALGORITHM)
