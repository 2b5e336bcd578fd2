"""CFD / MHAT (paper refs [23, 24], treated as one method, Sec. VI-A "Baselines").

"CFD and MHAT utilize unlabeled public data and local model outputs from
clients to train a global model on the server. This global model output is then
transmitted back to clients for KD." Per round:

* local stage: tau cross-entropy steps per client on private batches;
* global stage, tau iterations on the shared public batch: clients upload logits
  (K*B floats); the server takes one Adam step of its own model toward the
  average client probabilities (KL, temperature E_kd), then sends the updated
  server model's logits (K*B floats) back; each client takes one KL step toward them.

The server model is its own architecture (`server_model`, a pool entry; default
the first entry of the client pool) and never leaves the server; it is trained
only on the public inputs and the clients' logits. Choices (the paper gives no CFD
settings): tau, the server model and its learning rate (`server_lr`, default the client lr)
are config keys; CFD's soft-label quantisation/delta coding is not modelled. `batched` (spec key,
default on a GPU): the clients of one architecture train as one program (base.Federation), with the
per-client loop's numbers (tests/fedal/test_batched.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from fedrepro.algorithms.fedal.base import FedData, Federation, TrainConfig, device_mean, mean_of
from fedrepro.algorithms.fedal.client import build_client_model
from fedrepro.algorithms.fedal.kd import kl_to_logits
from fedrepro.fl.optim import Adam


class ServerModelTrainer:
    """The CFD server: a model of its own, trained on public inputs toward averaged client outputs."""

    def __init__(self, model: torch.nn.Module, lr: float, temperature: float):
        self.model = model
        self.opt = Adam(model.parameters(), lr=lr)
        self.temperature = temperature

    def respond(self, public_x: torch.Tensor, logits: Sequence[torch.Tensor]) -> tuple:
        """One distillation step; returns (the server model's new logits on the batch, its loss)."""
        mean_probs = torch.stack([torch.softmax(f.detach() / self.temperature, -1) for f in logits]).mean(0)
        loss = torch.nn.functional.kl_div(
            torch.log_softmax(self.model(public_x) / self.temperature, -1), mean_probs, reduction="batchmean"
        )
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            return self.model(public_x), loss.detach()

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])


class CFD(Federation):
    def __init__(
        self,
        data: FedData,
        pool: Sequence[Mapping],
        cfg: TrainConfig,
        seed: int,
        server_model: Mapping | None = None,
        server_lr: float | None = None,
        assignment: Sequence[int] | None = None,
        batched: bool = False,
    ):
        super().__init__(data, pool, cfg, seed, assignment, batched)
        model = build_client_model(server_model or self.pool[0], data.num_classes).to(data.test_x.device)
        self.server = ServerModelTrainer(model, server_lr or cfg.lr, cfg.kd_temperature)
        # the server draws the same public batches as the clients (shared seed)
        self._server_public = self.public_stream()

    def round(self, t: int) -> dict:
        self.wire.round = t
        ce = self.local_supervised_stage()
        kd, server_kd = [], []
        for _ in range(self.cfg.tau):
            k, s = self._global_iteration()
            kd.append(k)
            server_kd.append(s)
        if self.batched:  # each iteration's mean read in one copy, then averaged on the host as the loop does
            kd = torch.stack(kd).tolist()
        return {"ce": ce, "kd": mean_of(kd), "server_kd": mean_of(server_kd)}

    def _global_iteration(self):
        if self.batched:
            return self._global_iteration_batched()
        logits, uploads = [], []
        for client in self.clients:
            _, xb = client.public_batch()
            f = client.model(xb)
            logits.append(f)
            uploads.append(self.wire.send(client.name, "server", "logits", f.detach()))
        idx = torch.as_tensor(self._server_public.next(self.cfg.batch_size), device=self.data.public_x.device)
        server_logits, server_loss = self.server.respond(self.data.public_x[idx], uploads)
        losses = []
        for n, client in enumerate(self.clients):
            target = self.wire.send("server", client.name, "server_logits", server_logits)
            loss = kl_to_logits(target, logits[n], self.cfg.kd_temperature)
            client.step(loss)
            losses.append(loss.detach())
        self.iteration += 1
        return mean_of(losses), server_loss

    def _global_iteration_batched(self):
        """_global_iteration with each architecture's clients stacked: same batch, messages and steps."""
        xb = self.shared_public_batch()
        idx = torch.as_tensor(self._server_public.next(self.cfg.batch_size), device=self.data.public_x.device)
        out = self.global_step_stacked(self.stacks(), xb, self.data.public_x[idx])
        for message in self._sent:  # logged after the step, which reads no host counter (Wire.log)
            self.wire.log(*message)
        self.iteration += 1
        return out

    def global_step_stacked(self, stacks: list, xb: torch.Tensor, server_xb: torch.Tensor) -> tuple:
        """One global iteration of the stacked clients on the public batch `xb` (the server's own draw of it:
        `server_xb`): (the clients' mean KD loss, the server's loss), 0-dim device tensors read at the round's
        end. A device program with no host sync, which torch.compile(fullgraph=True) traces whole."""
        logits, per_client = self.stacked_logits(xb)
        uploads = [self.wire.carry(per_client[n].detach()) for n in range(len(self.clients))]
        server_logits, server_loss = self.server.respond(server_xb, uploads)
        targets = [self.wire.carry(server_logits) for _ in self.clients]
        self._sent = [(c.name, "server", "logits", uploads[n]) for n, c in enumerate(self.clients)]
        self._sent += [("server", c.name, "server_logits", targets[n]) for n, c in enumerate(self.clients)]
        losses = []
        for group, stack, f in zip(self._groups, stacks, logits):
            loss = kl_to_logits(targets[group.members[0]], f, self.cfg.kd_temperature)  # the same for every client
            stack.step(loss.sum())
            losses.append(loss.detach())
        return device_mean(losses), server_loss

    def extra_state(self) -> dict:
        return {"server": self.server.state_dict(), "public": self._server_public.state_dict()}

    def load_extra_state(self, state: dict) -> None:
        self.server.load_state_dict(state["server"])
        self._server_public.load_state_dict(state["public"])


def build(data: FedData, pool: list, cfg: TrainConfig, seed: int, spec: dict) -> CFD:
    """`server_model`: index into the pool (default 0) of the server's own architecture."""
    index = int(spec.get("server_model", 0))
    if not 0 <= index < len(pool):
        raise ValueError(f"cfd.server_model={index} is not an index of the {len(pool)}-entry pool")
    batched = bool(spec.get("batched", data.test_x.device.type == "cuda"))
    return CFD(data, pool, cfg, seed, server_model=pool[index], server_lr=spec.get("server_lr"), batched=batched)


def run_job(job) -> None:
    from fedrepro.algorithms.fedal.jobs import run

    run(job, build)
