"""FedAvg inside the FedAL comparison (homogeneous pools only: Figs. 7 and 11).

Every round each client loads the global weights (downlink), takes tau Adam
steps of cross-entropy on private batches, and uploads its whole state dict
(|theta| floats, plus BatchNorm buffers where the model has them); the server
averages them weighted by client data size (`fedrepro.fl.aggregate.weighted_average`).
One "iteration" is one local step, so a round adds tau iterations (as in
`base`: the paper counts budgets in iterations, Tables IV-IX, without defining one).

Why not `fedrepro.algorithms.fedavg.fedavg.FedAvg`: that class trains with
SGD and a fresh optimiser each round and evaluates one global model, while the
FedAL paper trains every client model with Adam (Sec. VI-A) and every method
here is evaluated, counted and checkpointed the same way (`Federation`). The
building blocks (weighted averaging, Wire) are shared.
Each client keeps its own Adam state across rounds (the paper does not say; as `client`).

`batched` (spec key, default on a GPU): the clients' local steps run as one program (base.Federation,
fl.batched.Stack; `local_updates_batched`, which FedDF's clients use too) with the per-client loop's
batches, losses, updates and uploads; the averaging is unchanged. All clients receive the global
weights before any uploads, so within a round the wire logs the downlinks first (the same messages,
in another order; tests/fedal/test_batched_baselines.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from fedrepro.algorithms.fedal.base import FedData, Federation, TrainConfig, mean_of
from fedrepro.algorithms.fedal.client import Client, cross_entropy, frozen_logits
from fedrepro.algorithms.fedal.kd import less_forgetting
from fedrepro.fl.aggregate import weighted_average


def local_update(
    client: Client, start: Mapping[str, torch.Tensor], steps: int, use_lf: bool = False
) -> list[torch.Tensor]:
    """Load `start`, take `steps` CE (+ r_loc anchored at `start`) steps; returns the losses."""
    client.model.load_state_dict(start)
    anchor = client.snapshot("loc") if use_lf else None
    losses = []
    for _ in range(steps):
        x, y = client.local_batch()
        f = client.model(x)
        loss = cross_entropy(f, y)
        if use_lf:
            loss = loss + less_forgetting(frozen_logits(anchor, x), f)
        client.step(loss)
        losses.append(loss.detach())
    return losses


def local_updates_batched(
    fed: Federation, starts: Sequence[Mapping[str, torch.Tensor]], steps: int, use_lf: bool = False
) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    """`local_update` of every client (client n from `starts[n]`), each architecture group stacked;
    returns the losses (one (G,) tensor per group and step) and each client's state dict after the steps."""
    losses, states = [], [None] * fed.num_clients
    for group, stack in zip(fed._groups, fed.stacks()):
        with torch.no_grad():
            for name, t in (stack.params | stack.buffers).items():
                t.copy_(torch.stack([starts[n][name] for n in group.members]))
        anchor = stack.freeze() if use_lf else None  # r_loc's anchor: the model each client loaded
        for _ in range(steps):
            losses.append(local_step_stacked(stack, *group.batch(fed.clients, fed.cfg.batch_size), anchor))
        tensors = stack.params | stack.buffers
        for j, n in enumerate(group.members):
            states[n] = {name: tensors[name][j].detach().clone() for name in starts[n]}
    return losses, states


def local_step_stacked(stack, x: torch.Tensor, y: torch.Tensor, anchor) -> torch.Tensor:
    """One local step of a group's stacked clients on their batches (x, y): CE, + r_loc toward the frozen `anchor`
    when given; each client's loss (G,). A device program with no host sync, which torch.compile(fullgraph=True)
    traces whole."""
    f = stack.forward(x)
    loss = cross_entropy(f, y)
    if anchor is not None:
        with torch.no_grad():
            anchor_f = stack.forward(x, frozen=anchor)
        loss = loss + less_forgetting(anchor_f, f)
    stack.step(loss.sum())
    return loss.detach()


def state_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class FedAvg(Federation):
    uses_public = False

    def __init__(
        self,
        data: FedData,
        pool: Sequence[Mapping],
        cfg: TrainConfig,
        seed: int,
        assignment: Sequence[int] | None = None,
        batched: bool = False,
    ):
        super().__init__(data, pool, cfg, seed, assignment, batched)
        if len(set(self.assignment)) != 1:
            archs = sorted({c.model.arch for c in self.clients})
            raise ValueError(
                f"fedavg needs one architecture for all clients; the pool gave {archs}. "
                "Use a single-entry pool (homogeneous setting)."
            )
        self.global_state = state_of(self.clients[0].model)
        self.sizes = [c.num_samples for c in self.clients]

    def models(self) -> list[torch.nn.Module]:
        self.sync_clients()  # before client 0's model is overwritten by the global weights
        model = self.clients[0].model
        model.load_state_dict(self.global_state)
        return [model] * self.num_clients

    def round(self, t: int) -> dict:
        self.wire.round = t
        if self.batched:
            starts = [self.wire.send("server", c.name, "weights", self.global_state) for c in self.clients]
            losses, states = local_updates_batched(self, starts, self.cfg.tau)
            uploads = [self.wire.send(c.name, "server", "weights", s) for c, s in zip(self.clients, states)]
            self.global_state = weighted_average(uploads, self.sizes)
            self.iteration += self.cfg.tau
            return {"ce": mean_of(losses)}
        uploads, losses = [], []
        for client in self.clients:
            start = self.wire.send("server", client.name, "weights", self.global_state)
            losses += local_update(client, start, self.cfg.tau)
            uploads.append(self.wire.send(client.name, "server", "weights", state_of(client.model)))
        self.global_state = weighted_average(uploads, self.sizes)
        self.iteration += self.cfg.tau
        return {"ce": mean_of(losses)}

    def extra_state(self) -> dict:
        return {"global": self.global_state}

    def load_extra_state(self, state: dict) -> None:
        self.global_state = state["global"]


def build(data: FedData, pool: list, cfg: TrainConfig, seed: int, spec: dict) -> FedAvg:
    return FedAvg(data, pool, cfg, seed, batched=bool(spec.get("batched", data.test_x.device.type == "cuda")))


def run_job(job) -> None:
    from fedrepro.algorithms.fedal.jobs import run

    run(job, build)
