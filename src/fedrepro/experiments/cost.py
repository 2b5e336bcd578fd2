"""Work per training unit, counted without a GPU, and the two-constant model that turns it into seconds.

A unit (FedSC round, FedAL iteration, DPZV epoch) is composed of training steps and forward passes of
the paper's networks at the paper's shapes (`fedrepro.plan` composes them from each run's spec). For
each step this module counts

* FLOPs: `torch.utils.flop_counter.FlopCounterMode` (matmuls and convolutions, forward and backward);
* kernel launches: every ATen operator that computes (views and allocations launch nothing), the
  optimiser's foreach ops counted once each, as a GPU runs them (`fedrepro.fl.optim`: one group).

Counting runs on PyTorch's meta device (no arithmetic) except for a pre-trained BERT, whose
attention-mask code reads tensor values: it runs on the CPU at batch 2 and its FLOPs are scaled to
the batch (a transformer's FLOPs and its operators are linear in, and independent of, the batch).

Seconds per unit = FLOPs x seconds_per_flop + launches x seconds_per_launch (`Constants`), fitted to
the measured rows of `benchmarks/unit_costs.csv` by least squares on relative error (`fit`). The FLOP
floor is FLOPs / the device's peak (`PEAK_FLOPS`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# Dense bf16 tensor-core peak, FLOP/s. NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): 1,979
# TFLOPS bf16 "with sparsity", so 989.5 dense; the H100 SXM's is the same (H100 datasheet).
PEAK_FLOPS = {"H200": 989.5e12, "H100": 989.5e12}


@dataclass(frozen=True)
class Work:
    """FLOPs and kernel launches of one step, unit or job; of them, `autocast_flops` run in a path that a
    precision lever can speed up (FedSC's training forwards and backwards, fl/precision.py) and
    `graphed_launches` in a round or step that is ready for CUDA graphs (fedrepro.experiments.levers), whose
    graphs cost `capture_launches` at eager launch cost to capture."""

    flops: float = 0.0
    launches: float = 0.0
    autocast_flops: float = 0.0
    graphed_launches: float = 0.0
    # launches run eagerly to capture the CUDA graphs the unit's run replays (each distinct step form and batch
    # shape once per run, amortised over its units): priced only where a graph lever applies, never today
    capture_launches: float = 0.0

    def __add__(self, other: Work) -> Work:
        return Work(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    def __mul__(self, k: float) -> Work:
        return Work(*(a * k for a in dataclasses.astuple(self)))

    def autocast(self) -> Work:
        """This work, all of its FLOPs in the precision lever's path."""
        return dataclasses.replace(self, autocast_flops=self.flops)

    def graphed(self) -> Work:
        """This work, all of its launches in a graph-ready round or step."""
        return dataclasses.replace(self, graphed_launches=self.launches)

    __rmul__ = __mul__


@dataclass(frozen=True)
class Constants:
    """Seconds per FLOP (1 / achieved FLOP/s) and per kernel launch of one device, and how they combine:
    added (the host launches, then the device computes), or `overlap`: the device runs a kernel while the host
    launches the next ones, so a unit takes the longer of the two (large kernels hide the launches, small ones
    leave the device waiting for the host)."""

    seconds_per_flop: float
    seconds_per_launch: float
    device: str = "H200"
    paper_factors: dict = field(default_factory=dict, compare=False)  # set by fedrepro.plan.price
    overlap: bool = False

    def seconds(self, work: Work) -> float:
        device, host = work.flops * self.seconds_per_flop, work.launches * self.seconds_per_launch
        return max(device, host) if self.overlap else device + host

    def floor(self, work: Work) -> float:
        """The FLOP floor: every FLOP at the device's dense bf16 peak, no launch cost."""
        return work.flops / PEAK_FLOPS[self.device]

    @property
    def achieved_flops(self) -> float:
        """FLOP/s the fit implies (inf when the measured rows leave FLOPs free)."""
        return 1.0 / self.seconds_per_flop if self.seconds_per_flop else math.inf

    @property
    def achieved_fraction(self) -> float:
        return self.achieved_flops / PEAK_FLOPS[self.device]


def fit(points: Iterable[tuple[Work, float]], device: str = "H200", overlap: bool = False) -> Constants:
    """Constants minimising sum((predicted / measured - 1)^2) over (work, measured seconds) points,
    both constants >= 0 (a constant that would go negative is set to 0 and the other refitted).
    `overlap`: the max() model, searched around the additive fit (`_fit_overlap`)."""
    points = list(points)
    rows = [(w.flops / s, w.launches / s) for w, s in points]
    if not rows:
        raise ValueError("fitting the cost model needs at least one measured row")
    if overlap:
        return _fit_overlap(points, fit(points, device))

    def one(column: int) -> float:
        num = sum(r[column] for r in rows)
        den = sum(r[column] ** 2 for r in rows)
        return num / den if den else 0.0

    aa = sum(f * f for f, _ in rows)
    bb = sum(n * n for _, n in rows)
    ab = sum(f * n for f, n in rows)
    a1 = sum(f for f, _ in rows)
    b1 = sum(n for _, n in rows)
    det = aa * bb - ab * ab
    if len(rows) >= 2 and det > 1e-12 * aa * bb:
        a, b = (a1 * bb - b1 * ab) / det, (b1 * aa - a1 * ab) / det
        if a >= 0 and b >= 0:
            return Constants(a, b, device)
    candidates = [Constants(one(0), 0.0, device), Constants(0.0, one(1), device)]
    return min(candidates, key=lambda c: relative_error(c, points))


def _fit_overlap(points: list[tuple[Work, float]], additive: Constants) -> Constants:
    """The overlap model's constants: max() makes the error piecewise, so a log grid of 41 x 41 around each
    constant's value (the additive fit's, or what the rows give alone: each row's FLOP or launch rate) is
    searched, then zoomed in 8 times (deterministic, no scipy: the planner runs at every Snakemake start)."""
    flop_rate = max(s / w.flops for w, s in points if w.flops) if any(w.flops for w, _ in points) else 0.0
    launch_rate = max(s / w.launches for w, s in points if w.launches) if any(w.launches for w, _ in points) else 0.0
    start = [math.log10(additive.seconds_per_flop or flop_rate or 1e-15)]
    start.append(math.log10(additive.seconds_per_launch or launch_rate or 1e-6))

    def constants(x) -> Constants:
        return Constants(10 ** x[0], 10 ** x[1], additive.device, overlap=True)

    best, span = tuple(start), 2.0
    for _ in range(9):
        grid = [(best[0] + span * (i / 20 - 1), best[1] + span * (j / 20 - 1)) for i in range(41) for j in range(41)]
        best = min(grid, key=lambda x: relative_error(constants(x), points))
        span /= 4
    return constants(best)


def relative_error(constants: Constants, points: Iterable[tuple[Work, float]]) -> float:
    return sum((constants.seconds(w) / s - 1) ** 2 for w, s in points)


# ------------------------------------------------------------------------------------------ counting
# ATen operators that run no kernel: views, allocations and metadata.
_NO_KERNEL = {
    "empty",
    "empty_like",
    "empty_strided",
    "detach",
    "lift_fresh",
    "_to_copy_meta",
    "set_",
    "resize_",
    "_local_scalar_dense",
    "is_same_size",
    "sym_size",
    "sym_stride",
    "sym_numel",
}


def _launch_counter():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Launches(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if not func.is_view and name not in _NO_KERNEL:
                self.count += 1
            return func(*args, **(kwargs or {}))

    return Launches()


def count(fn: Callable[[], object]) -> Work:
    """FLOPs and kernel launches of `fn()` (its tensors on the meta device or the CPU)."""
    from torch.utils.flop_counter import FlopCounterMode

    launches = _launch_counter()
    with FlopCounterMode(display=False) as flops, launches:
        fn()
    return Work(float(flops.get_total_flops()), float(launches.count))


@dataclass(frozen=True)
class Step:
    """One counted step: a registered model (`fedrepro.models`) on a batch of one input shape.

    mode: `forward` (no gradient), `train` (forward, backward, a foreach optimiser step), `train_ssl`
    (FedSC: the projector head of `head` on top, SGD with momentum; loss on the projector output).
    """

    model: str
    options: tuple  # sorted (key, value) pairs, JSON-encoded values
    shape: tuple
    batch: int
    mode: str
    optimizer: str = "adam"
    head: tuple = ()  # FedSC projector: (hidden, out)

    @classmethod
    def of(cls, model: str, options: dict, shape, batch: int, mode: str, optimizer: str = "adam", head=()) -> Step:
        opts = tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in options.items()))
        return cls(model, opts, tuple(int(s) for s in shape), int(batch), mode, optimizer, tuple(head))

    @property
    def key(self) -> str:
        return json.dumps(
            [self.model, dict(self.options), list(self.shape), self.batch, self.mode, self.optimizer, list(self.head)]
        )

    @classmethod
    def from_key(cls, key: str) -> Step:
        model, options, shape, batch, mode, optimizer, head = json.loads(key)
        return cls(model, tuple(sorted(options.items())), tuple(shape), batch, mode, optimizer, tuple(head))

    @property
    def kwargs(self) -> dict:
        return {k: json.loads(v) for k, v in self.options}


