"""FD / HFD: federated distillation with per-label average logits (paper refs [11, 10]).

No public data. Per round, each client takes tau steps on private batches with
CE + `fd_weight` * KL(softmax(g_{-n, y}) || p_n(x)), where g_{-n, y} is the
global average logit vector of label y excluding the client's own contribution
(labels nobody has reported yet are skipped). While training, the client
accumulates its own logits per label; at the end of the round it uploads the
per-label sums and counts (K*K + K floats); the server returns the global
per-label sums and counts, from which the client removes its own share.

Choices (the paper gives no FD settings, and its authors had no code either): KL at
temperature E_kd instead of FD's logit MSE, weight `fd_weight` (default 1), tau a
config key; the per-label averages are accumulated over the round's batches
(FD's running average) and start empty.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from fedrepro.algorithms.fedal.base import FedData, Federation, TrainConfig, mean_of
from fedrepro.algorithms.fedal.client import cross_entropy
from fedrepro.algorithms.fedal.kd import kl_to_logits


class LabelLogitServer:
    """Sums the clients' per-label logit sums and counts."""

    def respond(self, uploads: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {
            "sums": torch.stack([u["sums"] for u in uploads]).sum(0),
            "counts": torch.stack([u["counts"] for u in uploads]).sum(0),
        }


class FD(Federation):
    uses_public = False

    def __init__(
        self,
        data: FedData,
        pool: Sequence[Mapping],
        cfg: TrainConfig,
        seed: int,
        fd_weight: float = 1.0,
        assignment: Sequence[int] | None = None,
    ):
        super().__init__(data, pool, cfg, seed, assignment)
        k, device = data.num_classes, data.test_x.device
        self.fd_weight = fd_weight
        self.server = LabelLogitServer()
        # per client: the global per-label average excluding itself, and whether it is known
        self.targets = torch.zeros(self.num_clients, k, k, device=device)
        self.known = torch.zeros(self.num_clients, k, dtype=torch.bool, device=device)

    def round(self, t: int) -> dict:
        self.wire.round = t
        k = self.data.num_classes
        losses, uploads, own = [], [], []
        for n, client in enumerate(self.clients):
            sums = torch.zeros(k, k, device=self.targets.device)
            counts = torch.zeros(k, device=self.targets.device)
            for _ in range(self.cfg.tau):
                x, y = client.local_batch()
                f = client.model(x)
                loss = cross_entropy(f, y)
                mask = self.known[n, y]
                if mask.any():
                    loss = (
                        loss
                        + self.fd_weight
                        * kl_to_logits(self.targets[n, y[mask]], f[mask], self.cfg.kd_temperature)
                        * mask.float().mean()
                    )
                client.step(loss)
                losses.append(loss.detach())
                sums.index_add_(0, y, f.detach())
                counts += torch.bincount(y, minlength=k).to(counts.dtype)
            own.append((sums, counts))
            uploads.append(self.wire.send(client.name, "server", "label_logits", {"sums": sums, "counts": counts}))
        total = self.server.respond(uploads)
        for n, client in enumerate(self.clients):
            reply = self.wire.send("server", client.name, "global_label_logits", total)
            sums, counts = reply["sums"] - own[n][0], reply["counts"] - own[n][1]
            seen = counts > 0
            self.known[n] |= seen
            self.targets[n, seen] = sums[seen] / counts[seen, None]
        self.iteration += self.cfg.tau
        return {"loss": mean_of(losses)}

    def extra_state(self) -> dict:
        return {"targets": self.targets, "known": self.known}

    def load_extra_state(self, state: dict) -> None:
        self.targets.copy_(state["targets"])
        self.known.copy_(state["known"])


def build(data: FedData, pool: list, cfg: TrainConfig, seed: int, spec: dict) -> FD:
    return FD(data, pool, cfg, seed, fd_weight=float(spec.get("fd_weight", 1.0)))


def run_job(job) -> None:
    from fedrepro.algorithms.fedal.jobs import run

    run(job, build)
