"""What every SteFFLe-paper trainer shares: data on silos, batch schedule, init, evaluation.

All trainers train a *grid* of independent logistic-regression models as one
tensor program: theta has shape (S, G, D) for S seeds and G settings (lambda x
eps x ...), D = d + 1 (bias last). Randomness is drawn per seed from its own
generators and shared by the G settings of that seed (common random numbers), so
a seed's numbers do not depend on which other seeds or settings share the batch.
rng = "streams" (default) gives each purpose (init, batches, noise, ...) its own generator;
rng = "refcode" draws them all from one torch stream per seed in the authors' order
(`RefcodeStream`), so seed s reproduces the authors' run with torch.manual_seed(s).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from fedrepro.eval import fairness
from fedrepro.fl.loop import Checkpoint, run_rounds
from fedrepro.privacy.mechanisms import gaussian_noise

from . import refcode_columns

_STREAMS = {"init": 0, "batches": 1, "noise": 2, "iterate": 3, "loss_batches": 4}
RNGS = ("streams", "refcode")


def seed_generator(seed: int, stream: str) -> torch.Generator:
    """One independent CPU generator per (seed, purpose)."""
    return torch.Generator().manual_seed(1_000_003 * int(seed) + 7919 * _STREAMS[stream] + 17)


def with_bias(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
    return torch.cat([x, torch.ones(x.shape[0], 1)], dim=1)


@dataclass
class FairData:
    """Training silos (index arrays into the training set) and the global test set."""

    x: torch.Tensor  # (n, D) with the bias column
    y: torch.Tensor  # (n,) long in [l]
    s: torch.Tensor  # (n,) long in [k]
    silos: list[torch.Tensor]  # N index tensors
    x_test: torch.Tensor
    y_test: np.ndarray
    s_test: np.ndarray
    k: int = 2
    l: int = 2
    features: list[str] | None = None  # the prepared feature names (x's columns), where known
    x_norm: torch.Tensor = field(init=False)

    def __post_init__(self):
        self.x_norm = self.x.norm(dim=1)
        covered = torch.cat(self.silos)
        if len(torch.unique(covered)) != len(covered):
            raise ValueError("silos overlap: every training index must belong to one silo")

    @classmethod
    def from_arrays(cls, x_train, y_train, s_train, x_test, y_test, s_test, silos, features=None) -> FairData:
        return cls(
            x=with_bias(x_train),
            y=torch.as_tensor(np.asarray(y_train)).long(),
            s=torch.as_tensor(np.asarray(s_train)).long(),
            silos=[torch.as_tensor(np.asarray(idx)).long() for idx in silos],
            x_test=with_bias(x_test),
            y_test=np.asarray(y_test).astype(np.int64),
            s_test=np.asarray(s_test).astype(np.int64),
            features=None if features is None else list(features),
        )

    @property
    def num_silos(self) -> int:
        return len(self.silos)

    @property
    def silo_sizes(self) -> list[int]:
        return [len(idx) for idx in self.silos]

    def centralised(self) -> FairData:
        """The same data as one silo (N = 1): the central baselines."""
        return FairData(
            self.x,
            self.y,
            self.s,
            [torch.cat(self.silos).sort().values],
            self.x_test,
            self.y_test,
            self.s_test,
            self.k,
            self.l,
            self.features,
        )


SAMPLINGS = ("poisson", "shuffle", "shuffle_keep_last", "replacement")


class BatchSchedule:
    """Which samples each silo uses in each round; every sensitive sum is divided by m.

    * "poisson" (default): every round each sample of silo j joins the batch
      independently with probability q_j = m / n_j, so the batch size is random with
      mean m. The trainers divide the batch sums by the EXPECTED size m, and the noise
      is sized for that m, so one sample moves a released mean by at most 2C/m in every
      round: the Poisson-subsampled Gaussian the accountant (`fedrepro.privacy.accountant`,
      q = m/n_j, T = epochs x rounds per epoch) composes, as long as the batch stays secret
      (Algorithm 1's clear-text g reveals it: privacy.steffle, section 4).
    * "shuffle": a fresh permutation per epoch cut into floor(min_j n_j / m) batches of
      exactly m; the remainder is dropped (re-shuffled into the next epoch), so no batch
      is short and under-noised. The accountant's Poisson assumption does not cover
      shuffling (the privacy table says so).
    * "shuffle_keep_last": the authors' code (a DataLoader per silo with shuffle=True and no
      drop_last, `federated_sampler.py`): ceil(n~/m) rounds per epoch with n~ = n // N
      (`dp_fermi_federated.py`'s number_of_batches_per_epoch); each silo walks a fresh permutation
      in batches of m, the last one short, and starts a new permutation if its batches run out
      before the epoch does. Sums are divided by each batch's REAL size (`divisor`), as their
      batch means are; `epoch_batch_sizes` gives the accountant every silo's real batch sizes.
    * "replacement": m uniform draws with replacement (Algorithm 2, line 5); a sample
      drawn twice counts twice, which the accountant does not model either.

    One epoch is ceil(max_j n_j / m) rounds (Poisson, replacement), floor(min_j n_j / m)
    rounds (shuffle) or ceil((n // N) / m) rounds (shuffle_keep_last). `epoch` returns padded
    index and weight tensors (padding slots have weight 0).
    """

    def __init__(self, silo_sizes: list[int], batch: int, sampling: str = "poisson"):
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
        self.sizes = list(silo_sizes)
        self.sampling = sampling
        if sampling == "shuffle":
            self.batch = min(batch, min(self.sizes))
            self.rounds_per_epoch = min(self.sizes) // self.batch
        elif sampling == "shuffle_keep_last":
            self.batch = min(batch, max(self.sizes))
            self.rounds_per_epoch = math.ceil(sum(self.sizes) // len(self.sizes) / self.batch)
        else:
            self.batch = min(batch, max(self.sizes))
            self.rounds_per_epoch = math.ceil(max(self.sizes) / self.batch)

    def sampling_rates(self) -> list[float]:
        """q_j = m / n_j: each sample's chance to be in one round's batch (exact for Poisson)."""
        return [min(1.0, self.batch / n_j) for n_j in self.sizes]

    def _silo_batches(self, n_j: int, perms) -> list:
        """shuffle_keep_last: silo j's R batches of one epoch, each a slice of a permutation of its
        n_j samples (`perms` yields the permutations; a new one starts when one is used up)."""
        out = []
        while len(out) < self.rounds_per_epoch:
            perm = next(perms)
            out += [perm[i : i + self.batch] for i in range(0, n_j, self.batch)]
        return out[: self.rounds_per_epoch]

    def epoch_batch_sizes(self) -> list[list[int]]:
        """Every silo's real batch sizes over one epoch, in round order (fixed for every sampling
        but Poisson, where the size is random with mean m and the list holds m)."""
        if self.sampling != "shuffle_keep_last":
            return [[self.batch] * self.rounds_per_epoch for _ in self.sizes]
        return [[len(b) for b in self._silo_batches(n_j, itertools.repeat(range(n_j)))] for n_j in self.sizes]

    def divisor(self, weight: torch.Tensor) -> torch.Tensor | float:
        """What a round's batch sums are divided by: the expected size m, or (shuffle_keep_last)
        each silo's real batch size, (S, N) from the round's weights (S, N, width)."""
        if self.sampling != "shuffle_keep_last":
            return float(self.batch)
        return weight.sum(-1)

    def epoch(self, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Local indices (N, R, width) and weights (N, R, width) for one epoch of one seed."""
        R, m, N = self.rounds_per_epoch, self.batch, len(self.sizes)
        if self.sampling == "shuffle_keep_last":
            idx, w = torch.zeros(N, R, m, dtype=torch.long), torch.zeros(N, R, m)
            for j, n_j in enumerate(self.sizes):
                perms = (torch.randperm(n_j, generator=gen) for _ in itertools.count())
                for r, rows in enumerate(self._silo_batches(n_j, perms)):
                    idx[j, r, : len(rows)], w[j, r, : len(rows)] = rows, 1.0
            return idx, w
        if self.sampling != "poisson":
            idx = torch.zeros(N, R, m, dtype=torch.long)
            for j, n_j in enumerate(self.sizes):
                if self.sampling == "replacement":
                    idx[j] = torch.randint(n_j, (R, m), generator=gen)
                else:
                    idx[j] = torch.randperm(n_j, generator=gen)[: R * m].view(R, m)
            return idx, torch.ones(N, R, m)
        members = []
        for q, n_j in zip(self.sampling_rates(), self.sizes):
            rows, cols = (torch.rand(R, n_j, generator=gen) < q).nonzero(as_tuple=True)
            members.append((rows, cols, torch.bincount(rows, minlength=R)))
        width = max(1, max(int(c.max()) for _, _, c in members))
        idx = torch.zeros(N, R, width, dtype=torch.long)
        w = torch.zeros(N, R, width)
        for j, (rows, cols, counts) in enumerate(members):
            start = torch.cumsum(counts, 0) - counts  # first member of each round
            slot = torch.arange(len(rows)) - start[rows]
            idx[j, rows, slot] = cols
            w[j, rows, slot] = 1.0
        return idx, w


class RefcodeStream:
    """One seed's randomness drawn as the authors' code draws it (rng="refcode").

    `dp_fermi_federated.py` calls torch.manual_seed(model_number) and then draws everything from
    torch's global CPU generator, in this order: FederatedBatchSampler(...) opens one DataLoader
    iterator per silo (each iterator draws an int64 base seed); the model is nn.Linear(d, 1)
    (kaiming-uniform weight, uniform bias); every epoch `start_new_epoch` opens N new iterators;
    a silo's first batch of an iterator draws its RandomSampler's seed (an int64; the permutation
    comes from a generator seeded with it); an exhausted silo opens a new iterator; on private
    cells each silo's gradient draws N(0, 1) for the weight (1 x d), the bias (1) and W (1 x 1)
    (`federated_dp_sgd.py`); every evaluation opens the test loader's iterator (one draw). The
    same torch operations on a generator seeded with the seed reproduce that sequence. Silo rows
    are numbered in training-set order (their silo DataFrame keeps df.sample's order). `columns`
    (their column i is our feature columns[i], `refcode_columns`) puts each init value and theta
    noise draw on the feature it multiplies in their run; None keeps x's own column order.
    """

    def __init__(self, seed: int, silos: list[torch.Tensor], batch: int, columns: list[int] | None = None):
        self.gen = torch.Generator().manual_seed(int(seed))
        self.order = [torch.argsort(idx) for idx in silos]  # local index of the r-th member in training order
        self.batch = batch
        self.columns = None if columns is None else torch.as_tensor(columns, dtype=torch.long)
        self.open_iterators()  # FederatedBatchSampler.__init__

    def _theta_vector(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Their (weight over their columns, bias) as our theta layout: features in x's order, bias last."""
        if self.columns is not None:
            weight = torch.zeros_like(weight).index_copy_(0, self.columns, weight)
        return torch.cat([weight, bias])

    def draw_seed(self) -> int:
        """One DataLoader iterator's (or RandomSampler's) int64 seed from the stream."""
        return int(torch.empty((), dtype=torch.int64).random_(generator=self.gen))

    def open_iterators(self) -> None:
        for _ in self.order:
            self.draw_seed()
        self.perms: list[torch.Tensor | None] = [None] * len(self.order)
        self.pos = [0] * len(self.order)

    def init_theta(self, dim: int) -> torch.Tensor:
        """nn.Linear(dim - 1, 1)'s default init from the stream, bias last."""
        weight = torch.empty(1, dim - 1)
        torch.nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=self.gen)
        bound = 1.0 / math.sqrt(dim - 1)
        bias = torch.empty(1).uniform_(-bound, bound, generator=self.gen)
        return self._theta_vector(weight[0], bias)

    def next_batch(self, j: int) -> torch.Tensor:
        """Silo j's next batch (local indices): the rest of its permutation, at most m rows."""
        n_j = len(self.order[j])
        if self.perms[j] is not None and self.pos[j] >= n_j:  # StopIteration: a new iterator
            self.draw_seed()
            self.perms[j] = None
        if self.perms[j] is None:
            sampler = torch.Generator().manual_seed(self.draw_seed())
            self.perms[j], self.pos[j] = torch.randperm(n_j, generator=sampler), 0
        rows = self.perms[j][self.pos[j] : self.pos[j] + self.batch]
        self.pos[j] += len(rows)
        return self.order[j][rows]

    def silo_noise(self, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One silo's N(0, 1) draws of a private round: theta's (weight then bias, bias last) and W's."""
        weight = torch.normal(0.0, 1.0, size=(1, dim - 1), generator=self.gen)
        bias = torch.normal(0.0, 1.0, size=(1,), generator=self.gen)
        w = torch.normal(0.0, 1.0, size=(1, 1), generator=self.gen)
        return self._theta_vector(weight[0], bias), w.reshape(())


def init_theta(seeds: list[int], dim: int, groups: int) -> torch.Tensor:
    """theta_0 as PyTorch's default nn.Linear(d, 1) init (U(-1/sqrt(d), 1/sqrt(d))), per seed, shared by settings."""
    bound = 1.0 / math.sqrt(dim - 1)
    rows = [torch.empty(dim).uniform_(-bound, bound, generator=seed_generator(s, "init")) for s in seeds]
    return torch.stack(rows)[:, None, :].expand(-1, groups, -1).clone()


def step_lr(eta0: float, epoch: int, decay: float, every: int) -> float:
    """Step decay: eta0 * decay^(epoch // every) (paper App E.2.1: x0.8 every 10 epochs)."""
    return eta0 * decay ** (epoch // every) if every > 0 else eta0


def evaluate(theta: torch.Tensor, data: FairData) -> dict[str, np.ndarray]:
    """Test error, DP and EO violation of every model, arrays of shape theta.shape[:-1]."""
    with torch.no_grad():
        y_hat = (torch.einsum("nd,...d->...n", data.x_test, theta) > 0).numpy().astype(np.int64)
    return {
        "error": fairness.misclassification_error(y_hat, data.y_test),
        "dp_violation": fairness.dp_violation(y_hat, data.s_test),
        "eo_violation": fairness.eo_violation(y_hat, data.y_test, data.s_test),
        "positive_rate": y_hat.mean(axis=-1).astype(np.float64),  # 0 or 1: a constant predictor
    }


def padded_silo_index(data: FairData) -> torch.Tensor:
    """(1, N, max n_j) tensor of the silos' global indices (padding repeats the first index)."""
    width = max(data.silo_sizes)
    out = torch.stack([torch.cat([idx, idx[:1].expand(width - len(idx))]) for idx in data.silos])
    return out[None]


def strata(data: FairData, fairness: str) -> tuple[int, torch.Tensor]:
    """Number of strata and each training sample's stratum (0 for DP, the label for EO)."""
    if fairness == "dp":
        return 1, torch.zeros_like(data.y)
    if fairness == "eo":
        return data.l, data.y.clone()
    raise ValueError(f"fairness must be 'dp' or 'eo', got {fairness!r}")


ITERATES = ("final", "random", "refcode_avg")
FAIRNESS = ("dp", "eo")


@dataclass
class ScheduleConfig:
    """Settings every SteFFLe-family trainer shares; subclasses add their own and name
    which of them must be positive in `positive`."""

    batch: int = 256
    epochs: int = 40
    eta_theta: float = 0.25
    lr_decay: float = 0.8
    decay_every: int = 10
    fairness: str = "dp"
    iterate: str = "final"
    eval_every: int = 10  # epochs between test evaluations
    sampling: str = "poisson"  # BatchSchedule: poisson | shuffle | shuffle_keep_last | replacement
    # streams: one generator per (seed, purpose) (seed_generator) | refcode: the authors' one torch stream per
    # seed (RefcodeStream), so a seed draws the init, batches and noise their torch.manual_seed(seed) draws
    rng: str = "streams"
    # rng refcode: the PYTHONHASHSEED of the authors' run whose one-hot column order (a Python set's,
    # refcode_columns) decides which feature each init value and noise draw lands on; None: x's own order
    refcode_hash_seed: int | None = None

    positive = ("eta_theta",)

    def __post_init__(self):
        if self.fairness not in FAIRNESS:
            raise ValueError(f"fairness must be one of {FAIRNESS}, got {self.fairness!r}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {self.sampling!r}")
        if self.iterate not in ITERATES:
            raise ValueError(f"iterate must be one of {ITERATES}, got {self.iterate!r}")
        if self.rng not in RNGS:
            raise ValueError(f"rng must be one of {RNGS}, got {self.rng!r}")
        if self.rng == "refcode" and (self.sampling, self.fairness) != ("shuffle_keep_last", "dp"):
            raise ValueError(
                "rng 'refcode' draws the authors' demographic-parity stream over their DataLoader batches: it needs "
                f"sampling 'shuffle_keep_last' and fairness 'dp', got {self.sampling!r} and {self.fairness!r}"
            )
        if self.refcode_hash_seed is not None and self.rng != "refcode":
            raise ValueError(
                f"refcode_hash_seed orders the authors' stream's columns: it needs rng 'refcode', got {self.rng!r}"
            )
        for key in ("batch", "epochs", "eval_every"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        for key in self.positive:
            if not getattr(self, key) > 0:
                raise ValueError(f"{key} must be > 0, got {getattr(self, key)}")


REFCODE_EVAL_START = 20  # the authors' code averages the evaluations from epoch 20 on (args_fed.py eval_start)


def final_metrics(history, iterate: str, epochs: int, random_metrics=None) -> dict[str, np.ndarray]:
    """Metrics of the returned model: the final iterate, Algorithm 1 line 13's random iterate, or
    (refcode_avg) the mean of the evaluations at epochs >= 20 as the authors' code does (the last
    evaluation when a run is shorter)."""
    if iterate == "random":
        return random_metrics
    if iterate == "final":
        return history[-1][1]
    chosen = [m for e, m in history if e >= REFCODE_EVAL_START] or [history[-1][1]]
    return {key: np.mean([m[key] for m in chosen], axis=0) for key in chosen[0]}


@dataclass
class TrainResult:
    final: dict[str, np.ndarray]  # metrics of the returned iterate, each (S, G)
    history: list[tuple[int, dict[str, np.ndarray]]]  # (epoch, metrics) at every evaluation
    theta: torch.Tensor  # final theta (S, G, D)
    rounds: int
    extra: dict = field(default_factory=dict)  # method state worth keeping (e.g. W)


class GridTrainer:
    """The epoch loop shared by every trainer of this paper (S seeds x G settings at once).

    One epoch is one round of `fedrepro.fl.loop.run_rounds` (`round`, `evaluate`,
    `state_dict`), so checkpoints, resume and the `checkpoint_every` / `checkpoint_minutes`
    policy are the shared ones. Subclasses set `noise_shapes` (per-round standard-normal
    draws per seed, keyed by name), implement `step(t, local, weight, noise)` and may extend
    `end_epoch`, `extra_state`/`load_extra_state`. `cfg` is a validated ScheduleConfig.
    """

    noise_shapes: dict[str, tuple[int, ...]] = {}
    real_batch_means = False  # divides batch sums by `batch_mean` (needed for shuffle_keep_last)

    def __init__(self, data: FairData, cfg: ScheduleConfig, seeds: list[int], groups: int):
        self.data, self.cfg, self.seeds = data, cfg, list(seeds)
        self.schedule = BatchSchedule(data.silo_sizes, cfg.batch, cfg.sampling)
        if cfg.sampling == "shuffle_keep_last" and not self.real_batch_means:
            raise ValueError(
                f"sampling 'shuffle_keep_last' needs batch means over each batch's real size, which only the "
                f"SGDA trainers compute; {type(self).__name__} divides by m: use poisson, shuffle or replacement"
            )
        self.m = float(self.schedule.batch)  # every batch sum is divided by the expected size m
        self.silo_index = padded_silo_index(data)
        self.rounds = cfg.epochs * self.schedule.rounds_per_epoch
        self.epoch = 0
        self.gens = {name: [seed_generator(s, name) for s in self.seeds] for name in ("batches", "noise")}
        if cfg.rng == "refcode":
            columns = None
            if cfg.refcode_hash_seed is not None:
                if data.features is None:
                    raise ValueError("refcode_hash_seed needs the prepared feature names (meta.json feature_names)")
                columns = refcode_columns.column_permutation(data.features, cfg.refcode_hash_seed)
            self.streams = [RefcodeStream(s, data.silos, self.schedule.batch, columns) for s in self.seeds]
            self.gens["refcode"] = [st.gen for st in self.streams]  # checkpointed with the others
            init = torch.stack([st.init_theta(data.x.shape[1]) for st in self.streams])
            self.theta = init[:, None, :].expand(-1, groups, -1).clone()
        else:
            self.theta = init_theta(self.seeds, data.x.shape[1], groups)
        t_hat = [
            int(torch.randint(1, self.rounds + 1, (1,), generator=seed_generator(s, "iterate"))) for s in self.seeds
        ]
        self.t_hat = torch.tensor(t_hat)
        self.theta_hat = self.theta.clone()
        self.history: list[tuple[int, dict[str, np.ndarray]]] = []

    def batch_mean(self, summed: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Batch sums (S, G, N, ...) over the schedule's divisor: m, or each silo's real batch size
        (shuffle_keep_last) from the round's weights (S, N, width)."""
        d = self.schedule.divisor(weight)
        if isinstance(d, float):
            return summed / d
        return summed / d.clamp_min(1.0).view(d.shape[0], 1, d.shape[1], *([1] * (summed.dim() - 3)))

    def lr(self) -> float:
        return step_lr(self.cfg.eta_theta, self.epoch, self.cfg.lr_decay, self.cfg.decay_every)

    def batch(self, local: torch.Tensor, cells_of: torch.Tensor | None = None):
        """Rows of a round's batches: x (S,N,m,D), y float, ||x||, and the cell index of each sample."""
        glob = torch.gather(self.silo_index.expand(local.shape[0], -1, -1), 2, local)
        xb = self.data.x.index_select(0, glob.view(-1)).view(*glob.shape, -1)
        cell = cells_of[glob] if cells_of is not None else None
        return xb, self.data.y[glob].float(), self.data.x_norm[glob], cell

    def remember_iterate(self, t: int) -> None:
        """Keep theta_{t+1} of the seeds whose random output index t_hat equals t + 1."""
        hit = self.t_hat == t + 1
        if hit.any():
            self.theta_hat[hit] = self.theta[hit]

    def standard_normal(self, shape: tuple[int, ...]) -> torch.Tensor:
        """N(0, 1) draws of `shape` per seed, (S, *shape), from each seed's noise generator; the
        trainers scale them by each setting's sigma, so the settings of a seed share them."""
        return torch.stack([gaussian_noise(shape, 1.0, g) for g in self.gens["noise"]])

    def draws_noise(self) -> bool:
        """Whether this trainer's settings draw privacy noise (rng refcode: all of them or none)."""
        return False

    def _draw_refcode_epoch(self):
        """One epoch's batches and noise from every seed's RefcodeStream, in the authors' order:
        open the silos' iterators, then per round and silo the batch and (private) its noise. Their
        1 x 1 W is entry [0, 1] of our (k, l) W (fermi.w_mask), where its noise goes."""
        if set(self.noise_shapes) != {"u", "V"}:
            raise ValueError(f"rng 'refcode' draws Algorithm 1's noise (u, V); {type(self).__name__} has none")
        R, N, m = self.schedule.rounds_per_epoch, self.data.num_silos, self.schedule.batch
        S, D, private = len(self.streams), self.data.x.shape[1], self.draws_noise()
        local, weight = torch.zeros(S, N, R, m, dtype=torch.long), torch.zeros(S, N, R, m)
        noise = {name: torch.zeros(S, R, *shape) for name, shape in self.noise_shapes.items()}
        for s, stream in enumerate(self.streams):
            stream.open_iterators()
            for r in range(R):
                for j in range(N):
                    rows = stream.next_batch(j)
                    local[s, j, r, : len(rows)], weight[s, j, r, : len(rows)] = rows, 1.0
                    if private:
                        noise["u"][s, r, j], noise["V"][s, r, j, 0, 0, 1] = stream.silo_noise(D)
        return local, weight, noise

    def _draw_epoch(self):
        if self.cfg.rng == "refcode":
            return self._draw_refcode_epoch()
        R = self.schedule.rounds_per_epoch
        batches = [self.schedule.epoch(g) for g in self.gens["batches"]]
        width = max(b[0].shape[-1] for b in batches)  # Poisson batches: pad to the widest

        def pad(t):
            return torch.nn.functional.pad(t, (0, width - t.shape[-1]))

        local = torch.stack([pad(b[0]) for b in batches])  # (S, N, R, width)
        weight = torch.stack([pad(b[1]) for b in batches])  # (S, N, R, width), 0 = padding
        noise = {name: self.standard_normal((R, *shape)) for name, shape in self.noise_shapes.items()}
        return local, weight, noise  # each noise (S, R, *shape)

    def step(self, t: int, local, weight, noise) -> None:
        raise NotImplementedError

    def end_epoch(self) -> None:
        """Hook after each epoch's rounds (PF-LD's dual step)."""

    def diagnostics(self) -> dict[str, np.ndarray]:
        """Method state worth logging at each evaluation, arrays (S, G) (SteFFLe: W's trajectory)."""
        return {}

    def extra_state(self) -> dict:
        return {}

    def load_extra_state(self, state: dict) -> None:
        pass

    def result_extra(self) -> dict:
        return {}

    def state_dict(self) -> dict:
        return {
            "theta": self.theta,
            "epoch": self.epoch,
            "theta_hat": self.theta_hat,
            "history": self.history,
            "gens": {k: [g.get_state() for g in v] for k, v in self.gens.items()},
            "extra": self.extra_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.theta, self.epoch = state["theta"], state["epoch"]
        self.theta_hat, self.history = state["theta_hat"], state["history"]
        for k, states in state["gens"].items():
            for g, st in zip(self.gens[k], states):
                g.set_state(st)
        self.load_extra_state(state["extra"])

    def round(self, t: int) -> dict:
        """Epoch t (1-based) of every model: its rounds of Algorithm 1 (or the baseline's step)."""
        R = self.schedule.rounds_per_epoch
        with torch.no_grad():
            local, weight, noise = self._draw_epoch()
            for r in range(R):
                self.step(
                    self.epoch * R + r,
                    local[:, :, r],
                    weight[:, :, r],
                    {name: value[:, r] for name, value in noise.items()},
                )
            self.end_epoch()
        self.epoch += 1
        if self.cfg.rng == "refcode" and self.epoch % self.cfg.eval_every == 0:
            for stream in self.streams:
                stream.draw_seed()  # their evaluation opens the test loader's iterator
        return {}

    def evaluate(self, t: int) -> dict:
        """Test metrics of every model after epoch t, kept in `history` (arrays do not fit a row)."""
        with torch.no_grad():
            self.history.append((self.epoch, {**evaluate(self.theta, self.data), **self.diagnostics()}))
        return {}

    def run(self, checkpoint: Checkpoint | None = None) -> TrainResult:
        """Train all epochs, resuming from `checkpoint` if its file exists."""
        cfg = self.cfg
        run_rounds(self, cfg.epochs, checkpoint, eval_every=cfg.eval_every, desc="epochs")
        with torch.no_grad():
            random_metrics = evaluate(self.theta_hat, self.data) if cfg.iterate == "random" else None
        return TrainResult(
            final_metrics(self.history, cfg.iterate, cfg.epochs, random_metrics),
            self.history,
            self.theta,
            self.rounds,
            self.result_extra(),
        )


class SettingsConcat:
    """Trainers of disjoint settings of one job, run one after the other; `run` joins their results
    along the settings axis in the job's order. rng refcode needs it: the authors' stream draws noise
    only on private runs, so private and non-private cells of a seed see different batches."""

    def __init__(self, parts: list[tuple[list[int], GridTrainer]]):
        self.parts = parts  # (the job's setting positions, their trainer)
        self.rounds = parts[0][1].rounds

    def run(self, checkpoint: Checkpoint | None = None) -> TrainResult:
        results = []
        for i, (_, trainer) in enumerate(self.parts):
            own = (
                None
                if checkpoint is None
                else dataclasses.replace(
                    checkpoint,
                    path=checkpoint.path.with_name(f"{checkpoint.path.stem}.part{i}{checkpoint.path.suffix}"),
                )
            )
            results.append(trainer.run(own))
        positions = [idx for idx, _ in self.parts]

        def join(arrays):
            first = np.asarray(arrays[0])
            out = np.empty((first.shape[0], sum(len(p) for p in positions), *first.shape[2:]), dtype=first.dtype)
            for idx, a in zip(positions, arrays):
                out[:, idx] = np.asarray(a)
            return out

        def join_metrics(dicts):
            return {k: join([d[k] for d in dicts]) for k in dicts[0]}

        history = [(steps[0][0], join_metrics([m for _, m in steps])) for steps in zip(*(r.history for r in results))]
        theta = torch.as_tensor(join([r.theta.numpy() for r in results]))
        extra = {k: torch.as_tensor(join([r.extra[k].numpy() for r in results])) for k in results[0].extra}
        return TrainResult(join_metrics([r.final for r in results]), history, theta, self.rounds, extra)


def clip_coef(c: torch.Tensor, xnorm: torch.Tensor, clip: float) -> torch.Tensor:
    """Per-sample clipping of gradients c_i x_i to norm <= clip, done on the scalar c_i.

    xnorm (S, N, m) broadcasts over the settings axis of c (S, G, N, m).
    """
    limit = (clip / xnorm.clamp_min(1e-30))[:, None]
    return torch.minimum(torch.maximum(c, -limit), limit)