def _tokens(step: Step) -> bool:
    return step.model == "vfl_text_encoder"


def _pretrained(step: Step) -> bool:
    return _tokens(step) and bool(step.kwargs.get("pretrained_dir") or step.kwargs.get("bert_config") is not None)


# bert-base-uncased (transformers' BertConfig defaults): what `pretrained_dir` holds at paper scale
BERT_BASE: dict = {}


STACKED = "_stacked"  # mode suffix: the step of a group of clients stacked by fedrepro.fl.batched.Stack
# mode of a zeroth-order direction's step (`direction_step`): the launches of one round's direction over the
# model's parameters, counted by the method's module (its `client_direction_launches`), no FLOPs
DIRECTION = "direction"
ZO_METHODS = {  # zeroth-order methods: the module whose client_direction_launches counts a round's direction
    "dpzv": "fedrepro.algorithms.dpzv.dpzv",
    "zoo_vfl": "fedrepro.algorithms.dpzv.zoo_vfl",
}


def direction_step(method: str, step: Step, kind: str, momentum: float) -> Step:
    """The step that counts `method`'s direction over the model of `step` (its `optimizer` field holds
    the method, the direction's kind and the momentum; batch 1: the direction does not depend on it)."""
    return dataclasses.replace(step, batch=1, mode=DIRECTION, optimizer=f"{method}:{kind}:{float(momentum)!r}")


