"""What every FedAL-paper method shares: clients, the wire, evaluation, state.

A method subclasses `Federation` and implements `round(t)`; `run_rounds` drives
it (fedrepro.fl.loop), so checkpoints and exact resume come for free.

Choices where the paper is silent:
- its budgets are in iterations (Tables IV-IX) and its grid search in rounds
  (Sec. VI-A); here one "iteration" is one global-transfer step (equivalently one local
  step for methods without a global stage); a round of a method with tau steps
  per stage adds tau iterations (`Federation.iteration`).
- the paper does not say how accuracy is aggregated; it is the mean over clients of
  each client model's accuracy on the whole test split (`acc`); the spread over clients is logged as `acc_std_clients`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from fedrepro.algorithms.fedal.client import (
    Client,
    Stream,
    arch_key,
    assign_architectures,
    build_client_model,
    cross_entropy,
)
from fedrepro.eval.health import check_chance, majority_rate
from fedrepro.fl.batched import Stack
from fedrepro.fl.transport import Wire


@dataclass
class FedData:
    """Tensors of one federated setting (all on the training device)."""

    clients_x: list[torch.Tensor]
    clients_y: list[torch.Tensor]
    public_x: torch.Tensor | None
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int

    @property
    def num_clients(self) -> int:
        return len(self.clients_y)


@dataclass
class TrainConfig:
    """Settings every method reads (defaults: the paper's Sec. VI-A where it gives them)."""

    tau: int = 5
    lr: float = 1e-3
    batch_size: int = 32
    kd_temperature: float = 1.0
    lf_temperature: float = 1.0  # not given for (11)-(12); see kd
    kd_target: str = "leave_one_out"  # eq. (5) | all (Algorithm 1 line 21), see kd
    weights: dict = field(default_factory=lambda: {"kd": 1.0, "al": 1.0, "lf": 1.0})  # (15), (17): unweighted sums
    adam_state: str = "persistent"  # persistent | per_stage (FedAL family), see client
    pretrain_iters: int = 0  # the paper mentions no pretraining
    assignment: str = "random"  # Sec. VI-A: each client randomly selects
    eval_batch_size: int = 1000
    record_messages: bool = False

    def __post_init__(self):
        choices = {"kd_target": ("leave_one_out", "all"), "adam_state": ("persistent", "per_stage")}
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise ValueError(f"train.{key} {getattr(self, key)!r} is not one of {', '.join(allowed)}")
        self.weights = {"kd": 1.0, "al": 1.0, "lf": 1.0, **self.weights}


class Federation:
    """Base of every method: builds the clients (architectures drawn per seed) and evaluates."""

    #: whether the method needs the public set
    uses_public = True

    def __init__(
        self,
        data: FedData,
        pool: Sequence[Mapping],
        cfg: TrainConfig,
        seed: int,
        assignment: Sequence[int] | None = None,
        batched: bool = False,
    ):
        if cfg.tau < 1:
            raise ValueError(f"tau must be >= 1, got {cfg.tau}")
        if self.uses_public and (data.public_x is None or len(data.public_x) == 0):
            raise ValueError(f"{type(self).__name__} needs a public data set (partition option public > 0)")
        self.data, self.cfg, self.seed = data, cfg, seed
        self.public_seed = seed + 7919  # shared by all clients (and servers that hold P)
        self.pool = list(pool)
        self.assignment = (
            list(assignment)
            if assignment is not None
            else assign_architectures(self.pool, data.num_clients, seed, cfg.assignment)
        )
        self.clients = [self._make_client(n) for n in range(data.num_clients)]
        for client in self.clients:
            client.pretrain(cfg.pretrain_iters)
        self.wire = Wire(record=cfg.record_messages)
        self.iteration = 0
        self.batched = batched
        groups = architecture_groups(self.assignment) if batched else []
        self._groups = [PrivateGroup(members, self.clients) for members in groups]
        self._stacks: list[Stack] | None = None
        self._stale_clients = False

    def _make_client(self, n: int) -> Client:
        model = build_client_model(self.pool[self.assignment[n]], self.data.num_classes)
        model = model.to(self.data.test_x.device)
        public = self.data.public_x if self.uses_public else None
        # private batches: one stream per client; public batches: one seed shared by all
        return Client(
            n,
            model,
            self.data.clients_x[n],
            self.data.clients_y[n],
            public,
            lr=self.cfg.lr,
            batch_size=self.cfg.batch_size,
            seed=int(np.random.SeedSequence([self.seed, n]).generate_state(1)[0]),
            public_seed=self.public_seed,
        )

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def public_stream(self) -> Stream:
        """The public-batch stream every client draws, for a server that holds P's inputs."""
        return Stream(np.arange(len(self.data.public_x)), self.public_seed)

    # ------------------------------------------------------------------ batched clients
    # `batched` (FedAL, FedMD-LF, FedMD, CFD): the clients of one architecture train as one program
    # (fl.batched.Stack); the stacks are the clients' state while they train and are copied into the
    # client models and Adams whenever those are read (evaluation, checkpoint).
    def stacks(self) -> list[Stack]:
        """One stack per architecture group (`_groups`), built from the clients on first use."""
        if self._stacks is None:
            self._stacks = [
                Stack([self.clients[n].model for n in g.members], [self.clients[n].opt for n in g.members])
                for g in self._groups
            ]
        self._stale_clients = True  # the caller is about to train them
        return self._stacks

    def sync_clients(self) -> None:
        """Copy the stacks into the client models and Adams (before anything reads them)."""
        if self._stale_clients:
            for stack in self._stacks:
                stack.write_back()
            self._stale_clients = False

    def shared_public_batch(self) -> torch.Tensor:
        """The public batch every client draws from its own copy of the shared stream (they agree)."""
        draws = [c.public_stream.next(self.cfg.batch_size) for c in self.clients]
        return self.data.public_x[torch.as_tensor(draws[0], device=self.data.public_x.device)]

    def stacked_logits(self, xb: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each group's stacked logits (G, B, K) on the shared batch `xb`, and each client's in client order."""
        logits = [stack.forward(xb, shared_input=True) for stack in self.stacks()]
        per_client: list = [None] * self.num_clients
        for group, f in zip(self._groups, logits):
            for j, n in enumerate(group.members):
                per_client[n] = f[j]
        return logits, per_client

    # ------------------------------------------------------------------ evaluation
    def models(self) -> list[torch.nn.Module]:
        """The model each client would deploy (overridden by shareable methods)."""
        self.sync_clients()
        return [c.model for c in self.clients]

    @torch.no_grad()
    def test_probabilities(self) -> torch.Tensor:
        """(N, n_test, K) softmax outputs of every client model on the test split."""
        out = []
        for model in self.models():
            model.eval()
            chunks = [torch.softmax(model(xb), dim=-1) for xb in self.data.test_x.split(self.cfg.eval_batch_size)]
            model.train()
            out.append(torch.cat(chunks))
        return torch.stack(out)

    def evaluate(self, t: int) -> dict:
        probs = self.test_probabilities()
        acc = (probs.argmax(-1) == self.data.test_y).float().mean(dim=1)
        up = self.wire.bytes_by_direction["up"]
        return {
            "iteration": self.iteration,
            "acc": float(acc.mean()),
            "acc_std_clients": float(acc.std(unbiased=False)),
            "uplink_mb_per_client": up / self.num_clients / 2**20,
            "downlink_mb_per_client": self.wire.bytes_by_direction["down"] / self.num_clients / 2**20,
        }

    @property
    def local_steps_per_round(self) -> int:
        """Private-data steps per client and round (schedule.local_steps_per_round reads the spec)."""
        return self.cfg.tau

    @property
    def pretrain_steps(self) -> int:
        """Private-data steps per client before round 1."""
        return self.cfg.pretrain_iters

    def local_work(self) -> dict:
        """The schedule and the private mini-batches each client actually drew (mean over clients):
        what a table compares as the methods' local work (report.fedal.budget_note)."""
        return {
            "tau": self.cfg.tau,
            "local_steps_per_round": self.local_steps_per_round,
            "pretrain_steps": self.pretrain_steps,
            "local_steps_total": float(np.mean([c.private_batches for c in self.clients])),
        }

    def summary(self) -> dict:
        """Architectures, final per-client accuracy, the mean output per true class (Fig. 2), the
        local work (`local_work`), the test set's size and the run's health (`chance` when the mean
        client accuracy is within sampling error of always predicting the most frequent test label)."""
        probs = self.test_probabilities()
        y = self.data.test_y
        acc = (probs.argmax(-1) == y).float().mean(dim=1)
        k = self.data.num_classes
        class_probs = [
            probs[:, y == c].mean(dim=(0, 1)).tolist() if (y == c).any() else [float("nan")] * k for c in range(k)
        ]
        health = check_chance(float(acc.mean()), majority_rate(y.cpu().numpy()), len(y), "mean client accuracy")
        return {
            "architectures": [arch_key(self.pool[i]) for i in self.assignment],
            "client_acc": acc.tolist(),
            "class_probs": class_probs,
            "iterations_done": self.iteration,
            "n_test": len(y),
            **self.local_work(),
            **health.as_dict(),
        }

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        self.sync_clients()
        return {
            "clients": [c.state_dict() for c in self.clients],
            "wire": self.wire.state_dict(),
            "iteration": self.iteration,
            "extra": self.extra_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        for c, s in zip(self.clients, state["clients"]):
            c.load_state_dict(s)
        self.wire.load_state_dict(state["wire"])
        self.iteration = state["iteration"]
        self.load_extra_state(state["extra"])
        self._stacks, self._stale_clients = None, False

    def extra_state(self) -> dict:
        return {}

    def load_extra_state(self, state: dict) -> None:
        pass

    def local_supervised_stage(self) -> float:
        """tau cross-entropy steps on every client's private data; the mean loss."""
        losses = []
        if self.batched:
            for group, stack in zip(self._groups, self.stacks()):
                for _ in range(self.cfg.tau):
                    losses.append(supervised_step_stacked(stack, *group.batch(self.clients, self.cfg.batch_size)))
            return mean_of(losses)
        for client in self.clients:
            for _ in range(self.cfg.tau):
                x, y = client.local_batch()
                loss = cross_entropy(client.model(x), y)
                client.step(loss)
                losses.append(loss.detach())
        return mean_of(losses)

    def round(self, t: int) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError


def supervised_step_stacked(stack: Stack, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One cross-entropy step of a group's stacked clients on their private batches; each client's loss (G,).
    A device program with no host sync, which torch.compile(fullgraph=True) traces whole."""
    loss = cross_entropy(stack.forward(x), y)
    stack.step(loss.sum())
    return loss.detach()


def architecture_groups(assignment: Sequence[int]) -> list[list[int]]:
    """The clients of each pool entry in use, in pool order (one batched program each)."""
    return [[n for n, a in enumerate(assignment) if a == arch] for arch in sorted(set(assignment))]


class PrivateGroup:
    """The private data of one architecture group in one tensor, so that a step's batches of all
    its clients are one gather; each client's indices still come from its own stream."""

    def __init__(self, members: list[int], clients: Sequence[Client]):
        self.members = members
        self.x = torch.cat([clients[n].x for n in members])
        self.y = torch.cat([clients[n].y for n in members])
        sizes = [clients[n].num_samples for n in members]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    def batch(self, clients: Sequence[Client], batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(G, B, ...) inputs and (G, B) labels: client n's next batch from its own stream."""
        idx = np.stack(
            [clients[n].next_private_indices(batch_size) + off for n, off in zip(self.members, self.offsets)]
        )
        idx = torch.as_tensor(idx, device=self.y.device)
        return self.x[idx], self.y[idx]


def mean_of(values: Sequence) -> float:
    """Mean of numbers, or of every entry of tensors (one per client, or one per batched group)."""
    if not values:
        return float("nan")
    if all(isinstance(v, torch.Tensor) for v in values):
        return float(device_mean(values))
    return float(sum(values) / len(values))


def device_mean(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """Mean of every entry of tensors, as a 0-dim tensor on their device (no host sync)."""
    return torch.cat([v.detach().reshape(-1) for v in values]).mean()
