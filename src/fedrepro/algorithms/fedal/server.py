"""The FedAL / FedMD server: it sees only logits on public data (Algorithm 1).

Per global-transfer iteration it receives the N clients' logits on the shared
public batch, takes ONE discriminator step on them (FedAL only), and answers
each client with the all-client average logits and, for FedAL, the per-sample
gradient dU_n/df_n computed with the UPDATED discriminator w^{t,i+1}
(Algorithm 1 lines 17-22). It owns no client model and no private data: its
only inputs are (B, K) logit tensors.

Choices:
- the discriminator's optimiser: `discriminator.optimizer` (sgd | adam). The paper's server updates
  w "according to SGD" (Sec. IV-E; Algorithm 1 line 18 is a plain gradient step) at eta_d = 1e-4
  (Sec. VI-A), while its clients use Adam. The paper scale runs SGD; the quick scale keeps Adam at
  its own rate (config.yaml). The D-loss is averaged over clients (line 18 read as the gradient of
  the mean payoff (8)).
- D is updated first, on the logits just received, then the payoffs'
  gradients are computed with the updated D (`update: before_grad`; the
  alternative `after_grad` computes them with w^{t,i} and then steps).
- `form` (saturating | non_saturating), see discriminator.payoff_grads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fedrepro.algorithms.fedal.discriminator import Discriminator, discriminator_loss, payoff_grads
from fedrepro.algorithms.fedal.kd import tempered_softmax
from fedrepro.fl.optim import SGD, Adam, backward_into

OPTIMIZERS = ("adam", "sgd")
UPDATES = ("before_grad", "after_grad")


@dataclass
class AdversarialConfig:
    """The discriminator's settings (Sec. VI-A; the module docstring for what the paper leaves open)."""

    hidden: tuple[int, ...] = (32, 256)
    lr: float = 1e-4
    optimizer: str = "adam"
    temperature: float = 2.0
    form: str = "saturating"  # (7) as written
    update: str = "before_grad"  # Algorithm 1 lines 17-22


def adversarial_config(spec: dict) -> AdversarialConfig:
    """The `discriminator` block of an adversarial method's job spec."""
    d = spec["discriminator"]
    return AdversarialConfig(
        hidden=tuple(d["hidden"]),
        lr=float(d["lr"]),
        optimizer=d["optimizer"],
        temperature=float(d["temperature"]),
        form=d.get("form", "saturating"),
        update=d.get("update", "before_grad"),
    )


def make_optimizer(name: str, params, lr: float):
    if name == "adam":
        return Adam(params, lr=lr)
    if name == "sgd":
        return SGD(params, lr=lr)
    raise ValueError(f"discriminator.optimizer {name!r} is not one of {', '.join(OPTIMIZERS)}")


class AdversarialHelper:
    """The discriminator and its optimiser; shared by FedAL's server and FedDF-AL's."""

    def __init__(
        self,
        num_classes: int,
        num_players: int,
        hidden: Sequence[int],
        lr: float,
        optimizer: str,
        temperature: float,
        device: torch.device | str = "cpu",
        form: str = "saturating",
        update: str = "before_grad",
    ):
        if update not in UPDATES:
            raise ValueError(f"discriminator update {update!r} is not one of {', '.join(UPDATES)}")
        self.disc = Discriminator(num_classes, num_players, hidden).to(device)
        self.opt = make_optimizer(optimizer, self.disc.parameters(), lr)
        self.optimizer_name, self.lr = optimizer, lr
        self.temperature, self.form, self.update = temperature, form, update

    def step_and_grads(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One D step and the clients' gradients, in the configured order; (grads, D loss)."""
        if self.update == "after_grad":
            grads, _ = self.grads(logits)
            return grads, self.train_step(logits)
        loss = self.train_step(logits)
        return self.grads(logits)[0], loss

    def train_step(self, logits: torch.Tensor) -> torch.Tensor:
        """One ascent step on the mean payoff (= descent on the "which player" CE)."""
        loss = discriminator_loss(self.disc, tempered_softmax(logits.detach(), self.temperature))
        self.opt.zero_grad(set_to_none=True)
        backward_into(loss, self.opt.params)
        self.opt.step()
        return loss.detach()

    def grads(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(dU_n/df_n per sample (N, B, K), U (N, B)) with the current discriminator."""
        return payoff_grads(self.disc, logits, self.temperature, self.form)

    def settings(self) -> dict:
        """What a run's summary reports of its discriminator (the tables' captions name it)."""
        return {"disc_optimizer": self.optimizer_name, "disc_lr": self.lr}

    def state_dict(self) -> dict:
        return {"disc": self.disc.state_dict(), "opt": self.opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.disc.load_state_dict(state["disc"])
        self.opt.load_state_dict(state["opt"])


class LogitServer:
    """Receives logits, answers with average logits (+ dU_n/df_n when adversarial)."""

    def __init__(self, num_clients: int, adversary: AdversarialHelper | None = None):
        if num_clients < 2:
            raise ValueError(f"FedAL/FedMD need at least 2 clients, got {num_clients}")
        self.num_clients = num_clients
        self.adversary = adversary
        self.last_disc_loss = float("nan")

    def respond(self, logits: Sequence[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """`logits[n]` (B, K) from client n -> one reply per client."""
        if len(logits) != self.num_clients:
            raise ValueError(f"expected logits from {self.num_clients} clients, got {len(logits)}")
        stacked = torch.stack([f.detach() for f in logits])
        mean = stacked.mean(dim=0)
        replies = [{"mean_logits": mean} for _ in range(self.num_clients)]
        if self.adversary is not None:
            grads, self.last_disc_loss = self.adversary.step_and_grads(stacked)
            for n, reply in enumerate(replies):
                reply["grad_u"] = grads[n]
        return replies

    def state_dict(self) -> dict:
        return {"adversary": self.adversary.state_dict() if self.adversary else None}

    def load_state_dict(self, state: dict) -> None:
        if self.adversary is not None:
            self.adversary.load_state_dict(state["adversary"])
