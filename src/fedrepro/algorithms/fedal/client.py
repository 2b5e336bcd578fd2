"""A black-box client: its model, optimiser, private data and public-batch stream.

The model never leaves the client; the server only receives what a method sends
through `fedrepro.fl.transport.Wire` (logits, features, per-label summaries, or,
for the shareable methods FedAvg/FedDF, parameters).

Choices where the paper is silent (Sec. VI-A says only "We use Adam optimizer for
training all client models" and "Each client randomly selects a local model architecture"):
- one persistent Adam per client, shared by the local and the global stage and
  kept across rounds (`Client.opt`);
- random initialisation, no pretraining (none is mentioned; FCCL's own pretraining aside);
- each client draws its architecture uniformly at random from the pool with the
  run seed (`assign_architectures`); the draw is recorded in the summary.
- Frozen snapshots (the LF anchors) run in the same (training) mode as the model,
  so that r_loc / r_glo are exactly zero at their anchor also with BatchNorm.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedrepro.data.tensors import ClientBatches
from fedrepro.fl.optim import Adam
from fedrepro.models import build_model


class ClientModel(nn.Module):
    """Feature extractor of a registered architecture plus a linear head to K classes."""

    def __init__(self, body: nn.Module, num_classes: int, arch: str):
        super().__init__()
        if not hasattr(body, "feature_dim"):
            raise ValueError(f"architecture {arch!r} does not expose feature_dim with num_classes=0")
        self.body = body
        self.feature_dim = int(body.feature_dim)
        self.head = nn.Linear(self.feature_dim, num_classes)
        self.arch = arch

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))

    def forward_both(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)
        return h, self.head(h)


def build_client_model(entry: Mapping, num_classes: int) -> ClientModel:
    """`entry` = {"name": registered architecture, "options": {builder keyword arguments}}."""
    name = entry["name"]
    options = dict(entry.get("options", {}))
    return ClientModel(build_model(name, num_classes=0, **options), num_classes, arch=arch_key(entry))


def arch_key(entry: Mapping) -> str:
    """A readable, unique name of a pool entry (architecture + options)."""
    options = entry.get("options", {})
    if not options:
        return entry["name"]
    return entry["name"] + "(" + ",".join(f"{k}={options[k]}" for k in sorted(options)) + ")"


ASSIGNMENTS = ("random", "round_robin")


def assign_architectures(pool: Sequence[Mapping], num_clients: int, seed: int, mode: str = "random") -> list[int]:
    """Pool index per client (Sec. VI-A: "each client randomly selects"): uniform at random from a generator of
    its own (`random`, the paper), or client n gets entry n mod |pool| (`round_robin`)."""
    if not pool:
        raise ValueError("the client model pool is empty")
    if mode not in ASSIGNMENTS:
        raise ValueError(f"assignment {mode!r} is not one of {', '.join(ASSIGNMENTS)}")
    if mode == "round_robin":
        return [n % len(pool) for n in range(num_clients)]
    rng = np.random.default_rng([seed, 23])
    return [int(i) for i in rng.integers(0, len(pool), size=num_clients)]


class Stream:
    """A reproducible stream of mini-batch indices over one index set."""

    def __init__(self, indices: np.ndarray, seed: int):
        self._batches = ClientBatches([np.asarray(indices)], seed)

    def next(self, batch_size: int) -> np.ndarray:
        return self._batches.next(0, batch_size)

    def state_dict(self) -> dict:
        return self._batches.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._batches.load_state_dict(state)


class Client:
    """One client: model, Adam, its private data and its copy of the public data.

    `public_stream` is seeded with the seed all clients share, so every client
    draws the same public mini-batch P^{t,i} without talking to anyone (Algorithm 1).
    """

    def __init__(
        self,
        cid: int,
        model: ClientModel,
        x: torch.Tensor,
        y: torch.Tensor,
        public_x: torch.Tensor | None,
        lr: float,
        batch_size: int,
        seed: int,
        public_seed: int,
    ):
        if len(y) == 0:
            raise ValueError(f"client {cid} has no training samples")
        self.cid, self.name = cid, f"client{cid}"
        self.model = model
        self.x, self.y, self.public_x = x, y, public_x
        self.batch_size = batch_size
        self._slots: dict[str, ClientModel] = {}
        self.lr = lr
        self.opt = Adam(model.parameters(), lr=lr)
        self.local_stream = Stream(np.arange(len(y)), seed)
        self.private_batches = 0  # private mini-batches drawn: the local work the summary reports
        self.public_stream = Stream(np.arange(len(public_x)), public_seed) if public_x is not None else None

    @property
    def num_samples(self) -> int:
        return len(self.y)

    def local_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(self.next_private_indices(self.batch_size), device=self.y.device)
        return self.x[idx], self.y[idx]

    def next_private_indices(self, batch_size: int) -> np.ndarray:
        """The next private mini-batch's indices (counted in `private_batches`)."""
        self.private_batches += 1
        return self.local_stream.next(batch_size)

    def public_batch(self) -> tuple[np.ndarray, torch.Tensor]:
        if self.public_stream is None:
            raise RuntimeError(f"{self.name} has no public data")
        idx = self.public_stream.next(self.batch_size)
        return idx, self.public_x[torch.as_tensor(idx, device=self.public_x.device)]

    def snapshot(self, slot: str | None = None) -> ClientModel:
        """A frozen copy of the current model (LF / teacher anchor).

        With a `slot` name the copy is kept and refreshed in place on the next
        call with the same slot (saves a deep copy per round).
        """
        frozen = self._slots.get(slot) if slot else None
        if frozen is None:
            frozen = copy.deepcopy(self.model)
            for p in frozen.parameters():
                p.requires_grad_(False)
            if slot:
                self._slots[slot] = frozen
        else:
            frozen.load_state_dict(self.model.state_dict())
            frozen.train(self.model.training)
        return frozen

    def reset_optimizer(self) -> None:
        """A fresh Adam (`adam_state: per_stage`; the paper does not say whether Adam state persists)."""
        self.opt = Adam(self.model.parameters(), lr=self.lr)

    def pretrain(self, steps: int) -> None:
        """`steps` cross-entropy steps on private batches (`pretrain_iters`; the paper mentions no pretraining)."""
        for _ in range(steps):
            x, y = self.local_batch()
            self.step(cross_entropy(self.model(x), y))

    def step(self, loss: torch.Tensor) -> None:
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "opt": self.opt.state_dict(),
            "local": self.local_stream.state_dict(),
            "private_batches": self.private_batches,
            "public": self.public_stream.state_dict() if self.public_stream else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.local_stream.load_state_dict(state["local"])
        self.private_batches = state["private_batches"]
        if self.public_stream is not None:
            self.public_stream.load_state_dict(state["public"])


@torch.no_grad()
def frozen_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Logits of a frozen snapshot, in the same train/eval mode as the live model."""
    return model(x)


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the batch; logits (G, B, K) and labels (G, B) give one per client."""
    per_sample = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
    return per_sample.reshape(y.shape).mean(-1)
