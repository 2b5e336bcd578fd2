"""What every federated SSL method of the FedSC paper shares.

* `SSLData`: the training images (uint8, kept whole on the device), labels for
  evaluation only, the clients' index sets and the normalisation statistics.
* `SSLNet`: backbone -> projector (Linear-ReLU-Linear, 512-1024-512 at paper
  scale, Section 5.3: H = 512) and, for the BYOL family, a predictor of the same shape.
* `TrainConfig` and `local_sgd`: the client optimiser of the official code
  (the paper gives none): SGD momentum 0.9, weight decay 5e-4, fresh every round (the momentum
  buffer is reset; `local_optimizer` restarts one SGD in place), gradient-norm clipping, shuffled batches with the
  last partial batch kept; the round's learning rate comes from the server's
  cosine schedule lr_t = lr0 (1 + cos(pi (t-1)/T))/2 (the code's schedule, without its
  extra cosine factor from calling `get_lr()`). `local_epochs`
  counts passes over the local data, as in the experiments (E = 5), not the local
  steps of Theorem 6.10.
* `FedSSL`: the round skeleton of Algorithm 1 that all methods share: sample
  J^t, send the global weights over the Wire, train each participant, average
  the returned weights with equal weights 1/|J^t| (Algorithm 1, line 23; the full state
  dict, BN buffers included, as the code does), and the kNN monitor. Methods
  override `client_update` and the hooks `before_training` / `after_training`.
  Training forward passes go through `FedSSL.forward` (config keys `precision`,
  `channels_last`: fedrepro.fl.precision); DP-CalR and the kNN monitor stay fp32.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from fedrepro.algorithms.fedsc.augment import AugmentConfig, augment, plain
from fedrepro.algorithms.fedsc.participation import clients_per_round
from fedrepro.eval.knn import knn_accuracy
from fedrepro.fl.aggregate import weighted_average
from fedrepro.fl.optim import SGD, backward_into
from fedrepro.fl.precision import Precision
from fedrepro.fl.sampling import sample_clients
from fedrepro.fl.transport import Wire
from fedrepro.models import build_model


@dataclass
class SSLData:
    x_train: Tensor  # uint8 (N, C, H, W)
    y_train: Tensor  # labels: evaluation only, never used in training
    x_test: Tensor
    y_test: Tensor
    clients: list[Tensor]  # index tensors into x_train
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def client_x(self, j: int) -> Tensor:
        return self.x_train[self.clients[j]]

    @property
    def sizes(self) -> list[int]:
        return [int(c.numel()) for c in self.clients]


def channel_stats(x: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean/std of uint8 images (N, C, H, W) on the [0, 1] scale."""
    unit = x.astype(np.float64) / 255.0
    return tuple(unit.mean(axis=(0, 2, 3)).tolist()), tuple((unit.std(axis=(0, 2, 3)) + 1e-6).tolist())


def mlp_head(dim_in: int, hidden: int, dim_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim_in, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, dim_out))


class SSLNet(nn.Module):
    """Backbone + projector (+ predictor). `forward` gives projector outputs z."""

    def __init__(self, backbone: nn.Module, hidden: int, out_dim: int, predictor: bool = False):
        super().__init__()
        self.backbone = backbone
        self.projector = mlp_head(backbone.feature_dim, hidden, out_dim)
        self.predictor = mlp_head(out_dim, hidden, out_dim) if predictor else None

    def forward(self, x: Tensor) -> Tensor:
        return self.projector(self.backbone(x))


def build_net(spec: dict, in_channels: int, predictor: bool = False) -> SSLNet:
    enc = spec["encoder"]
    backbone = build_model(enc["name"], in_channels=in_channels, num_classes=0, **enc.get("kwargs", {}))
    head = spec["projector"]
    return SSLNet(backbone, int(head["hidden"]), int(head["out"]), predictor)


@dataclass
class TrainConfig:
    rounds: int
    local_epochs: int = 5
    batch_size: int = 512
    lr: float = 0.03
    momentum: float = 0.9
    weight_decay: float = 5e-4
    grad_clip: float | None = 3.0
    views: int = 2  # 2V views per image in training: 2, one pair (the paper's "V = 2" read as the code does)

    @classmethod
    def from_spec(cls, rounds: int, spec: dict) -> TrainConfig:
        allowed = {"local_epochs", "batch_size", "lr", "momentum", "weight_decay", "grad_clip", "views"}
        unknown = set(spec) - allowed
        if unknown:
            raise KeyError(f"unknown train keys {sorted(unknown)}; allowed: {sorted(allowed)}")
        cfg = cls(rounds=int(rounds), **spec)
        if cfg.views < 2 or cfg.views % 2:
            raise ValueError(f"train.views must be an even number >= 2 (2V), got {cfg.views}")
        return cfg

    def lr_at(self, t: int) -> float:
        return self.lr * (1 + math.cos(math.pi * (t - 1) / self.rounds)) / 2


