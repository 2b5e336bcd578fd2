"""The asynchronous one-client-per-round vertical-FL simulation shared by DPZV and its baselines.

Setting (Section 4, eqs. 1-5): M clients each hold a feature slice of every training
sample and a bottom model; the server holds the labels, the top model and a
table of the latest (possibly stale) embedding of every client for every
training sample. Each server round activates one client, which takes its next
mini-batch of sample ids; what the client sends, what the server answers and
how both update is the method (`exchange` hooks of `VFLAlgorithm`). Everything
that crosses the network goes through `fedrepro.fl.transport.Wire`.

Choices the paper leaves open (the ones with a name in backquotes are config keys):
* schedule `random` (default): each round client m ~ Categorical(q), q uniform
  or `client_weights` (heterogeneity); `permutation`: the VFL-CZOFO schedule,
  every client exactly one pass over its data per epoch, in random order.
* each client walks its own epoch-wise shuffled loader with drop_last, so the
  divisor B of DPZV's clipped mean is fixed (sensitivity 2C/B).
* one epoch = M * floor(D/B) server rounds; T = epochs * that (the noise uses
  the T actually run).
* the table starts at zeros (`table_init: zeros`, default): a server holds no
  embedding it has not received, and every embedding the baselines send is
  noised. `forward` fills it with one forward pass of every initial client model,
  an upload of every training record's clean embedding before round 1 (it goes
  over the wire as `initial_embeddings`): outside the baselines' DP, so their
  bound against the server then reads inf (`privacy.dpzv.adversary_record`).
  The baselines' own sources send no clean upload either: VAFL "achieves DP by
  adding random noise to the output of each local embedding" (DPZV Section 7), so
  every embedding it sends is noised; the VFL-CZOFO code keeps no table (each
  round it recomputes every client's embedding of the batch; it has no DP); no
  ZOO-VFL code is public.
* validation: `val: holdout` keeps a seeded 10% of the training set aside
  (default); `val: test` validates on the test set (common practice). The
  reported accuracy is the test accuracy at the evaluation with the best
  validation accuracy (the paper's "best validation model").
* evaluation uses fresh embeddings of the current client models. It is the
  harness's measurement, not part of the protocol: the held-out records'
  embeddings reach the head outside the wire and outside every epsilon (the
  privacy table's caption says so).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from fedrepro.fl.optim import SGD
from fedrepro.fl.precision import Precision
from fedrepro.fl.transport import Wire
from fedrepro.models import build_model
from fedrepro.privacy import dpzv as privacy

SCHEDULES = ("random", "permutation")
VAL_MODES = ("holdout", "test")
TABLE_INITS = ("forward", "zeros")
SERVER_UPDATES = ("zo", "sgd")
CLIP_MODES = ("symmetric", "one_sided")


def choice(name: str, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name} {value!r} is not one of {', '.join(map(str, allowed))}")
    return value


# ------------------------------------------------------------------------------------ data


@dataclass
class VFLData:
    """Client feature slices (one tensor per client) and labels of each split."""

    train: list[torch.Tensor]
    y_train: torch.Tensor
    val: list[torch.Tensor]
    y_val: torch.Tensor
    test: list[torch.Tensor]
    y_test: torch.Tensor
    num_classes: int

    @property
    def num_clients(self) -> int:
        return len(self.train)

    @property
    def num_train(self) -> int:
        return int(self.y_train.shape[0])


def _client_view(x: np.ndarray, features: np.ndarray, shape) -> np.ndarray:
    n = x.shape[0]
    piece = x.reshape(n, -1)[:, features].reshape(n, *shape)
    if piece.ndim == 5:  # several views per client: stack them as channels
        piece = piece.reshape(n, -1, *piece.shape[-2:])
    return np.ascontiguousarray(piece)


def build_vfl_data(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    features: list[np.ndarray],
    feature_shapes: list,
    num_classes: int,
    kind: str,
    val: str = "holdout",
    val_fraction: float = 0.1,
    split_seed: int = 0,
    device: torch.device | str = "cpu",
) -> VFLData:
    """Split prepared arrays vertically (partition `features`) and hold out a validation set."""
    from fedrepro.data.tensors import standardise_images

    choice("val", val, VAL_MODES)
    if kind in ("image", "multiview"):
        x_train, x_test = standardise_images(x_train, x_test)
    if val == "holdout":
        if not 0 < val_fraction < 1:
            raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
        order = np.random.default_rng(split_seed).permutation(len(y_train))
        n_val = max(1, int(round(val_fraction * len(y_train))))
        val_idx, train_idx = np.sort(order[:n_val]), np.sort(order[n_val:])
        x_val, y_val = x_train[val_idx], y_train[val_idx]
        x_train, y_train = x_train[train_idx], y_train[train_idx]
    else:
        x_val, y_val = x_test, y_test
    dtype = torch.long if kind == "text" else torch.float32

    def tensors(x):
        return [
            torch.as_tensor(_client_view(x, f, s), dtype=dtype, device=device) for f, s in zip(features, feature_shapes)
        ]

    def labels(y):
        return torch.as_tensor(np.asarray(y), dtype=torch.long, device=device)

    return VFLData(
        tensors(x_train),
        labels(y_train),
        tensors(x_val),
        labels(y_val),
        tensors(x_test),
        labels(y_test),
        int(num_classes),
    )


# ------------------------------------------------------------------------------------ settings


@dataclass
class VFLSettings:
    """Settings every method shares (Tables 2 and 3); method options live in `extra`."""

    batch_size: int = 64
    epochs: int = 10
    evals_per_epoch: int = 1
    client_model: str = "vfl_mnist_cnn"
    client_kwargs: dict = field(default_factory=dict)
    embed_dim: int = 64
    server_hidden: int = 128
    lr_server: float = 0.005
    lr_client: float = 5e-4
    momentum: float = 0.9
    eps: float = math.inf
    delta: float = 1e-3
    schedule: str = "random"
    client_weights: list | None = None
    table_init: str = "zeros"
    library_accountant: str = "rdp"
    record_wire: bool = False
    eval_batch: int = 512
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        choice("schedule", self.schedule, SCHEDULES)
        choice("table_init", self.table_init, TABLE_INITS)
        for name in ("batch_size", "epochs", "evals_per_epoch", "embed_dim", "server_hidden"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")


# ------------------------------------------------------------------------------------ parties


class Client:
    """One feature owner: its bottom model, its slice of the training data and its own RNGs."""

    def __init__(self, index: int, model: torch.nn.Module, x: torch.Tensor, batch_size: int, seed: int):
        self.index = index
        self.name = f"client{index}"
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.x = x
        self.batch_size = batch_size
        self.rng = np.random.default_rng([seed, index, 1])
        self.order = self.rng.permutation(x.shape[0])
        self.position = 0
        self.noise = torch.Generator(device=x.device)
        self.noise.manual_seed(int(self.rng.integers(2**62)))
        self.optimizer = None  # first-order methods
        self.updater = None  # zeroth-order methods

    def next_batch(self) -> np.ndarray:
        """Next B sample ids of the epoch-wise shuffled loader (drop_last)."""
        if self.position + self.batch_size > len(self.order):
            self.order = self.rng.permutation(self.x.shape[0])
            self.position = 0
        ids = self.order[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return ids

    def new_seed(self) -> int:
        return int(self.rng.integers(2**62))

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "rng": self.rng.bit_generator.state,
            "order": self.order.copy(),
            "position": self.position,
            "noise": self.noise.get_state(),
            "optimizer": self.optimizer.state_dict() if self.optimizer else None,
            "updater": self.updater.state_dict() if self.updater else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.rng.bit_generator.state = state["rng"]
        self.order, self.position = state["order"], state["position"]
        self.noise.set_state(state["noise"])
        if self.optimizer:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.updater:
            self.updater.load_state_dict(state["updater"])


class Server:
    """Labels, top model and the table of the latest embedding of every client and sample."""

    def __init__(self, head: torch.nn.Module, y: torch.Tensor, num_clients: int, embed_dim: int, seed: int):
        self.head = head
        self.params = list(head.parameters())
        self.y = y
        self.table = torch.zeros(y.shape[0], num_clients, embed_dim, device=y.device)  # sample, client, e
        self.rng = np.random.default_rng([seed, 0, 2])
        self.noise = torch.Generator(device=y.device)
        self.noise.manual_seed(int(self.rng.integers(2**62)))
        self.optimizer = None
        self.updater = None
        # The baselines' head sees noisy embeddings of norm up to sqrt(C_h^2 + e sigma_h^2); they set this
        # to 1 / sqrt(1 + e sigma_h^2 / C_h^2) (post-processing with public numbers, no privacy cost) so
        # that one server learning rate stays stable at every eps. 1 for DPZV and at eps = inf.
        self.input_scale = 1.0

    def inputs(self, ids: torch.Tensor, m: int | None = None, h_m: torch.Tensor | None = None) -> torch.Tensor:
        """Concatenated embeddings of samples `ids`: the table, with client m's slot replaced by h_m."""
        rows = self.table[ids]  # advanced indexing copies: the table itself is never changed here
        if m is not None:
            rows[:, m] = h_m
        return self.input_scale * rows.reshape(rows.shape[0], -1)

    def losses(
        self,
        ids: torch.Tensor,
        m: int | None = None,
        h_m: torch.Tensor | None = None,
        head: torch.nn.Module | None = None,
    ) -> torch.Tensor:
        """Per-sample cross-entropy (reduction='none': DPZV clips per sample)."""
        logits = (head or self.head)(self.inputs(ids, m, h_m))
        return F.cross_entropy(logits, self.y[ids], reduction="none")

    def new_seed(self) -> int:
        return int(self.rng.integers(2**62))

    def state_dict(self) -> dict:
        return {
            "head": self.head.state_dict(),
            "table": self.table.clone(),
            "rng": self.rng.bit_generator.state,
            "noise": self.noise.get_state(),
            "optimizer": self.optimizer.state_dict() if self.optimizer else None,
            "updater": self.updater.state_dict() if self.updater else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        self.table.copy_(state["table"])
        self.rng.bit_generator.state = state["rng"]
        self.noise.set_state(state["noise"])
        if self.optimizer:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.updater:
            self.updater.load_state_dict(state["updater"])


def sgd(params, lr: float, momentum: float) -> SGD:
    """SGD with Table 3's momentum (the paper does not say which optimiser it belongs to: every first-order part)."""
    return SGD(params, lr=lr, momentum=momentum)


# ------------------------------------------------------------------------------------ the loop


class VFLAlgorithm:
    """One VFL run as a `fedrepro.fl.loop.FederatedAlgorithm`.

    `round(t)` runs one evaluation block (1/evals_per_epoch of an epoch) of
    server rounds; each server round is `exchange(m, ids)`: the client's query
    (`client_query`), then `serve`: wire (`up_kind`) -> `server_answer` -> wire
    (`down_kind`) -> the client's update (`client_reply`). With `stack_clients`
    the queries of a segment of distinct clients run first, as one stacked
    program (`run_segment`), and the server rounds then as here.
    """

    method = "vfl"
    up_kind = down_kind = ""  # the wire's kinds of the client's message and the server's reply

    def __init__(self, data: VFLData, settings: VFLSettings, seed: int, device: torch.device | str = "cpu"):
        self.data = data
        self.cfg = settings
        self.seed = seed
        self.device = torch.device(device)
        # `precision: bf16` runs the clients' training forwards (and the first-order baselines' backwards)
        # under autocast; the server's losses, evaluation and every privacy step stay fp32 (`client_embed`)
        self.precision = Precision.from_spec({"precision": settings.extra.get("precision", "fp32")})
        torch.manual_seed(seed)
        self.clients = [
            Client(m, self._client_model(m), x, settings.batch_size, seed) for m, x in enumerate(data.train)
        ]
        head = build_model(
            "vfl_server",
            in_features=data.num_clients * settings.embed_dim,
            num_classes=data.num_classes,
            hidden=settings.server_hidden,
        ).to(self.device)
        self.server = Server(head, data.y_train, data.num_clients, settings.embed_dim, seed)
        self.wire = Wire(record=settings.record_wire)
        self.schedule_rng = np.random.default_rng([seed, 0, 3])
        self.batches_per_pass = data.num_train // settings.batch_size
        if self.batches_per_pass < 1:
            raise ValueError(f"batch_size {settings.batch_size} exceeds the {data.num_train} training samples")
        self.rounds_per_epoch = data.num_clients * self.batches_per_pass
        self.total_rounds = settings.epochs * self.rounds_per_epoch
        self.num_blocks = settings.epochs * settings.evals_per_epoch
        self.server_round = 0
        self._sent: list = []  # the last server round's messages, logged after it (`log_sent`)
        self.queue: list[int] = []
        self.pending: int | None = None  # a segment's first repeated client: the next segment's first
        self.best = {"val_acc": -1.0}
        self.weights = self._weights(settings.client_weights)
        self.client_rounds = self.planned_rounds()
        self.uses = self.planned_uses()
        if settings.table_init == "forward":
            self._fill_table()
        self.stacks = None  # the subclass builds them (`use_stacks`) when `stack_clients` is on

    def use_stacks(self, per_client: int, requires_grad: bool = False) -> None:
        """`stack_clients` (settings.extra; default: on a GPU): each segment's queries as one stacked program
        per client architecture (`stacked.py`), `per_client` parameter snapshots per client."""
        from fedrepro.algorithms.dpzv.stacked import Stacks, stackable

        wanted = self.cfg.extra.get("stack_clients")
        if wanted not in (None, True, False):
            raise ValueError(f"stack_clients must be true, false or null (auto: on a GPU), got {wanted!r}")
        able = all(stackable(c.model) for c in self.clients)
        if wanted and not able:
            raise ValueError(
                "stack_clients: true needs client models that run under torch.func.vmap; "
                f"{self.cfg.client_model} holds a Hugging Face BERT, whose mask builder branches on the data"
            )
        if wanted or (wanted is None and able and self.device.type == "cuda"):
            self.stacks = Stacks(self.clients, per_client, requires_grad)

    # ---- construction helpers
    def embedding_noise(self, per_round: int, pair_release: str) -> dict:
        """The baselines' noise on `per_round` clipped embeddings a round (`privacy.dpzv.embedding_noise`),
        for this run's epsilon, clip (`self.embed_clip`), rounds and batch."""
        cfg = self.cfg
        return privacy.embedding_noise(
            cfg.eps,
            cfg.delta,
            self.embed_clip,
            self.total_rounds,
            self.data.num_train,
            cfg.batch_size,
            per_round,
            pair_release,
            cfg.library_accountant,
        )

    def _client_model(self, m: int) -> torch.nn.Module:
        kwargs = dict(self.cfg.client_kwargs)
        if self.data.train[m].dtype != torch.long:
            kwargs.setdefault("in_channels", int(self.data.train[m].shape[1]))
        return build_model(self.cfg.client_model, embed_dim=self.cfg.embed_dim, **kwargs).to(self.device)

    def client_embed(self, model, x: torch.Tensor) -> torch.Tensor:
        """A client's training forward `model(x)` in the run's precision (fl/precision.py): under bf16 the
        matmuls run in bfloat16 and the embedding comes back fp32, before any clip, noise or loss."""
        return self.precision.forward(model, x)

    def _weights(self, weights) -> np.ndarray | None:
        if weights is None:
            return None
        w = np.asarray(weights, dtype=float)
        if w.shape != (self.data.num_clients,) or (w <= 0).any():
            raise ValueError(f"client_weights must be {self.data.num_clients} positive numbers, got {weights}")
        return w / w.sum()

    @torch.no_grad()
    def _fill_table(self) -> None:
        """`table_init: forward`: every client uploads its initial model's clean embedding of every record."""
        for client in self.clients:
            sent = self.wire.send(client.name, "server", "initial_embeddings", self._embed_all(client, client.x))
            self.server.table[:, client.index] = sent

    @torch.no_grad()
    def _embed_all(self, client: Client, x: torch.Tensor) -> torch.Tensor:
        step = self.cfg.eval_batch
        return torch.cat([client.model(x[i : i + step]) for i in range(0, x.shape[0], step)])

    # ---- schedule
    def next_client(self) -> int:
        return self._draw_client(self.schedule_rng, self.queue)

    def _draw_client(self, rng: np.random.Generator, queue: list[int]) -> int:
        if self.cfg.schedule == "random":
            return int(rng.choice(self.data.num_clients, p=self.weights))
        if not queue:
            queue.extend(rng.permutation(np.repeat(np.arange(self.data.num_clients), self.batches_per_pass)).tolist())
        return queue.pop()

    def planned_rounds(self) -> list[int]:
        """Each client's rounds in this run, from a replay of the data-independent schedule before training."""
        if self.cfg.schedule == "permutation":
            return [self.cfg.epochs * self.batches_per_pass] * self.data.num_clients
        rng, queue = copy.deepcopy(self.schedule_rng), []
        draws = [self._draw_client(rng, queue) for _ in range(self.total_rounds)]
        return np.bincount(draws, minlength=self.data.num_clients).tolist()

    def planned_uses(self) -> tuple[int, int]:
        """(pooled, one client): the most rounds one sample's id can be sent in this run
        (`privacy.dpzv.uses_bound` of `planned_rounds`); the known-batch epsilons use it."""
        from fedrepro.privacy.dpzv import uses_bound

        return uses_bound(self.client_rounds, self.batches_per_pass)

    def block_end(self, t: int) -> int:
        return (t * self.total_rounds) // self.num_blocks

    # ---- FederatedAlgorithm
    def round(self, t: int) -> dict:
        """One evaluation block of server rounds. A server round's statistics stay on the device (0-dim
        tensors: no host sync inside a server round) and are read here, once a block (`block_means`)."""
        stats: dict[str, list] = {}
        end = self.block_end(t)
        while self.server_round < end:
            rows = self.run_segment(self.segment(end)) if self.stacks else [self.one_round()]
            for row in rows:
                for key, value in row.items():
                    stats.setdefault(key, []).append(value)
        row = block_means(stats)
        row.update(
            server_round=self.server_round,
            epoch=self.server_round / self.rounds_per_epoch,
            bytes_up=self.wire.bytes_by_direction["up"],
            bytes_down=self.wire.bytes_by_direction["down"],
        )
        return row

    def one_round(self) -> dict:
        m = self.next_client()
        client = self.clients[m]
        ids = client.next_batch()
        self.server_round += 1
        self.wire.round = self.server_round
        return self.exchange(m, ids)

    def exchange(self, m: int, ids: np.ndarray) -> dict:
        """One server round with client m on batch `ids` (`round_program`), its messages logged after it."""
        stats = self.round_program(m, ids)
        self.log_sent()
        return stats

    def round_program(self, m: int, ids: np.ndarray) -> dict:
        """The round's query, then `serve` (a method's own draws its randomness first, then runs its device
        program, `exchange_drawn`)."""
        payload, private = self.client_query(self.clients[m], ids)
        return self.serve(m, payload, private)

    def client_query(self, client: Client, ids: np.ndarray) -> tuple[dict, object]:
        """(the message to the server, what the client keeps for its update)."""
        raise NotImplementedError

    # ---- stacked segments (`stack_clients`, stacked.py)
    def segment(self, end: int) -> list[tuple[int, np.ndarray]]:
        """The next server rounds up to the first repeated client or round `end`: (client, its batch ids) each.
        The schedule and each client's loader are drawn in the per-client loop's order (each stream is its
        own generator); the repeated client is kept for the next segment (`pending`, None at a block's end)."""
        turns: list[tuple[int, np.ndarray]] = []
        while self.server_round + len(turns) < end:
            m = self.next_client() if self.pending is None else self.pending
            self.pending = None
            if any(m == seen for seen, _ in turns):
                self.pending = m
                break
            turns.append((m, self.clients[m].next_batch()))
        return turns

    def run_segment(self, turns: list[tuple[int, np.ndarray]]) -> list[dict]:
        """Every query of the segment up front (`stacked_queries`), then each server round in schedule order as
        `exchange` runs it: message, answer, reply, the client's update (`client_reply`), then `segment_end`."""
        rows = []
        for (m, _), (payload, private) in zip(turns, self.stacked_queries(turns)):
            self.server_round += 1
            self.wire.round = self.server_round
            rows.append(self.serve(m, payload, private))
            self.log_sent()
        self.segment_end()
        return rows

    def serve(self, m: int, payload: dict, private) -> dict:
        """One server round after client m's query: up the wire, the server's answer, down, the client's update."""
        client = self.clients[m]
        msg = self.wire.carry(payload)
        answer, stats = self.server_answer(m, msg)
        reply = self.wire.carry(answer)
        # logged after the round's device program (`log_sent`), which so reads no host counter (Wire.log)
        self._sent = [(client.name, "server", self.up_kind, msg), ("server", client.name, self.down_kind, reply)]
        self.client_reply(client, private, reply)
        return stats

    def log_sent(self) -> None:
        """The last server round's two messages on the wire (bytes, records), after its device program."""
        for message in self._sent:
            self.wire.log(*message)
        self._sent = []

    def stacked_queries(self, turns: list[tuple[int, np.ndarray]]) -> list[tuple[dict, object]]:
        raise NotImplementedError

    def client_reply(self, client: Client, private, reply) -> None:
        raise NotImplementedError

    def segment_end(self) -> None:
        """After a segment's last server round (the first-order baselines' stacked backward)."""

    def stacked_inputs(self, turns, positions: list[int]) -> torch.Tensor:
        """The batches of the turns at `positions`, stacked: (clients, B, ...)."""
        return torch.stack([self.clients[turns[i][0]].x[self.ids_tensor(turns[i][1])] for i in positions])

    @torch.no_grad()
    def evaluate(self, t: int) -> dict:
        """Validation and test accuracy of the current models: the harness's measurement, off the wire (the
        held-out records' embeddings are not messages of the protocol and no epsilon covers them)."""
        out = {}
        for split, xs, y in (("val", self.data.val, self.data.y_val), ("test", self.data.test, self.data.y_test)):
            if split == "val" and xs is self.data.test:
                continue
            emb = torch.cat([self.eval_embedding(self._embed_all(c, x)) for c, x in zip(self.clients, xs)], dim=1)
            emb = self.server.input_scale * emb
            logits = torch.cat(
                [
                    self.server.head(emb[i : i + self.cfg.eval_batch])
                    for i in range(0, emb.shape[0], self.cfg.eval_batch)
                ]
            )
            out[f"{split}_loss"] = float(F.cross_entropy(logits, y))
            out[f"{split}_acc"] = float((logits.argmax(1) == y).float().mean())
        if "val_acc" not in out:
            out["val_acc"], out["val_loss"] = out["test_acc"], out["test_loss"]
        if out["val_acc"] > self.best["val_acc"]:
            self.best = {
                "val_acc": out["val_acc"],
                "test_acc": out["test_acc"],
                "test_loss": out["test_loss"],
                "round": t,
                "epoch": self.server_round / self.rounds_per_epoch,
            }
        return out

    def eval_embedding(self, h: torch.Tensor) -> torch.Tensor:
        """What the head sees of a client's embedding at evaluation (noise-free; the baselines clip it)."""
        return h

    def state_dict(self) -> dict:
        return {
            "clients": [c.state_dict() for c in self.clients],
            "server": self.server.state_dict(),
            "schedule_rng": self.schedule_rng.bit_generator.state,
            "queue": list(self.queue),
            "server_round": self.server_round,
            "best": dict(self.best),
            "wire": self.wire.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        for client, saved in zip(self.clients, state["clients"]):
            client.load_state_dict(saved)
        self.server.load_state_dict(state["server"])
        self.schedule_rng.bit_generator.state = state["schedule_rng"]
        self.queue = list(state["queue"])
        self.server_round = state["server_round"]
        self.best = dict(state["best"])
        self.wire.load_state_dict(state["wire"])

    def privacy(self) -> dict:
        raise NotImplementedError

    def embedding_privacy(self, noise: dict, clear_difference: bool = False) -> dict:
        """The baselines' record: the paper-style accounting (Poisson at B/D) beside the known-batch bound
        against the server, which receives the ids with the embeddings (`privacy.dpzv.THREAT_MODELS`), the
        bound for what the code sends (`privacy.dpzv.sent_record`; `clear_difference`: h' - h crosses in clear)
        and the two common adversaries' columns (`privacy.dpzv.adversary_record`)."""
        from fedrepro.privacy.dpzv import adversary_record, known_batch_record, sent_record, threat_model

        record = {**noise, "threat_model": threat_model(self.method).mechanism}
        if noise["sigma"] > 0:
            z = noise["noise_multiplier"]
            steps = int(noise["releases"]) // self.total_rounds  # ZOO-VFL's pair counted separately: 2
            record.update(known_batch_record(z, self.uses, self.cfg.delta, steps))
            busiest = max(self.client_rounds)
            fixed = record["eps_known_one_client"]
            record.update(
                sent_record(self.method, z, self.cfg.batch_size, busiest, self.cfg.delta, fixed, clear_difference)
            )
        record.update(adversary_record(self.method, record, table_init=self.cfg.table_init))
        return record

    def summary(self) -> dict:
        """Best-validation result, privacy record and health: a run whose reported (best-validation)
        test accuracy is not above the majority-class rate by 3 standard errors is `chance`."""
        from fedrepro.eval.health import check_chance, majority_rate

        y_test = self.data.y_test.cpu().numpy()
        health = check_chance(
            float(self.best.get("test_acc", math.nan)),
            majority_rate(y_test),
            len(y_test),
            "best-validation test accuracy",
        )
        return {
            "best": dict(self.best),
            "privacy": self.privacy(),
            "total_rounds": self.total_rounds,
            "rounds_per_epoch": self.rounds_per_epoch,
            "num_train": self.data.num_train,
            "num_test": len(y_test),  # one test example = the accuracy's resolution (the claims' verdicts)
            "client_params": [sum(p.numel() for p in c.params) for c in self.clients],
            "server_params": sum(p.numel() for p in self.server.params),
            **health.as_dict(),
        }

    # ---- shared pieces of the methods
    def ids_tensor(self, ids: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(ids, dtype=torch.long, device=self.device)


def block_means(stats: dict[str, list]) -> dict[str, float]:
    """Each statistic's float64 mean over a block's server rounds: numbers, or 0-dim tensors read from the
    device in one copy per statistic; the same bits as reading each round's value by float()."""
    means = {}
    for key, values in stats.items():
        if all(isinstance(v, torch.Tensor) for v in values):
            host = torch.stack(values).cpu().to(torch.float64).numpy()
        else:
            host = np.asarray([float(v) for v in values], dtype=np.float64)
        means[key] = float(np.mean(host))
    return means


def noisy_embedding(
    h: torch.Tensor, clip_h: float, sigma: float, generator: torch.Generator, noise: torch.Tensor | None = None
) -> torch.Tensor:
    """The baselines' local DP (VAFL's mechanism): clip each sample's embedding to L2 norm C_h and add N(0, sigma_h^2)
    to every coordinate; unchanged when sigma = 0. `noise` reuses a draw (ZOO-VFL's pair).
    (The DPZV paper's experiments: "we follow the approach in VAFL, applying the same DP mechanism
    to both VFL-CZOFO and ZOO-VFL, which involves clipping the embeddings and adding calibrated
    vector noise".)"""
    from fedrepro.privacy.mechanisms import clip_by_norm, gaussian_noise

    if sigma == 0.0:
        return h
    if noise is None:
        noise = gaussian_noise(h.shape, sigma, generator, h.dtype, h.device)
    return clip_by_norm(h, clip_h, dim=1) + noise


def embedding_input_scale(clip_h: float, sigma: float, embed_dim: int) -> float:
    """1 / sqrt(1 + e sigma_h^2 / C_h^2): the server's rescaling of noisy embeddings (see Server)."""
    import math

    return 1.0 if sigma == 0.0 else 1.0 / math.sqrt(1.0 + embed_dim * sigma**2 / clip_h**2)
