"""VFL-CZOFO (Wang et al., NeurIPS 2023): ZO on the embedding, backprop on both sides.

DPZV's third baseline (Section 7): it "computes the intermediate gradient via ZOO,
while keeping the back propagation on both server and client".

The client sends its (clipped, noised) embedding like VAFL. The server estimates
dL/dh_m by zeroth order in the embedding space: n perturbations (Table 3: n = 5),
each a per-sample direction v_i uniform on the unit sphere of R^e, and
    g = (1/n) sum_k (e / lambda) [L(h + lambda V_k) - L(h)] V_k
with L the batch-mean loss (the authors' `ZO_output_optim`, phi = e). It sends g
(B x e) back; the client backpropagates it first-order. The server trains its
head by SGD on the unperturbed loss. Both losses of the estimate use the head
before its SGD step (the reference code computes the perturbed loss after the
step, which mixes two heads in one difference).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrepro.algorithms.dpzv.vafl import EmbeddingBaseline


class VFLCZOFO(EmbeddingBaseline):
    method = "vfl_czofo"

    def __init__(self, data, settings, seed, device="cpu"):
        super().__init__(data, settings, seed, device)
        self.zo_lambda = float(settings.extra.get("zo_lambda", 1e-3))
        self.perturbations = int(settings.extra.get("perturbations", 5))
        if self.perturbations < 1:
            raise ValueError(f"perturbations must be >= 1, got {self.perturbations}")

    def server_draws(self, batch: int) -> list[torch.Tensor]:
        """The n Gaussian draws of the round's perturbations, from the server's generator in order."""
        p = self.server.params[0]
        shape = (batch, self.cfg.embed_dim)
        return [
            torch.randn(shape, generator=self.server.noise, dtype=p.dtype, device=p.device)
            for _ in range(self.perturbations)
        ]

    @torch.no_grad()
    def embedding_gradient(self, ids: torch.Tensor, m: int, h: torch.Tensor, draws=None) -> torch.Tensor:
        base = self.server.losses(ids, m, h).mean()
        grad = torch.zeros_like(h)
        dim = h.shape[1]
        draws = self.server_draws(h.shape[0]) if draws is None else draws
        for z in draws:
            v = F.normalize(z, dim=1)
            diff = self.server.losses(ids, m, h + self.zo_lambda * v).mean() - base
            grad += (dim / self.zo_lambda) * diff * v
        return grad / self.perturbations

    def server_answer(self, m: int, msg: dict) -> tuple[torch.Tensor, dict]:
        ids, h = msg["ids"], msg["h"]
        draws, self.server_drawn = self.server_drawn, None
        grad = self.embedding_gradient(ids, m, h, draws)
        self.server.table[ids, m] = h
        loss = self.server_sgd(ids)
        return grad, {"train_loss": loss}


ALGORITHM = VFLCZOFO


def run_job(job) -> None:
    from fedrepro.algorithms.dpzv.jobs import run_vfl_job

    run_vfl_job(job, ALGORITHM)