def local_sgd(
    net: nn.Module,
    x: Tensor,
    batch_loss,
    cfg: TrainConfig,
    lr: float,
    gen: torch.Generator,
    after_step=None,
    params=None,
    draw=None,
) -> Tensor:
    """E local epochs of SGD on `batch_loss(draw(x_batch))`; returns the mean batch loss, a 0-dim device tensor
    that the round reads once (`read_losses`). `draw` makes a batch's random inputs (the augmented views) before
    the step, so the step itself (`sgd_step`) holds no random draw and no host read: ready for CUDA graphs."""
    params = list(params if params is not None else net.parameters())
    opt = local_optimizer(net, params, cfg, lr)
    net.train()
    n, losses = x.shape[0], []
    for _ in range(cfg.local_epochs):
        order = torch.randperm(n, generator=gen, device=gen.device).to(x.device)
        for start in range(0, n, cfg.batch_size):
            batch = x[order[start : start + cfg.batch_size]]
            if batch.shape[0] < 2:  # a single image has no negatives (and breaks BatchNorm)
                continue
            inputs = draw(batch) if draw is not None else batch
            losses.append(sgd_step(batch_loss, inputs, opt, params, cfg.grad_clip))
            if after_step is not None:
                after_step()
    return torch.stack(losses).mean() if losses else torch.tensor(float("nan"), device=x.device)


_OPTIMIZERS: weakref.WeakKeyDictionary[nn.Module, SGD] = weakref.WeakKeyDictionary()