def direction_launches(step: Step) -> int:
    """Kernel launches of a `direction_step` (the method's module imported only here, to count)."""
    import importlib

    method, kind, momentum = step.optimizer.split(":")
    numels, buffers = parameter_numels(step)
    count_launches = importlib.import_module(ZO_METHODS[method]).client_direction_launches
    return count_launches(numels, buffers, kind, float(momentum))


# `Step.optimizer` of a training step: fl/optim.py's foreach SGD (momentum 0.9, weight decay) or Adam, one
# foreach group as on a GPU; `adam_loop` is the per-tensor Adam fl/optim.py ran before its foreach ops
# (at 72f0df1: lerp_, mul_, addcmul_, sqrt, div, add_, addcdiv_ per tensor, 7 launches each), which the
# FedAL rows of benchmarks/unit_costs.csv timed.
OPTIMIZERS = ("sgd", "adam", "adam_loop")


def count_step(step: Step) -> Work:
    """FLOPs and launches of one `step` at its batch (see the module docstring for the device).

    `train_stacked` / `forward_stacked`: one client's FLOPs and the launches of the whole group's step,
    which do not depend on the group's size (`stacked_launches`); FlopCounterMode would over-count
    the grouped convolutions' weight gradients that vmap makes of a stacked step."""
    import torch

    if step.mode == DIRECTION:
        return Work(0.0, direction_launches(step))
    if step.mode.endswith(STACKED):
        alone = dataclasses.replace(step, mode=step.mode.removesuffix(STACKED))
        return Work(count_step(alone).flops, stacked_launches(alone))

    from fedrepro.fl import optim
    from fedrepro.models import build_model

    kwargs = step.kwargs
    batch = step.batch
    device = "meta"
    if _pretrained(step):  # transformers reads mask values: run it for real on the CPU at batch 2
        kwargs = {**{k: v for k, v in kwargs.items() if k != "pretrained_dir"}, "bert_config": BERT_BASE}
        batch, device = 2, "cpu"
    with torch.device(device):
        torch.manual_seed(0)
        net = build_model(step.model, **kwargs)
        if step.head:
            hidden, out = step.head
            width = net.feature_dim
            net = torch.nn.Sequential(
                net, torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, out)
            )
        x = torch.zeros((batch, *step.shape), dtype=torch.long) if _tokens(step) else torch.zeros((batch, *step.shape))
    params = [p for p in net.parameters() if p.requires_grad]
    if step.mode == "forward":
        net.eval()

        def fn():
            with torch.no_grad():
                net(x)
    else:
        net.train()
        if step.optimizer not in OPTIMIZERS:
            raise ValueError(f"step optimizer {step.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        if step.optimizer == "adam_loop":
            opt = _LoopAdam(params)
        elif step.optimizer == "sgd":
            opt = optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=5e-4)
        else:
            opt = optim.Adam(params, lr=1e-3)

        def fn():
            out = net(x)
            out.float().square().mean().backward()
            saved = optim.CPU_GROUP_ELEMENTS
            optim.CPU_GROUP_ELEMENTS = math.inf  # one foreach group, as on a GPU
            try:
                opt.step()
            finally:
                optim.CPU_GROUP_ELEMENTS = saved

    work = count(fn)
    return Work(work.flops * step.batch / batch, work.launches)


