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

`batched` (spec key, default on a GPU): the clients of one architecture train as one program
(base.Federation, fl.batched.Stack) with the per-client loop's batches, losses, updates and messages;
each client's targets, mask and per-label sums are its own along the stacked axis
(tests/fedal/test_batched_baselines.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from fedrepro.algorithms.fedal.base import FedData, Federation, TrainConfig, mean_of
from fedrepro.algorithms.fedal.client import cross_entropy
from fedrepro.algorithms.fedal.kd import kl_to_logits, tempered_softmax


def per_sample_kl(teacher_logits: torch.Tensor, student_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """kd.kl_to_logits before its batch mean: KL(softmax(teacher / E) || softmax(student / E)) per sample."""
    log_student = torch.log_softmax(student_logits / temperature, dim=-1)
    teacher = tempered_softmax(teacher_logits.detach(), temperature)
    return torch.nn.functional.kl_div(log_student, teacher, reduction="none").sum(-1)


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
        batched: bool = False,
    ):
        super().__init__(data, pool, cfg, seed, assignment, batched)
        k, device = data.num_classes, data.test_x.device
        self.fd_weight = fd_weight
        self.server = LabelLogitServer()
        # per client: the global per-label average excluding itself, and whether it is known
        self.targets = torch.zeros(self.num_clients, k, k, device=device)
        self.known = torch.zeros(self.num_clients, k, dtype=torch.bool, device=device)

    def round(self, t: int) -> dict:
        self.wire.round = t
        if self.batched:
            return self._round_batched()
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
        return self._exchange(uploads, own, losses)

    def _round_batched(self) -> dict:
        """round with each architecture's clients stacked: client n's batches from its own stream, its own
        targets g_{-n, y} and known labels, its own per-label sums (one-hot products along the stacked axis)."""
        k = self.data.num_classes
        losses, own = [], [None] * self.num_clients
        for group, stack in zip(self._groups, self.stacks()):
            members = torch.as_tensor(group.members, device=self.targets.device)
            sums = torch.zeros(len(members), k, k, device=self.targets.device)
            counts = torch.zeros(len(members), k, device=self.targets.device)
            for _ in range(self.cfg.tau):
                x, y = group.batch(self.clients, self.cfg.batch_size)
                losses.append(self.local_step_stacked(stack, x, y, members, sums, counts))
            for j, n in enumerate(group.members):
                own[n] = (sums[j], counts[j])
        uploads = [
            self.wire.send(c.name, "server", "label_logits", {"sums": own[n][0], "counts": own[n][1]})
            for n, c in enumerate(self.clients)
        ]
        return self._exchange(uploads, own, losses)

    def local_step_stacked(self, stack, x, y, members: torch.Tensor, sums: torch.Tensor, counts: torch.Tensor):
        """One local step of a group's stacked clients (`members`) on their batches (x, y), adding their per-label
        logit sums and counts into `sums` (G, K, K) and `counts` (G, K); each client's loss (G,). A device program
        with no host sync, which torch.compile(fullgraph=True) traces whole."""
        f = stack.forward(x)
        mask = self.known[members[:, None], y].to(f.dtype)  # (G, B)
        kl = per_sample_kl(self.targets[members[:, None], y], f, self.cfg.kd_temperature)  # (G, B)
        held = mask.sum(-1)
        # per client: the KL's mean over its known rows times their fraction of the batch (as `round`)
        fd = (kl * mask).sum(-1) / held.clamp_min(1) * (held / y.shape[-1])
        loss = cross_entropy(f, y) + self.fd_weight * fd
        stack.step(loss.sum())
        # one_hot's range checks read y's min and max on the host (CPU); this is the same 0/1 matrix without them
        onehot = (y[..., None] == torch.arange(self.data.num_classes, device=y.device)).to(f.dtype)
        sums += torch.einsum("gbk,gbc->gkc", onehot, f.detach())
        counts += onehot.sum(1)
        return loss.detach()

    def _exchange(self, uploads: list, own: list, losses: list) -> dict:
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
    batched = bool(spec.get("batched", data.test_x.device.type == "cuda"))
    return FD(data, pool, cfg, seed, fd_weight=float(spec.get("fd_weight", 1.0)), batched=batched)


def run_job(job) -> None:
    from fedrepro.algorithms.fedal.jobs import run

    run(job, build)