def local_optimizer(net: nn.Module, params: list[Tensor], cfg: TrainConfig, lr: float) -> SGD:
    """The SGD of `params`, made once per network and restarted each client-round as the official code's fresh
    SGD (zero momentum, the round's learning rate): its tensors stay in place, so that a step captured in one
    client-round (a CUDA graph) replays in every other with that round's learning rate and momentum."""
    opt = _OPTIMIZERS.get(net)
    trained = [p for p in params if p.requires_grad]
    same = opt is not None and len(opt.params) == len(trained) and all(a is b for a, b in zip(opt.params, trained))
    if not same or (opt.momentum, opt.weight_decay) != (cfg.momentum, cfg.weight_decay):
        opt = _OPTIMIZERS[net] = SGD(trained, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    opt.restart(lr)
    return opt


def sgd_step(batch_loss, inputs, opt: SGD, params: list[Tensor], grad_clip: float | None) -> Tensor:
    """One local step: loss, gradients, clipping by the global norm, the SGD update; returns the detached loss.
    No host sync: clip_grad_norm_ scales every gradient by min(1, c / (||g|| + 1e-6)), a clamp, not a branch."""
    loss = batch_loss(inputs)
    opt.zero_grad()
    backward_into(loss, params)
    if grad_clip:  # the run's configuration, not data
        nn.utils.clip_grad_norm_(params, grad_clip)
    opt.step()
    return loss.detach()


def read_losses(losses: list) -> list[float]:
    """The round's per-client losses on the host: device tensors read in one copy, floats as they are."""
    tensors = [loss for loss in losses if isinstance(loss, Tensor)]
    read = iter(torch.stack(tensors).tolist() if tensors else [])
    return [next(read) if isinstance(loss, Tensor) else float(loss) for loss in losses]


def uniform_or_size_weights(sizes: list[int], weighting: str) -> list[float]:
    """q_j: 'uniform' (1/J, the authors' code) or 'size' (|D_j|/|D|, Section 4); equal unless sizes differ."""
    if weighting == "uniform":
        return [1.0 / len(sizes)] * len(sizes)
    if weighting == "size":
        return [s / sum(sizes) for s in sizes]
    raise ValueError(f"client weighting {weighting!r} unknown; allowed: uniform, size")


class FedSSL:
    """Round skeleton shared by every method (see module docstring)."""

    uses_predictor = False

    def __init__(self, spec: dict, data: SSLData, seed: int, device: torch.device | str = "cpu"):
        self.spec = spec
        self.data = data
        self.device = torch.device(device)
        self.num_clients = len(data.clients)
        self.train_cfg = TrainConfig.from_spec(spec["rounds"], spec.get("train", {}))
        self.aug_cfg = AugmentConfig.from_spec(spec.get("augment"), data.mean, data.std)
        self.per_round = clients_per_round(self.num_clients, spec.get("participation", "full"))
        self.precision = Precision.from_spec(spec)  # config keys precision / channels_last (fl/precision.py)
        self.net = self.build_net(self.uses_predictor)
        self.rng = np.random.default_rng(seed)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)  # augmentations, batches, DP noise
        self.wire = Wire(record=spec.get("record_messages", True))
        knn = spec.get("knn", {})
        self.knn_k, self.knn_t = int(knn.get("k", 200)), float(knn.get("temperature", 0.1))

    # ---------------------------------------------------------------- helpers
    def build_net(self, predictor: bool = False) -> SSLNet:
        """A network of this run's architecture on its device (NHWC weights with channels_last)."""
        return self.precision.prepare(build_net(self.spec, self.data.x_train.shape[1], predictor).to(self.device))

    def forward(self, net: nn.Module, x: Tensor) -> Tensor:
        """A training forward pass in the run's precision; fp32 out, so every loss stays fp32."""
        return self.precision.forward(net, x)

    def views(self, net: nn.Module, batch: Tensor, count: int | None = None) -> Tensor:
        """Projector outputs of `count` (default 2V) augmented views, shape (2V, B, H)."""
        return self.project(net, self.augmented(batch, count), count)

    def augmented(self, batch: Tensor, count: int | None = None) -> Tensor:
        """`count` (default 2V) augmented views of `batch`, stacked along the batch axis (the random draws)."""
        return torch.cat([augment(batch, self.aug_cfg, self.gen) for _ in range(count or self.train_cfg.views)])

    def project(self, net: nn.Module, x: Tensor, count: int | None = None) -> Tensor:
        """Projector outputs of stacked views `x` (from `augmented`), shape (count, B, H)."""
        count = count or self.train_cfg.views
        return self.forward(net, x).view(count, x.shape[0] // count, -1)

    def global_state(self) -> dict:
        return {k: v.detach().clone() for k, v in self.net.state_dict().items()}

    def sample(self, t: int) -> list[int]:
        return [int(j) for j in sample_clients(self.rng, self.num_clients, self.per_round)]

    # ---------------------------------------------------------------- protocol
    def round(self, t: int) -> dict:
        self.wire.round = t
        participants = self.sample(t)
        lr = self.train_cfg.lr_at(t)
        synced = {
            j: self.wire.send("server", f"client{j}", "weights", self.global_state())
            for j in self.sync_set(t, participants)
        }
        info = self.before_training(t, participants, synced) or {}
        states, losses = [], []
        for j in participants:
            state, loss = self.client_update(j, synced[j], t, lr)
            states.append(self.wire.send(f"client{j}", "server", "weights", state))
            losses.append(loss)
        self.net.load_state_dict(weighted_average(states))
        info.update(self.after_training(t, participants) or {})
        return {"lr": lr, "loss": float(np.nanmean(read_losses(losses))), "participants": len(participants), **info}

    def sync_set(self, t: int, participants: list[int]) -> list[int]:
        """Clients that receive the global weights this round (Algorithm 1, lines 6 and 12)."""
        return participants

    def before_training(self, t: int, participants: list[int], synced: dict[int, dict]) -> dict | None:
        return None

    def after_training(self, t: int, participants: list[int]) -> dict | None:
        return None

    def client_update(self, j: int, weights: dict, t: int, lr: float) -> tuple[dict, float]:
        raise NotImplementedError

    @torch.no_grad()
    def encode_eval(self, x: Tensor, batch_size: int = 1024) -> Tensor:
        """Projector features of the global model on un-augmented images (the kNN monitor of Figure 2)."""
        self.net.eval()
        out = [self.net(plain(x[i : i + batch_size], self.aug_cfg)) for i in range(0, x.shape[0], batch_size)]
        return torch.cat(out)

    def evaluate(self, t: int) -> dict:
        acc = knn_accuracy(
            self.encode_eval(self.data.x_train),
            self.data.y_train,
            self.encode_eval(self.data.x_test),
            self.data.y_test,
            self.data.num_classes,
            self.knn_k,
            self.knn_t,
        )
        return {"knn_acc": acc}

    def state_dict(self) -> dict:
        return {
            "net": self.net.state_dict(),
            "rng": self.rng.bit_generator.state,
            "gen": self.gen.get_state(),
            "wire": self.wire.state_dict(),
            **self.extra_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state["net"])
        self.rng.bit_generator.state = state["rng"]
        self.gen.set_state(state["gen"])
        self.wire.load_state_dict(state["wire"])
        self.load_extra_state(state)

    def extra_state(self) -> dict:
        return {}

    def load_extra_state(self, state: dict) -> None:
        pass

    def summary(self) -> dict:
        return {
            "bytes": dict(self.wire.bytes_by_direction),
            "client_sizes": self.data.sizes,
            "clients_per_round": self.per_round,
        }