class _LoopAdam:
    """fl/optim.Adam as the FedAL rows of benchmarks/unit_costs.csv ran it (72f0df1), for counting only: per tensor
    lerp_, mul_, addcmul_, sqrt, div, add_, addcdiv_ (its step count and bias corrections Python floats)."""

    def __init__(self, params):
        import torch

        self.params = params
        self.m, self.v = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]

    def step(self) -> None:
        import torch

        with torch.no_grad():
            for p, m, v in zip(self.params, self.m, self.v):
                m.lerp_(p.grad, 0.1)
                v.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
                p.addcdiv_(m, (v.sqrt() / 0.03).add_(1e-8), value=-0.01)


def stacked_launches(step: Step, clients: int = 2) -> float:
    """Kernel launches of `step` run by `clients` stacked models (FedAL's batched clients: vmap forward,
    one backward of the summed losses, one Adam over the stacked tensors), training-mode BatchNorm as
    FedAL's anchors run it."""
    import torch

    from fedrepro.fl import optim
    from fedrepro.fl.batched import Stack

    nets = [_meta_model(step) for _ in range(clients)]
    stack = Stack(nets, [optim.Adam(n.parameters(), lr=1e-3) for n in nets])
    x = torch.zeros((clients, step.batch, *step.shape), device="meta")

    def fn():
        if step.mode == "forward":
            with torch.no_grad():
                stack.forward(x)
            return
        saved = optim.CPU_GROUP_ELEMENTS
        optim.CPU_GROUP_ELEMENTS = math.inf  # one foreach group, as on a GPU
        try:
            stack.step(stack.forward(x).float().square().flatten(1).mean(1).sum())
        finally:
            optim.CPU_GROUP_ELEMENTS = saved

    return count(fn).launches


def _meta_model(step: Step):
    """The step's model on the meta device (shapes only; a pre-trained BERT as bert-base's architecture)."""
    import torch

    from fedrepro.models import build_model

    kwargs = step.kwargs
    if _pretrained(step):
        kwargs = {**{k: v for k, v in kwargs.items() if k != "pretrained_dir"}, "bert_config": BERT_BASE}
    with torch.device("meta"):
        return build_model(step.model, **kwargs)


def parameter_numels(step: Step) -> tuple[list[int], int]:
    """Elements of each trainable parameter tensor of the step's model, in order (what a ZO direction's
    buckets cover: `fedrepro.algorithms.dpzv.zo.bucket_sizes`), and how many buffers the model has."""
    net = _meta_model(step)
    return [p.numel() for p in net.parameters() if p.requires_grad], sum(1 for _ in net.buffers())


class Counts:
    """Counted steps by key (`benchmarks/unit_counts.csv`); a missing step is recorded in `missing`
    and costs nothing, so that one pass over the plan lists every step to count."""

    def __init__(self, table: dict[str, Work] | None = None):
        self.table = table or {}
        self.missing: set[str] = set()

    def __call__(self, step: Step) -> Work:
        work = self.table.get(step.key)
        if work is None:
            self.missing.add(step.key)
            return Work()
        return work


def load_counts(path) -> Counts:
    import csv

    table = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            table[row["step"]] = Work(float(row["flops"]), float(row["launches"]))
    return Counts(table)


def write_counts(path, steps: Iterable[str], kept: dict[str, Work] | None = None) -> int:
    """Count every step key in `steps` and write the table with the rows `kept` (sorted, so a re-count
    diffs cleanly); returns how many steps it counted."""
    import csv

    counted = {key: count_step(Step.from_key(key)) for key in set(steps)}
    rows = []
    for key, work in sorted({**(kept or {}), **counted}.items()):
        rows.append([key, f"{work.flops:.6g}", f"{work.launches:.0f}"])
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "flops", "launches"])
        writer.writerows(rows)
    return len(counted)
