"""DPZV (Algorithm 1): zeroth-order client updates, per-sample clipping and one scalar of noise.

One server round with client m (Algorithm 1 with eqs. 7-9):
  client: u from a fresh seed over its parameters; w += lambda u -> H+; w -= 2 lambda u -> H-;
          w += lambda u (restore, in place, MeZO style)
  client -> server: sample ids, H+, H-                       (two embedding batches)
  server: delta_i = [l(H+_i) - l(H-_i)] / lambda  (eq. 7; others' slots from the stale table)
          Delta = (1/B) sum_i clip_C(delta_i) + z,  z ~ N(0, sigma_dp^2)   (eq. 8, ONE scalar)
          table[m, ids] <- (H+ + H-)/2; server update (ZO eq. 3 or SGD), not private
  server -> client: Delta                                     (one scalar)
  client: w -= eta_m Delta u  (eq. 9, u regenerated from the seed; optional momentum)

Label privacy (`label_privacy`): `none` (Algorithm 1 as printed) trains the head on the raw labels
without noise; the head enters every later Delta, so the eps of the Delta messages does not bound what
the clients learn about a label. `dp_head` (our sound variant) trains the head by DP-SGD (SGD server
only): per-sample head gradients clipped to `head_clip`, N(0, (s head_clip)^2) on their sum, whose
replace-one sensitivity is 2 head_clip (so the head's own multiplier is s/2); both releases use the same
batch, so the accountant composes them jointly (one Gaussian of multiplier s / sqrt(5) per round:
`eps_pld_sound` in the privacy record, `privacy.dp_head_multipliers`).

Batch secrecy (`batch`): `public` (Algorithm 1 line 4: the client draws the batch and sends its ids, so
amplification at q = B/D does not hold against the clients; the privacy record prints the paper's
accounting beside the known-batch bound `eps_known_pooled` / `eps_known_one_client`) | `secret_subsample`
(our sound variant): the server keeps each sent id with probability `secret_rate` p from its own
randomness, divides by p B, and the noise is calibrated so that amplification at p over the rounds a
sample is sent gives the target eps against the pooled clients (`privacy.secret_subsample_noise`;
p = 1 is the plain known-batch calibration).

Where the paper is silent or contradicts itself, a config key holds the choice:
`fd_denominator` lambda (eq. 7, default) | 2lambda (eqs. 3, 12 and the proofs);
`clip_mode` symmetric (default; the proof of Theorem 6.1 needs |clip| <= C) |
one_sided (min{delta, C} as printed); `server_update` zo (Algorithm 1, default) |
sgd (Section 4's alternative); `direction` sphere | gaussian; `zo_momentum` (0.9
per Table 3; 0 keeps the update in place); the table stores the midpoint
(`table_update: midpoint`) or H+ (the paper says only that the server "updates
its embeddings copy").
The server's own ZO step uses the eq. (3) denominator 2 lambda and no DP (the
paper's DP statement covers the Delta messages only). The forward embeddings are
not protected (the paper says so).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from fedrepro.algorithms.dpzv.base import CLIP_MODES, SERVER_UPDATES, VFLAlgorithm, choice, sgd
from fedrepro.algorithms.dpzv.zo import (
    Direction,
    ZOUpdater,
    add_launches,
    as_float64,
    bucket_sizes,
    check_direction,
    direction_from,
    fd_divisor,
    norm_launches,
    step_launches,
)
from fedrepro.fl.optim import backward_into
from fedrepro.privacy import dpzv as privacy
from fedrepro.privacy.mechanisms import clip_scalar, gaussian_noise

TABLE_UPDATES = ("midpoint", "plus")
LABEL_PRIVACY = ("none", "dp_head")


def client_direction_launches(numels: list[int], buffers: int, kind: str, momentum: float) -> int:
    """Kernel launches of a client's direction in one round besides its two forwards (`fedrepro.plan`):
    the norm, client_query's three in-place passes, and client_apply's float64 copy of Delta and step.
    `buffers` (the model's buffer tensors) plays no part here; it is ZOO-VFL's."""
    b = len(bucket_sizes(numels))
    return norm_launches(b, kind) + 3 * add_launches(b, kind) + 1 + step_launches(b, momentum)


class DPZV(VFLAlgorithm):
    method = "dpzv"
    up_kind, down_kind = "embeddings", "zo_scalar"

    def __init__(self, data, settings, seed, device="cpu"):
        super().__init__(data, settings, seed, device)
        x = settings.extra
        self.zo_lambda = float(x.get("zo_lambda", 1e-3))
        self.divisor = fd_divisor(self.zo_lambda, x.get("fd_denominator", "lambda"))
        self.clip = privacy.parse_clip(x.get("clip", 10.0))
        self.two_sided = choice("clip_mode", x.get("clip_mode", "symmetric"), CLIP_MODES) == "symmetric"
        self.direction = check_direction(x.get("direction", "sphere"))
        self.table_update = choice("table_update", x.get("table_update", "midpoint"), TABLE_UPDATES)
        self.server_update = choice("server_update", x["server_update"], SERVER_UPDATES)
        zo_momentum = float(x.get("zo_momentum", 0.9))
        for client in self.clients:
            client.updater = ZOUpdater(client.params, settings.lr_client, zo_momentum)
        if self.server_update == "zo":
            self.server.updater = ZOUpdater(self.server.params, settings.lr_server, zo_momentum)
        else:
            self.server.optimizer = sgd(self.server.params, settings.lr_server, settings.momentum)
        self.label_privacy = choice("label_privacy", x.get("label_privacy", "none"), LABEL_PRIVACY)
        self.head_clip = privacy.parse_clip(x.get("head_clip", 1.0))
        self.batch = choice("batch", x.get("batch", "public"), privacy.BATCHES)
        self.secret_rate = float(x.get("secret_rate", 0.5)) if self.batch == "secret_subsample" else 1.0
        if not 0.0 < self.secret_rate <= 1.0:
            raise ValueError(f"secret_rate must be in (0, 1], got {self.secret_rate}")
        if self.label_privacy == "dp_head":
            if self.server_update != "sgd":
                raise ValueError("label_privacy: dp_head needs server_update: sgd (DP-SGD on the head)")
            if not math.isinf(settings.eps) and math.isinf(self.head_clip):
                raise ValueError("label_privacy: dp_head needs a finite head_clip at finite eps")
        if not math.isinf(settings.eps) and math.isinf(self.clip):
            raise ValueError("dpzv: a finite eps needs a finite clip threshold (sensitivity 2C/B)")
        self.noise = self._noise(settings, data.num_train)
        self.drawn: dict | None = None  # the server's draws of the round under way (`server_draws`)
        self.use_stacks(per_client=2)
        if not self.two_sided and self.noise["sigma"] > 0:
            self.noise["note"] = "one-sided clipping: the 2C/B sensitivity (and so the DP claim) does not hold"

    def _noise(self, settings, num_train: int) -> dict:
        """Privacy record: the paper's accounting (Theorem 6.1, Poisson at B/D) beside the known-batch bound, or
        the secret-subsample variant's calibration (`privacy.secret_subsample_noise`)."""
        if self.batch == "secret_subsample":
            noise = privacy.secret_subsample_noise(
                settings.eps,
                settings.delta,
                self.clip,
                settings.batch_size,
                self.secret_rate,
                self.uses,
                self.label_privacy,
            )
            if self.label_privacy == "dp_head" and noise["sigma"] > 0:
                head, joint = privacy.dp_head_multipliers(noise["noise_multiplier"])
                noise.update(head_noise_multiplier=head, joint_noise_multiplier=joint)
            return noise
        noise = privacy.dpzv_noise(
            settings.eps,
            settings.delta,
            self.clip,
            self.total_rounds,
            num_train,
            settings.batch_size,
            settings.library_accountant,
        )
        noise.update(privacy.label_privacy_record(noise, self.label_privacy, settings.delta))
        if noise["sigma"] > 0:
            # the Deltas alone (fixed head) and, under dp_head, Delta and the head jointly
            z = noise.get("joint_noise_multiplier", noise["noise_multiplier"])
            noise.update(privacy.known_batch_record(z, self.uses, settings.delta))
        return noise

    # ------------------------------------------------------------------ one round as a device program
    # `exchange` draws the round's randomness on the host (the seeds of the two directions, Delta's noise),
    # then runs `exchange_drawn`: no host sync (statistics stay 0-dim tensors, Delta reaches the client's
    # step as a tensor) and no host randomness, so torch.compile(fullgraph=True) traces it whole when the
    # directions come as their bucket draws (`zo.draw_buckets`) instead of seeds (a seeded torch.Generator
    # cannot be traced). The numbers are the same either way: the same streams in the same order.
    def round_program(self, m: int, ids: np.ndarray) -> dict:
        client = self.clients[m]
        return self.exchange_drawn(m, self.ids_tensor(ids), client.new_seed(), self.server_draws())

    def exchange_drawn(self, m: int, ids: torch.Tensor, client_u, drawn: dict) -> dict:
        """One server round with client m on batch `ids`, its direction `client_u` (a seed or its bucket
        draws) and the server's `drawn` (`server_draws`)."""
        self.drawn = drawn
        payload, u = self.query(self.clients[m], ids, client_u)
        return self.serve(m, payload, u)

    def server_draws(self) -> dict:
        """The server's randomness of a round, before the round: Delta's noise (public batch; the secret
        subsample's coins come before it from the same generator, so that variant draws it in the round) and
        the seed of the ZO server's direction."""
        drawn = {}
        if self.batch == "public":
            head = self.server.params[0]
            drawn["noise"] = gaussian_noise((), self.noise["sigma"], self.server.noise, head.dtype, head.device)
        if self.server_update == "zo":
            drawn["server_u"] = self.server.new_seed()
        return drawn

    def direction_of(self, params, source) -> Direction:
        return direction_from(params, source, self.direction)

    # ------------------------------------------------------------------ client side
    def client_query(self, client, ids: np.ndarray):
        return self.query(client, self.ids_tensor(ids), client.new_seed())

    @torch.no_grad()
    def query(self, client, ids: torch.Tensor, source):
        """Two forward passes at w +- lambda u, perturbing in place; returns the message and u."""
        u = self.direction_of(client.params, source)
        x = client.x[ids]
        u.add_(self.zo_lambda)
        h_plus = self.client_embed(client.model, x)
        u.add_(-2.0 * self.zo_lambda)
        h_minus = self.client_embed(client.model, x)
        u.add_(self.zo_lambda)
        return {"ids": ids, "h_plus": h_plus, "h_minus": h_minus}, u

    def client_apply(self, client, u: Direction, delta: float | torch.Tensor) -> None:
        """eq. (9): w_m <- w_m - eta_m Delta u (same u, regenerated from its seed)."""
        client.updater.step(u, as_float64(delta))

    # ------------------------------------------------------------------ server side
    @torch.no_grad()
    def server_answer(self, m: int, msg: dict) -> tuple[torch.Tensor, dict]:
        drawn, self.drawn = (self.server_draws() if self.drawn is None else self.drawn), None
        ids, h_plus, h_minus = msg["ids"], msg["h_plus"], msg["h_minus"]
        loss_plus = self.server.losses(ids, m, h_plus)
        loss_minus = self.server.losses(ids, m, h_minus)
        delta = (loss_plus - loss_minus) / self.divisor  # eq. (7)
        clipped = clip_scalar(delta, self.clip, two_sided=self.two_sided)
        self.server.table[ids, m] = 0.5 * (h_plus + h_minus) if self.table_update == "midpoint" else h_plus
        if self.batch == "secret_subsample":
            # the server keeps each sent id with probability p from its own randomness, which no client sees;
            # dividing by the expected size p B keeps the sensitivity 2C/(pB) data-independent. (Selecting
            # the kept ids sizes a tensor by data: a host sync on a GPU, in this variant only.)
            kept = torch.rand(ids.shape[0], generator=self.server.noise, device=ids.device) < self.secret_rate
            clipped, ids = clipped * kept, ids[kept]
            drawn["noise"] = gaussian_noise((), self.noise["sigma"], self.server.noise, clipped.dtype, clipped.device)
        divisor = self.secret_rate * self.cfg.batch_size
        answer = clipped.sum() / divisor + drawn["noise"]  # eq. (8)
        self.server_step(ids, divisor, drawn.get("server_u"))
        stats = {  # 0-dim tensors, read once per evaluation block (`VFLAlgorithm.round`)
            "train_loss": 0.5 * (loss_plus + loss_minus).mean(),
            "clip_fraction": (delta.abs() > self.clip).float().mean(),
            "delta_abs": answer.abs(),
        }
        return answer, stats

    def server_step(self, ids: torch.Tensor, divisor: float | None = None, source=None) -> None:
        """Server update on the batch with the table's embeddings: ZO (eq. 3, 2 lambda) or SGD."""
        if self.server_update == "sgd":
            if self.label_privacy == "dp_head":
                self.dp_head_grad(ids, divisor)
            else:
                with torch.enable_grad():
                    self.server.optimizer.zero_grad()
                    backward_into(self.server.losses(ids).mean(), self.server.optimizer.params)
            self.server.optimizer.step()
            return
        u0 = self.direction_of(self.server.params, self.server.new_seed() if source is None else source)
        u0.add_(self.zo_lambda)
        loss_plus = self.server.losses(ids).mean()
        u0.add_(-2.0 * self.zo_lambda)
        loss_minus = self.server.losses(ids).mean()
        u0.add_(self.zo_lambda)
        self.server.updater.step(u0, as_float64(loss_plus - loss_minus) / (2.0 * self.zo_lambda))

    def dp_head_grad(self, ids: torch.Tensor, divisor: float | None = None) -> None:
        """DP-SGD gradient of the head (label_privacy: dp_head): per-sample gradients clipped to
        head_clip, summed, N(0, (s head_clip)^2) added per coordinate (s = Delta's noise multiplier),
        divided by B (by p B for the secret subsample). Written into .grad for the SGD step."""
        from torch.func import functional_call, grad, vmap

        head = self.server.head
        sigma = self.noise["noise_multiplier"] * self.head_clip
        divisor = divisor or self.cfg.batch_size
        if ids.numel() == 0:  # an empty secret subsample: the noise alone
            for p in head.parameters():
                p.grad = gaussian_noise(p.shape, sigma, self.server.noise, p.dtype, p.device) / divisor
            return
        params = {k: v.detach() for k, v in head.named_parameters()}
        x, y = self.server.inputs(ids), self.server.y[ids]

        def loss(p, xi, yi):
            return F.cross_entropy(functional_call(head, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))

        with torch.enable_grad():
            per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
        norms = torch.sqrt(sum(g.reshape(g.shape[0], -1).pow(2).sum(1) for g in per_sample.values()))
        factor = (self.head_clip / norms.clamp_min(1e-12)).clamp(max=1.0)
        for name, p in head.named_parameters():
            g = (per_sample[name] * factor.view(-1, *[1] * (per_sample[name].dim() - 1))).sum(0)
            g = g + gaussian_noise(g.shape, sigma, self.server.noise, g.dtype, g.device)
            p.grad = g / divisor

    # ------------------------------------------------------------------ one round
    def client_reply(self, client, u: Direction, delta: torch.Tensor) -> None:
        self.client_apply(client, u, delta)

    @torch.no_grad()
    def stacked_queries(self, turns) -> list[tuple[dict, Direction]]:
        """`client_query` of each turn (distinct clients): every client perturbs its own parameters in place as
        there, its w + lambda u and w - lambda u copied into slots k and K + k, then one forward of the 2K slots."""
        out = [None] * len(turns)
        for stack, positions in self.stacks.split(turns):
            count = len(positions)
            directions = []
            for slot, i in enumerate(positions):
                client = self.clients[turns[i][0]]
                u = Direction(client.params, client.new_seed(), self.direction)
                u.add_(self.zo_lambda)
                stack.snapshot(client.model, slot)
                u.add_(-2.0 * self.zo_lambda)
                stack.snapshot(client.model, count + slot)
                u.add_(self.zo_lambda)
                directions.append(u)
            x = self.stacked_inputs(turns, positions)
            h = self.client_embed(stack.forward, torch.cat([x, x]))
            for slot, (i, u) in enumerate(zip(positions, directions)):
                ids = self.ids_tensor(turns[i][1])
                out[i] = {"ids": ids, "h_plus": h[slot], "h_minus": h[count + slot]}, u
        return out

    def privacy(self) -> dict:
        return {
            **self.noise,
            "clip": self.clip,
            "clip_mode": "symmetric" if self.two_sided else "one_sided",
            "label_privacy": self.label_privacy,
            "head_clip": self.head_clip,
            "batch": self.batch,
            "mechanism": "scalar Gaussian on the clipped mean of per-sample ZO differences",
            "threat_model": privacy.threat_model("dpzv", self.label_privacy, self.batch).mechanism,
            **privacy.adversary_record("dpzv", self.noise, self.label_privacy),
        }


ALGORITHM = DPZV


def run_job(job) -> None:
    from fedrepro.algorithms.dpzv.jobs import run_vfl_job

    run_vfl_job(job, ALGORITHM)
