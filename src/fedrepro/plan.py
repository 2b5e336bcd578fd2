"""What a configuration starts: jobs, the FLOP floor and the estimated GPU-hours per paper and table.

    python -m fedrepro.plan --configfile config.yaml configs/paper.yaml

The training runs come from the same planners the Snakefile uses (`fedrepro.experiments.<paper>`),
so the job counts are the pipeline's. Each run's unit (FedSC round, FedAL iteration, DPZV epoch per
privacy variant, SteFFLe epoch of a vectorised grid job, FedAvg round) is composed below from
counted steps of the paper's networks at the paper's shapes (`fedrepro.experiments.cost`: FLOPs and
kernel launches, `benchmarks/unit_counts.csv`, written by `benchmarks/cost_counts.py` on a CPU):

* seconds per unit = FLOPs x seconds per FLOP + launches x seconds per launch, two constants per
  device fitted to the measured rows of `benchmarks/unit_costs.csv` (`cost.fit`); `--overlap`: the longer
  of the two times instead of their sum (the device computing while the host launches), fitted the same way;
* a run on a measured pool (same paper, unit, data set and model) takes that row's seconds, scaled by
  the model's ratio of its work to the work of the run the row measured (another method, another
  participation, another number of clients): "measured" in the report; the most specific row wins
  (the method's own, then a row for every method, then another method's), then the newest (last);
* any other run takes the model's seconds times its paper's factor, the geometric mean of measured /
  modelled seconds over the paper's rows (what the paper's code runs besides the counted steps);
* the FLOP floor is the FLOPs at the device's dense bf16 peak (`cost.PEAK_FLOPS`).

SteFFLe (logistic regression, CPU-sized) and FedAvg cost 0.05 s per epoch / round (no GPU work).
"""

from __future__ import annotations

import argparse
import csv
import functools
import importlib
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from fedrepro.config import ITERATION_KEY, check_config, enabled_papers
from fedrepro.data.catalog import DATASETS
from fedrepro.experiments import levers
from fedrepro.experiments.cost import ZO_METHODS, Constants, Counts, Step, Work, direction_step, fit, load_counts

REPO = Path(__file__).resolve().parents[2]
COSTS = REPO / "benchmarks" / "unit_costs.csv"
COUNTS = REPO / "benchmarks" / "unit_counts.csv"
DEVICE = "H200"
CPU_SECONDS = 0.05  # SteFFLe epoch / FedAvg round: CPU-sized models, no measured GPU row needed
EVAL_BATCH = 1000  # FedAL's eval_batch_size; FedSC's kNN and probe feature passes use the training batch


@dataclass(frozen=True)
class Cost:
    paper: str
    unit: str
    dataset: str
    model: str
    method: str
    device: str
    seconds: float
    source: str
    setting: str = "*"  # the measured run's setting (a prefix), * for any
    flops: float = math.nan  # the measured unit's counted work (benchmarks/cost_counts.py fills them in)
    launches: float = math.nan


def load_costs(path: Path = COSTS) -> list[Cost]:
    with open(path, newline="") as f:
        return [
            Cost(
                r["paper"],
                r["unit"],
                r["dataset"],
                r["model"],
                r["method"],
                r["device"],
                float(r["seconds"]),
                r["source"],
                r.get("setting") or "*",
                float(r.get("flops") or "nan"),
                float(r.get("launches") or "nan"),
            )
            for r in csv.DictReader(f)
        ]


@dataclass
class Job:
    """One training job: its paper, its run (key: data set, method, setting, seed tag), its work per
    unit and seed, and its price (set by `price`)."""

    paper: str
    key: tuple
    units: float
    unit: str
    seconds_per_unit: float
    seeds: int
    measured: bool
    model: str = "*"
    work: Work = field(default_factory=Work)
    floor_per_unit: float = 0.0
    lever_ratio: float = 1.0  # seconds with the applied levers / today's (experiments/levers.py)

    @property
    def gpu_hours(self) -> float:
        return self.units * self.seconds_per_unit * self.seeds / 3600.0

    @property
    def lever_hours(self) -> float:
        return self.gpu_hours * self.lever_ratio

    @property
    def floor_hours(self) -> float:
        return self.units * self.floor_per_unit * self.seeds / 3600.0


# ---------------------------------------------------------------------------------------- composition
# Each function returns the work of one unit of one seed. What each unit runs, read from the code:
# FedSC (algorithms/fedsc/base.py): a participating client trains `local_epochs` epochs of its data,
#   one forward of 2V views concatenated per step (FedX: 3V, the anchors' views too); BYOL methods' target
#   network and FedX's frozen global model also forward them; every sharing round (after `sharing.after`
#   of the rounds, every `sharing.every`; eps = inf shares too, with sigma 0) DP-CalR forwards
#   `passes x views_per_pass` views of every sample of the syncing clients (`dpcalr_images`); the kNN
#   monitor forwards the training and test images every `knn.every` rounds.
# FedAL (algorithms/fedal/*.py): an iteration (a round / tau) is one local and one global step per
#   client (FD, FedAvg: local only), plus a frozen anchor forward per step for the LF methods
#   (FedAL, FedMD-LF: not the first of each stage's tau, which is the live forward); FCCL and FCCL+: one
#   collaborative step per iteration and `local_steps` local steps per round of tau, each local step with
#   its frozen teachers' forwards (FCCL_TEACHERS), and FCCL's `pretrain_iters` teacher steps; every client's test forward at
#   each of the `evals` evaluations. Clients share the pool's architectures equally. FedAL, FedMD-LF,
#   FedMD, CFD, FedProto, FD, FedAvg, FedDF, FedDF-AL, FCCL and FCCL+ (spec `batched`, default true on a GPU) run each
#   architecture's clients as one stacked step (fl/batched.py `Stack`): every client's FLOPs, the launches
#   once per architecture (cost.py `_stacked` steps); their pretraining (FCCL's teachers' aside) and evaluation stay per client, and
#   so does FedDF's server step (one per group model; its N teachers' forwards are stacked per group).
# DPZV (algorithms/dpzv/*.py): an epoch is M floor(D/B) server rounds (D: training rows less the
#   validation holdout); a round is one client's message: two perturbed forwards for the zeroth-order
#   methods (DPZV, ZOO-VFL) plus their direction's kernel launches (drawn in flat buckets: the module's
#   `client_direction_launches`, counted from the model's parameter shapes), a training step for VAFL
#   and VFL-CZOFO (their clients backpropagate), and the server head's step (SGD: a training step;
#   `server_update: zo`: two head forwards and the same direction launches over the head); each
#   evaluation forwards the validation and test rows through every client. With `stack_clients` (default
#   true on a GPU; not for a Hugging Face BERT, which vmap cannot run) each segment of consecutive rounds
#   of distinct clients (algorithms/dpzv/stacked.py) runs its queries as one stacked program per client
#   shape: every client's FLOPs, the stacked forward's (ZO: one over the 2K perturbed slots) or training
#   step's launches once per segment, and per client its direction, its parameter snapshots (one
#   multi-tensor copy each) and, first-order, its own SGD step; `expected_segment_length` rounds a segment.
FEDAL_STEPS = {  # method: (training steps, frozen forwards) per client and iteration
    "fedal": (2, 2),
    "fedmd_lf": (2, 2),
    "fedmd": (2, 0),
    "fedproto": (2, 0),
    "cfd": (2, 0),
    "feddf": (1, 0),  # + the server's distillation (FEDAL_SERVER_DISTILL)
    "feddf_al": (1, 0),
    "fd": (1, 0),
    "fedavg": (1, 0),
}
LIVE_FIRST_ANCHOR = {"fedal", "fedmd_lf"}  # algorithms/fedal/fedal.py: FedAL.share_first_anchor
FCCL_TEACHERS = {"fccl": 2, "fccl_plus": 1}  # fccl.py: frozen forwards per local step (inter + intra; FCCL+: inter)
FEDAL_STACKED = {  # algorithms/fedal: Federation(batched=spec["batched"])
    *("fedal", "fedmd_lf", "fedmd", "cfd"),
    *("fedproto", "fd", "fedavg", "feddf", "feddf_al"),  # feddf: the clients' steps and the teachers' forwards
    *("fccl", "fccl_plus"),  # FCCL's teacher pretraining stacked too
}
FEDAL_GRAPH_READY = {  # methods whose stacked steps are proven graph-ready (levers.py's FedAL graph levers)
    *("fedal", "fedmd_lf", "fedmd"),  # tests/fedal/test_graph_ready.py, test_baselines_graph_ready.py
    *("fccl", "fccl_plus", "cfd", "fedproto", "fd"),  # fedproto: the `public_features` variant only
    *("fedavg", "feddf", "feddf_al"),  # the clients' step and FedDF's teachers' forward (not the server's step)
}
FEDAL_SERVER_DISTILL = {"feddf", "feddf_al"}  # feddf.py: an iteration is one local step per client and one step
# of each group's server model toward the N teachers' logits (a forward per client, counted as a frozen forward)
BYOL_METHODS = {"fedavg_byol", "fedu", "fedema"}
FEDX_VIEWS = 3  # fedx.py FedX.client_update: two views and an anchor view trained, all three forwarded frozen
FROZEN_FORWARD = BYOL_METHODS | {"fedx"}  # a target (BYOL) or frozen global (FedX) network forwards the views
DPCALR = {"passes": 5, "views_per_pass": 2, "batch_size": 1024}  # fedsc.py FedSC.dpcalr's defaults
PROBE_FEATURES = 512  # the linear probe's input: the encoder's features (Fixup ResNet-20x8 and ResNet-34)


def _n_train(config: dict, dataset: str) -> int:
    from fedrepro.data.sizes import train_size

    return train_size(config, dataset)


def fedsc_work(config: dict, run, counts: Counts) -> tuple[Work, Work]:
    """(one round, one linear-probe epoch) of a FedSC run. The local training steps are graph-ready
    (tests/fedsc/test_graph_ready.py); DP-CalR, the kNN monitor and the probe are not."""
    from fedrepro.experiments import fedsc

    spec, ds = run.spec, config["fedsc"]["datasets"][run.dataset]
    info = DATASETS[run.dataset]
    n_train, n_test = _n_train(config, run.dataset), info.n_test
    train = spec["train"]
    batch, views = int(train["batch_size"]), FEDX_VIEWS if run.method == "fedx" else int(train.get("views", 2))
    encoder = spec["encoder"]
    options = {**encoder.get("kwargs", {}), "num_classes": 0}
    head = (spec["projector"]["hidden"], spec["projector"]["out"])
    step = counts(Step.of(encoder["name"], options, info.input_shape, views * batch, "train", "sgd", head))
    forward = counts(Step.of(encoder["name"], options, info.input_shape, batch, "forward", head=head))
    participation = spec.get("participation", "full")
    fraction = 1.0 if participation == "full" else int(participation) / int(ds["clients"])
    samples = n_train * fraction  # the participating clients' data (class splits of similar size)
    # every method's local step (base.sgd_step, views drawn before it) is graph-ready; bf16 runs its FLOPs in bf16
    work = step.autocast().graphed() * (train["local_epochs"] * samples / batch)
    if run.method in FROZEN_FORWARD:  # the target / frozen global network's forward of the same views, in the step
        work = work + forward.graphed() * (train["local_epochs"] * samples * views / batch)
    chunk = int({**DPCALR, **spec.get("dpcalr", {})}["batch_size"])  # DP-CalR forwards in chunks of its own
    dpcalr = counts(Step.of(encoder["name"], options, info.input_shape, chunk, "forward", head=head))
    work = work + dpcalr * (dpcalr_images(spec, int(ds["clients"]), n_train) / chunk)
    every = int(spec.get("knn", {}).get("every", 1) or 0)
    if every:
        work = work + forward * ((n_train + n_test) / batch / every)
    probe = fedsc.probe_spec(config, run)["probe"]
    classes = DATASETS[run.dataset].num_classes
    linear = counts(
        Step.of(
            "logreg",
            {"in_features": PROBE_FEATURES, "num_classes": classes},
            (PROBE_FEATURES,),
            probe["batch_size"],
            "train",
        )
    )
    probe_epoch = forward * ((n_train + n_test) / batch / probe["epochs"]) + linear * (n_train / probe["batch_size"])
    return work, probe_epoch


def fedsc_captures(config: dict, run, counts: Counts) -> Work:
    """The launches that capture a FedSC run's step graphs (`levers.CAPTURE_PASSES` eager steps each): one graph per
    form of the loss (FedSC: local SC before its first share, Eq. 80 after; the others one) and per batch shape (the
    full batch and each client's short last batch: at most one per client, the bound priced here), each captured
    once per run: the learning rate, alpha and the restarted momentum are device tensors (fl/optim.SGD,
    fedsc/loss.AlphaTerms; tests/fedsc/test_graph_ready.py)."""
    from fedrepro.algorithms.fedsc.prefix import rounds_before_sharing

    spec, info = run.spec, DATASETS[run.dataset]
    train, clients = spec["train"], int(config["fedsc"]["datasets"][run.dataset]["clients"])
    batch, views = int(train["batch_size"]), FEDX_VIEWS if run.method == "fedx" else int(train.get("views", 2))
    encoder = spec["encoder"]
    options = {**encoder.get("kwargs", {}), "num_classes": 0}
    head = (spec["projector"]["hidden"], spec["projector"]["out"])
    step = counts(Step.of(encoder["name"], options, info.input_shape, views * batch, "train", "sgd", head)).launches
    if run.method in FROZEN_FORWARD:
        step += counts(Step.of(encoder["name"], options, info.input_shape, batch, "forward", head=head)).launches
    sharing = spec.get("sharing") is not None
    forms = 1 + (sharing and 0 < rounds_before_sharing(spec) < int(spec["rounds"]))
    return Work(capture_launches=levers.CAPTURE_PASSES * forms * (1 + clients) * step)


def dpcalr_images(spec: dict, clients: int, n_train: int) -> float:
    """Images DP-CalR forwards per round, averaged over the run's rounds (fedsc.py FedSC.before_training): on
    every sharing round, whatever epsilon (eps = inf shares with sigma 0), each syncing client forwards
    `passes x views_per_pass` views of its data; the first sharing round every client (FedSC.sync_set), then
    the participants. FedAvg+SC and the other methods (`sharing: null`) share nothing."""
    from fedrepro.algorithms.fedsc.participation import clients_per_round
    from fedrepro.algorithms.fedsc.prefix import shares_at

    rounds, sharing = int(spec.get("rounds", 1)), spec.get("sharing")
    shares = sum(shares_at(t, rounds, sharing) for t in range(1, rounds + 1))  # fedsc.py planned_shares
    if not shares:
        return 0.0
    participants = clients_per_round(clients, spec.get("participation", "full"))
    dpcalr = {**DPCALR, **spec.get("dpcalr", {})}
    syncs = clients + (shares - 1) * participants  # client uploads over the run
    return syncs * (n_train / clients) * int(dpcalr["passes"]) * int(dpcalr["views_per_pass"]) / rounds


def fedal_work(
    config: dict, run, counts: Counts, clients: int, optimizer: str = "adam", live_first_anchor: bool = True
) -> Work:
    """One iteration of a FedAL-family run (all clients). `optimizer` (`cost.OPTIMIZERS`) and
    `live_first_anchor` (FedAL.share_first_anchor) as today's code runs them unless an older row ran otherwise
    (`AS_RAN`)."""
    from fedrepro.algorithms.fedal.schedule import local_steps_per_round

    spec, info = run.spec, DATASETS[run.dataset]
    batch = int(spec["batch_size"])
    trains, frozen = FEDAL_STEPS.get(run.method, (2, 0))
    if (
        run.method in LIVE_FIRST_ANCHOR and live_first_anchor
    ):  # a stage's first anchor forward is the live one (FedAL class)
        frozen *= (int(spec["tau"]) - 1) / int(spec["tau"])
    if run.method == "fedproto" and spec.get("variant") == "prototypes":  # FedProto's own: local steps only
        trains = 1
    if run.method in FEDAL_SERVER_DISTILL:  # each teacher's forward, and r_loc's anchor's at each local step
        frozen = 1 + bool(spec.get("use_lf"))
    pretrain = float(spec.get("pretrain_iters", 0)) / float(spec["iterations"])
    evals = float(spec.get("evals", 0)) / float(spec["iterations"]) * info.n_test / EVAL_BATCH
    stacked = run.method in FEDAL_STACKED and bool(spec.get("batched", True))
    if run.method in FCCL_TEACHERS:
        local = local_steps_per_round(spec) / float(spec["tau"])  # local steps per iteration
        trains, frozen = 1 + local, local * FCCL_TEACHERS[run.method]
        if stacked and run.method == "fccl":  # fccl.py FCCL._pretrain: the teachers' pretraining, stacked
            trains, pretrain = trains + pretrain, 0.0
    share = clients / len(spec["pool"])  # clients per architecture
    work = Work()
    for arch in spec["pool"]:
        model = (arch["name"], {**arch.get("options", {}), "num_classes": info.num_classes}, info.input_shape)
        train = counts(Step.of(*model, batch, "train", optimizer))
        evaluation = counts(Step.of(*model, EVAL_BATCH, "forward"))
        work = work + (train * pretrain + evaluation * evals) * share
        if run.method in FEDAL_SERVER_DISTILL:  # one step of the group's server model
            work = work + train
        if stacked:  # one step of the architecture's clients: their FLOPs, its launches once
            one_train = counts(Step.of(*model, batch, "train_stacked"))
            one_frozen = counts(Step.of(*model, batch, "forward_stacked"))
            group = _group_share(one_train * trains + one_frozen * frozen, share)
            if not _graph_ready(run):
                work = work + group
                continue
            # the exchange steps that log their messages inside the step (FEDAL_EXCHANGE_STEPS): traced anew at every
            # iteration, so priced as today
            up_train, up_frozen = _exchange_steps(run, trains, frozen)
            exchange = _group_share(one_train * up_train + one_frozen * up_frozen, share)
            graphed = group + exchange * -1
            forms = 2 if run.method in LIVE_FIRST_ANCHOR else 1  # a stage's first steps (live anchor) and the others
            captures = graphed.launches * forms * levers.CAPTURE_PASSES / float(spec["iterations"])
            work = work + graphed.graphed() + exchange + Work(capture_launches=captures)
        else:
            work = work + (train * trains + counts(Step.of(*model, batch, "forward")) * frozen) * share
    return work


# Steps per client and iteration that exchange messages with the server and log them on the Wire inside the step
# (its byte and message records are host state the step reads and writes, so a graph of it is traced anew at every
# iteration): (training steps, frozen forwards), priced as today. None now: FedAL's global step (FedAL, FedMD-LF,
# FedMD), CFD's, FedProto's and FCCL's collaborative step carry their messages and log them after the step
# (Wire.carry / Wire.log; tests/fedal/test_graph_ready.py, test_baselines_graph_ready.py). A new method's exchange
# step that logs inside the step goes here.
FEDAL_EXCHANGE_STEPS: dict[str, tuple[int, int]] = {}


def _group_share(work: Work, share: float) -> Work:
    """A stacked step's work for `share` clients of its architecture: every client's FLOPs, its launches once."""
    return Work(work.flops * share, work.launches * min(1.0, share))


def _exchange_steps(run, trains: float, frozen: float) -> tuple[float, float]:
    """(training steps, frozen forwards) of an iteration's `trains` and `frozen` that exchange messages; the
    anchor forwards split as the steps do (FedAL's live first anchor counted out of both)."""
    up_train, up_frozen = FEDAL_EXCHANGE_STEPS.get(run.method, (0, 0))
    if run.method == "fedproto" and run.spec.get("variant") == "prototypes":
        up_train = 0
    base_frozen = FEDAL_STEPS.get(run.method, (2, 0))[1]
    return float(up_train), frozen * up_frozen / base_frozen if base_frozen else 0.0


def _graph_ready(run) -> bool:
    """Whether a stacked FedAL-family run's steps are proven graph-ready (`FEDAL_GRAPH_READY`); FedProto's own
    `prototypes` variant (its regulariser's record selects rows on the host) is not."""
    if run.method == "fedproto":
        return run.spec.get("variant", "public_features") == "public_features"
    return run.method in FEDAL_GRAPH_READY


def dpzv_work(config: dict, run, counts: Counts) -> Work:
    """One epoch of one privacy variant of a DPZV-family run."""
    from fedrepro.data.partition import vertical_partition

    spec, ds = run.spec, config["dpzv"]["datasets"][run.dataset]
    info = DATASETS[run.dataset]
    partition = ds["partition"]
    shapes = [
        (s[0] * s[1], *s[2:]) if len(s) == 4 else tuple(s)
        for s in vertical_partition(info.input_shape, partition["split"], partition["clients"]).feature_shapes
    ]
    n_train = _n_train(config, run.dataset)
    holdout = float(spec.get("val_fraction", 0.0)) if spec.get("val") == "holdout" else 0.0
    rows = int(n_train * (1 - holdout))
    batch, embed = int(spec["batch_size"]), int(spec["embed_dim"])
    head = (
        "vfl_server",
        {"in_features": len(shapes) * embed, "num_classes": info.num_classes, "hidden": int(spec["server_hidden"])},
    )
    server = counts(Step.of(*head, (len(shapes) * embed,), batch, "train", "sgd"))
    if run.method in ZO_METHODS and spec.get("server_update") == "zo":  # two head forwards and a direction
        head_forward = Step.of(*head, (len(shapes) * embed,), batch, "forward")
        server = counts(head_forward) * 2 + Work(0.0, direction_launches(run.method, head_forward, spec, counts))
    text = info.kind == "text"
    kwargs = spec.get("client_kwargs", {})
    bert = text and bool(kwargs.get("pretrained_dir") or kwargs.get("bert_config") is not None)
    stacked = bool(spec.get("stack_clients", True)) and not bert  # algorithms/dpzv/stacked.py `stackable`
    zo = run.method in ZO_METHODS
    epoch, segment, round_graphs = Work(), {}, 0.0
    for shape in shapes:
        options = {**kwargs, "embed_dim": embed}
        if not text:
            options.setdefault("in_channels", shape[0])
        forward_step = Step.of(spec["client_model"], options, shape, batch, "forward")
        forward = counts(forward_step)
        train_step = Step.of(spec["client_model"], options, shape, batch, "train", "sgd")
        # a BERT client's training forwards (ZO: the two perturbed ones; first order: forward, backward and its
        # SGD step, < 0.1 % of them) run under `precision: bf16` (algorithms/dpzv/base.py `client_embed`)
        if zo:
            perturbed = forward.autocast() if bert else forward
            client = perturbed * 2 + Work(0.0, direction_launches(run.method, forward_step, spec, counts))
        else:
            client = counts(train_step).autocast() if bert else counts(train_step)
        if stacked:  # the client's FLOPs and own launches; its group's stacked program once per segment
            group = replace(forward_step, mode="forward_stacked") if zo else replace(train_step, mode="train_stacked")
            segment[group] = counts(group).launches  # one group per client shape
            own = direction_launches(run.method, forward_step, spec, counts) if zo else STACKED_SGD_STEP
            client = Work(client.flops, own + (STACKED_SNAPSHOTS if zo else 1))
        evaluation = forward * (int(spec.get("evals_per_epoch", 1)) * (n_train - rows + info.n_test) / batch)
        epoch = epoch + (client + server).graphed() * (rows // batch) + evaluation
        round_graphs += (client + server).launches  # a client's round: one graph per client a run
    if stacked:
        length = expected_segment_length(len(shapes), spec.get("client_weights"))
        epoch = epoch + Work(0.0, sum(segment.values()) * len(shapes) * (rows // batch) / length).graphed()
        round_graphs += sum(segment.values()) * len(shapes)  # a stacked program per segment length, at most M
    # each captured once per run (the Wire logged after the round, tests/dpzv/test_graph_ready.py), over its epochs
    return epoch + Work(capture_launches=levers.CAPTURE_PASSES * round_graphs / float(spec["epochs"]))


# A stacked segment's launches per client besides its direction: ZO, two parameter snapshots (one multi-tensor
# copy each); first order, one snapshot and its own SGD step (fl/optim.py with momentum: mul and add of the
# buffers, mul by the rate tensor and add to the parameters; tests/dpzv/test_stacked_cost.py counts both).
STACKED_SNAPSHOTS = 2
STACKED_SGD_STEP = 4


def expected_segment_length(clients: int, weights=None) -> float:
    """Expected server rounds per stacked segment under the `random` schedule (algorithms/dpzv/base.py
    `segment`: rounds up to the first repeated client, which starts the next segment). Uniform client
    probabilities: P(length >= k) = prod_{j<k} (M - j) / M, so E[length] = sum_k M! / ((M - k)! M^k): 1.89 for
    3 clients, 4.04 for 12. Unequal `client_weights`: the repeat that starts a segment favours heavy clients, so
    the first clients form a Markov chain (`_weighted_segment_length`). The `permutation` schedule (draws without
    replacement from floor(D/B) copies of each client) differs from the uniform value by a relative O(M B / D); a
    segment also ends at an evaluation block's end (one in thousands of rounds at paper scale), left out."""
    if weights is None or len(set(weights)) == 1:
        return sum(math.prod(range(clients - k + 1, clients + 1)) / clients**k for k in range(1, clients + 1))
    return _weighted_segment_length(tuple(float(w) / sum(weights) for w in weights))


@functools.cache
def _weighted_segment_length(q: tuple[float, ...]) -> float:
    """Renewal reward over the segments' first clients: from first client i a segment's clients are a set S
    (i in S) with probability (|S| - 1)! prod_{S - i} q (its other clients in any order), it ends with a draw
    j in S (probability q_j), which is the next segment's first client. E[length] = sum_i pi_i E[|S| | i] with
    pi the chain's stationary distribution (power iteration)."""
    m = len(q)
    move = [[0.0] * m for _ in range(m)]
    length = [0.0] * m
    for mask in range(1, 1 << m):
        members = [i for i in range(m) if mask >> i & 1]
        weight = math.factorial(len(members) - 1) * math.prod(q[i] for i in members)
        for i in members:
            reach = weight / q[i]
            length[i] += len(members) * reach * sum(q[j] for j in members)
            for j in members:
                move[i][j] += reach * q[j]
    pi = list(q)
    for _ in range(500):
        pi = [sum(pi[i] * move[i][j] for i in range(m)) for j in range(m)]
    return sum(p * e for p, e in zip(pi, length))


def direction_launches(method: str, step: Step, spec: dict, counts: Counts) -> float:
    """Kernel launches of one round's zeroth-order direction over the parameters of `step`'s model
    (a counted step of its own, `cost.direction_step`, so that planning a stored configuration builds no model)."""
    kind, momentum = spec.get("direction", "sphere"), float(spec.get("zo_momentum", 0.9))
    return counts(direction_step(method, step, kind, momentum)).launches


# ---------------------------------------------------------------------------------------- pricing
def _row(costs: list[Cost], paper: str, unit: str, dataset: str, model: str, method: str) -> Cost | None:
    """The row that prices a run of `method` on (`dataset`, `model`): among the rows of that paper,
    unit, data set and model, the method's own row, then a row for every method (*), then another
    method's row on the same pool (the same data set and model run the same networks); ties go to the
    newest (last) row."""
    best, rank = None, None
    for i, c in enumerate(costs):
        if (c.paper, c.unit, c.dataset, c.model) != (paper, unit, dataset, model):
            continue
        r = (2 if c.method == method else 1 if c.method == "*" else 0, i)
        if rank is None or r > rank:
            best, rank = c, r
    return best


def _lookup(costs: list[Cost], paper: str, unit: str, dataset: str, model: str, method: str) -> tuple[float, bool]:
    """Seconds per unit of the row that prices this run (`_row`) and True, or (nan, False) if none."""
    row = _row(costs, paper, unit, dataset, model, method)
    return (row.seconds, True) if row is not None else (float("nan"), False)


def _measured_runs(jobs: list[Job], costs: list[Cost]) -> dict[Cost, Job]:
    """Each row and the first planned job it measured (same paper, unit, data set, model; its method
    unless *; its setting prefix unless *): benchmarks/paper_scale.py times the first run of the
    planners' order that matches, so that job's work is the row's."""
    out = {}
    for c in costs:
        for j in jobs:
            if (j.paper, j.unit, j.key[0], j.model) == (c.paper, c.unit, c.dataset, c.model) and (
                c.method in ("*", j.key[1]) and (c.setting == "*" or j.key[2].startswith(c.setting))
            ):
                out[c] = j
                break
    return out


def row_works(jobs: list[Job], costs: list[Cost]) -> dict[Cost, Work]:
    """The work of the unit each row measured: its flops and launches columns where filled in (so
    a configuration that does not plan the measured run still fits the constants), else the work of
    the planned run it measured (`_measured_runs`); rows of neither kind are left out."""
    out = {c: Work(c.flops, c.launches) for c in costs if math.isfinite(c.flops) and math.isfinite(c.launches)}
    for c, job in _measured_runs(jobs, [c for c in costs if c not in out]).items():
        out[c] = job.work
    return out


LEVER_SETTING = "+"  # a row timed with a lever on (benchmarks/paper_scale.py: setting "<setting>+bf16")


def is_lever_row(cost: Cost) -> bool:
    """A row timed with a lever on: not today's code, so never in the fit or a run's price."""
    return LEVER_SETTING in cost.setting


def price(planned: dict, costs: list[Cost], device: str = DEVICE, overlap: bool = False) -> Constants:
    """Fit the device's constants to its measured rows and price every job (module docstring); `overlap`:
    a unit takes the longer of its FLOP and launch times instead of their sum (`cost.Constants`)."""
    jobs_ = [j for per in planned.values() for j in per["all runs"]]
    rows = [c for c in costs if c.device == device and not is_lever_row(c)]
    measured = row_works(jobs_, rows)
    newest = {}  # the newest row of each measured kind is a point of the fit
    for c in rows:
        if c in measured:
            newest[(c.paper, c.unit, c.dataset, c.model, c.method, c.setting)] = c
    constants = fit([(measured[c], c.seconds) for c in newest.values()], device, overlap)
    factors = paper_factors(constants, [(c.paper, measured[c], c.seconds) for c in newest.values()])
    applied = levers.active()
    for job in {id(j): j for per in planned.values() for jobs_ in per.values() for j in jobs_}.values():
        job.floor_per_unit = constants.floor(job.work)
        job.lever_ratio = levers.ratio(constants, job.work, job.paper, job.key[1], applied)
        if job.work == Work():  # CPU-sized (SteFFLe, FedAvg)
            job.seconds_per_unit, job.measured = CPU_SECONDS, False
            continue
        row = _row(rows, job.paper, job.unit, job.key[0], job.model, job.key[1])
        reference = measured.get(row) if row is not None else None
        if reference is not None:
            job.seconds_per_unit = row.seconds * constants.seconds(job.work) / constants.seconds(reference)
            job.measured = True
        else:
            job.seconds_per_unit = constants.seconds(job.work) * factors.get(job.paper, 1.0)
            job.measured = False
    return replace(constants, paper_factors=factors)


# How the measured rows of benchmarks/unit_costs.csv marked `as measured` ran where today's code runs their
# unit otherwise (issue 42): (paper, unit, data set, model) -> the arguments that make the paper's *_work count
# the timed unit (`as_ran_work`; benchmarks/cost_counts.py writes it into the row). The FedAL rows were timed at
# 72f0df1: the per-client loop, the per-tensor Adam (cost.OPTIMIZERS `adam_loop`) and an anchor forward at every
# local step (the live first anchor came later). The FedSC row is today's count of its eps = inf run.
AS_RAN = {
    ("fedsc", "round", "cifar10", "fixup_resnet20"): {},
    ("fedal", "iteration", "cifar10", "cifar_resnet"): {
        "batched": False,
        "optimizer": "adam_loop",
        "live_first_anchor": False,
    },
}


def as_ran_work(config: dict, cost: Cost, counts: Counts) -> Work | None:
    """The work of the unit `cost` timed, counted as it ran (`AS_RAN`): its paper's first planned run of the
    row's data set, method and setting prefix; None for a row without an entry or a run."""
    how = AS_RAN.get((cost.paper, cost.unit, cost.dataset, cost.model))
    if how is None:
        return None
    module = importlib.import_module(f"fedrepro.experiments.{cost.paper}")
    runs = (r for r in module.runs(config) if (r.dataset, r.method) == (cost.dataset, cost.method))
    run = next((r for r in runs if r.setting.startswith(cost.setting)), None)
    if run is None:
        return None
    if cost.paper == "fedsc":
        return fedsc_work(config, run, counts)[0]
    how = dict(how)
    run = replace(run, spec={**run.spec, "batched": how.pop("batched")})
    return fedal_work(config, run, counts, _fedal_clients(run.setting), **how)


def paper_factors(constants: Constants, points: list[tuple[str, Work, float]]) -> dict[str, float]:
    """Per paper, the geometric mean of measured / modelled seconds over its measured rows: what the
    paper's code runs beyond the counted steps (losses, messages, host syncs). It prices the paper's
    runs on pools without a row; 1 for a paper without one."""
    logs: dict[str, list[float]] = {}
    for paper, work, seconds in points:
        logs.setdefault(paper, []).append(math.log(seconds / constants.seconds(work)))
    return {paper: math.exp(sum(v) / len(v)) for paper, v in logs.items()}


# ---------------------------------------------------------------------------------------- jobs
def _job(paper, key, units, unit, seeds, model, work) -> Job:
    return Job(paper, key, units, unit, 0.0, seeds, False, model, work)


def _seeds(tag: str) -> int:
    return len(tag[1:].split("_"))


def _fedal_clients(setting: str) -> int:
    """The client count of a FedAL setting (`<pool>-a<alpha>-c<clients>-...`)."""
    return int(next(p[1:] for p in setting.split("-")[1:] if p[:1] == "c" and p[1:].isdigit()))


def _fedal_jobs(config: dict, counts: Counts) -> dict[str, list[Job]]:
    from fedrepro.experiments import fedal

    section = config["fedal"]
    tags = fedal.seed_tags_by_run(config)  # more_seeds: some runs run more seeds
    planned = {run.key: run for run in fedal.runs(config)}  # with the budget keys (fedal._read_from_longer)
    per_output, by_key = {}, {}

    def job(run, tag: str) -> Job:  # one job object per run, whatever outputs read it
        key = (run.dataset, run.method, run.setting, tag)
        if key not in by_key:
            pool = run.setting.split("-")[0]
            clients = _fedal_clients(run.setting)
            units = run.spec["iterations"]
            if "read_from" in run.spec:  # read from a longer run: only its last round (algorithms/fedal/budget.py)
                units = run.spec["tau"] if run.spec.get("iteration_unit", "step") == "step" else 1
            work = fedal_work(config, run, counts, clients)
            by_key[key] = _job("fedal", key, units, "iteration", _seeds(tag), pool, work)
        return by_key[key]

    for name in section.get("outputs", {}):
        if "experiment" not in section["outputs"][name]:
            continue
        jobs = []
        for run in fedal.output_runs(config, name):
            run = planned[run.key]
            longer = [planned[(run.dataset, run.method, run.spec["read_from"])]] if "read_from" in run.spec else []
            jobs += [job(r, tag) for r in (run, *longer) for tag in tags[r.key]]  # a table counts the run it reads too
        per_output[name] = jobs
    return per_output


def _fedsc_jobs(config: dict, counts: Counts) -> dict[str, list[Job]]:
    from fedrepro.algorithms.fedsc.prefix import identity, knn_every
    from fedrepro.experiments import fedsc, seed_tags

    tags = seed_tags(config["fedsc"])
    runs = fedsc.runs(config)
    prefixes, starts = fedsc.prefixes(runs)  # the rounds before sharing: each prefix job runs them once

    def no_sharing(run) -> tuple[Work, Work]:  # a round of the run's setting without sharing; one kNN evaluation
        def round_monitoring_every(every: int) -> Work:
            spec = {**identity(run.spec), "knn": {**run.spec["knn"], "every": every}}
            return fedsc_work(config, replace(run, spec=spec), counts)[0]

        train = round_monitoring_every(0)
        return train, round_monitoring_every(1) + train * -1

    def evals(done: int, rounds: int, every: int) -> int:  # kNN evaluations of rounds done+1..rounds
        return rounds // every - done // every + (rounds % every != 0)  # the last round always evaluates

    chains, prefix_jobs = {}, {}  # a prefix job: its own rounds (after the prefix it starts from), once
    for (dataset, setting), prefix in prefixes.items():
        run = next(r for r in runs if r.dataset == dataset and starts.get(r.key) == setting)
        train, monitor = no_sharing(run)
        done = prefixes[(dataset, prefix.start)].rounds if prefix.start else 0
        own = prefix.rounds - done
        work = train + monitor * (evals(done, prefix.rounds, knn_every(prefix.spec)) / own)
        work = work + fedsc_captures(config, replace(run, spec=identity(run.spec)), counts) * (1 / own)
        for tag in tags:
            key = (dataset, "fedavg_sc", setting, tag)
            prefix_jobs[key] = _job("fedsc", key, own, "round", _seeds(tag), run.spec["encoder"]["name"], work)
            chains[key] = [prefix_jobs[key], *chains.get((dataset, "fedavg_sc", prefix.start, tag), [])]
    jobs_by_folder = {}
    for run in runs:
        model = run.spec["encoder"]["name"]
        rounds = run.spec.get("rounds", 1)
        round_work, probe_work = fedsc_work(config, run, counts)
        start = starts.get(run.key)
        done = prefixes[(run.dataset, start)].rounds if start else 0
        if done:  # the run's rounds less the prefix's training and the kNN evaluations it made for the run
            train, monitor = no_sharing(run)
            round_work = (round_work * rounds + train * -done + monitor * -(done // knn_every(run.spec))) * (
                1 / (rounds - done)
            )
        round_work = round_work + fedsc_captures(config, run, counts) * (1 / (rounds - done))  # this job's captures
        probe_epochs = fedsc.probe_spec(config, run)["probe"]["epochs"]
        for tag in tags:
            folder = f"{config['results']}/fedsc/runs/{run.dataset}/{run.method}/{run.setting}/{tag}"
            key = (run.dataset, run.method, run.setting, tag)
            jobs_by_folder[folder] = [
                _job("fedsc", key, rounds - done, "round", _seeds(tag), model, round_work),
                _job("fedsc", (*key, "probe"), probe_epochs, "probe_epoch", _seeds(tag), model, probe_work),
                *chains.get((run.dataset, "fedavg_sc", start, tag), []),
            ]
    tables = {"table2": fedsc.table2_cells(config), "figure2": fedsc.figure2_cells(config)}
    for name in ("table3", "table4", "table5"):
        if name in config["fedsc"].get("tables", {}):
            tables[name] = fedsc.dp_table_cells(config, name)
    # cells read by no training job (e.g. a random-encoder probe) cost nothing here
    out = {
        name: _unique(j for cell in cells for j in jobs_by_folder.get(str(Path(cell["path"]).parent), []))
        for name, cells in tables.items()
    }
    out["all runs"] = [j for jobs in jobs_by_folder.values() for j in jobs if j.key not in prefix_jobs]
    out["all runs"] += prefix_jobs.values()
    return out


def _dpzv_jobs(config: dict, counts: Counts) -> dict[str, list[Job]]:
    from fedrepro.experiments import dpzv, seed_tags

    tags = seed_tags(config["dpzv"])
    all_runs = dpzv.runs(config)
    by_key = {}

    def jobs_of(runs) -> list[Job]:
        jobs = []
        for run in runs:
            units = run.spec["epochs"] * len(run.spec.get("variants", [None]))
            for tag in run.seeds or tags:
                key = (run.dataset, run.method, run.setting, tag)
                if key not in by_key:
                    work = dpzv_work(config, run, counts)
                    model = run.spec.get("client_model", "")
                    by_key[key] = _job("dpzv", key, units, "epoch", _seeds(tag), model, work)
                jobs.append(by_key[key])
        return jobs

    out = {name: jobs_of(runs) for name, runs in dpzv.figure_runs(config, all_runs).items()}
    out["all runs"] = jobs_of(all_runs)
    return out


def _simple_jobs(paper: str, config: dict) -> dict[str, list[Job]]:
    """SteFFLe (per figure) and FedAvg: epochs or rounds of CPU-sized models (no GPU work counted)."""

    from fedrepro.experiments import seed_tags

    module = importlib.import_module(f"fedrepro.experiments.{paper}")
    tags = seed_tags(config[paper])
    vectorised = paper == "steffle"  # one job trains all its seeds as one program
    unit = "epoch" if paper == "steffle" else "round"

    def jobs_of(runs) -> list[Job]:
        jobs = []
        for run in runs:
            units = run.spec.get("train", {}).get("epochs") or run.spec.get("rounds") or 1
            seeds = [1 if vectorised else _seeds(tag) for tag in tags]
            jobs += [
                _job(paper, (run.dataset, run.method, run.setting, tag), units, unit, n, "*", Work())
                for tag, n in zip(tags, seeds)
            ]
        return jobs

    out = {}
    if hasattr(module, "figure_runs"):
        out = {name: jobs_of(runs) for name, runs in module.figure_runs(config).items()}
    runs = module.runs(config)
    if hasattr(module, "refcode_runs"):  # SteFFLe's reference-code grid: its own target, not in rule all
        extra = {(r.dataset, r.method, r.setting) for r in module.refcode_runs(config)}
        runs = [r for r in runs if (r.dataset, r.method, r.setting) not in extra]
    out["all runs"] = jobs_of(runs)
    return out


def _unique(jobs: Iterable[Job]) -> list[Job]:
    seen, out = set(), []
    for j in jobs:
        if (j.key, j.unit) not in seen:
            seen.add((j.key, j.unit))
            out.append(j)
    return out


def load_default_counts() -> Counts:
    return load_counts(COUNTS) if COUNTS.exists() else Counts()


def jobs(config: dict, counts: Counts) -> dict[str, dict[str, list[Job]]]:
    """Per enabled paper: {table or figure: its training jobs, "all runs": every training job}, each
    job with its work per unit (unpriced); steps missing from `counts` are listed in counts.missing."""
    out = {}
    for paper in enabled_papers(config):
        if paper == "fedal":
            per = _fedal_jobs(config, counts)
            per["all runs"] = _unique(j for jobs_ in per.values() for j in jobs_)
        elif paper == "fedsc":
            per = _fedsc_jobs(config, counts)
        elif paper == "dpzv":
            per = _dpzv_jobs(config, counts)
        else:
            per = _simple_jobs(paper, config)
        out[paper] = per
    return out


def plan(
    config: dict, costs: list[Cost] | None = None, counts: Counts | None = None
) -> dict[str, dict[str, list[Job]]]:
    """`jobs`, priced (`price`)."""
    return plan_and_constants(config, costs, counts)[0]


def plan_and_constants(
    config: dict, costs: list[Cost] | None = None, counts: Counts | None = None, overlap: bool = False
):
    """(`plan`, the fitted constants); steps missing from the counts table are counted here first
    (seconds each on the meta device; `benchmarks/cost_counts.py` stores them)."""
    costs = load_costs() if costs is None else costs
    counts = load_default_counts() if counts is None else counts
    planned = jobs(config, counts)
    if counts.missing:
        from fedrepro.experiments.cost import count_step

        for key in sorted(counts.missing):
            step = Step.from_key(key)
            try:
                counts.table[key] = count_step(step)
            except (RuntimeError, TypeError, NotImplementedError) as error:  # a model the meta device cannot run
                raise ValueError(f"cannot count the step {key} ({type(error).__name__}: {error})") from error
        counts.missing.clear()
        planned = jobs(config, counts)
    return planned, price(planned, costs, overlap=overlap)


RUNTIME_MARGIN = 10  # the planner's costs are coarse (GPU rows, scaled): warn an order of magnitude out


def duration_warnings(config: dict) -> list[str]:
    """Jobs the planner (fedrepro.plan) prices at more than RUNTIME_MARGIN x `resources.train.runtime`,
    one warning per paper naming the iteration keys that give the job its length."""
    runtime = config["resources"]["train"]["runtime"]
    try:
        planned = plan(config)
    except (OSError, ValueError, ImportError):  # no cost table (an installed package) or a row it needs: no estimate
        return []
    warnings_ = []
    for paper, per in planned.items():
        long = [job for job in per["all runs"] if job.gpu_hours * 60 > RUNTIME_MARGIN * runtime]
        if not long:
            continue
        job = max(long, key=lambda j: j.gpu_hours)
        keys = _keys_with_value(config[paper], paper, job.units) or [f"{paper}.<rounds, epochs or iterations>"]
        warnings_.append(
            f"config key '{', '.join(keys)}': {len(long)} {paper} job(s) would run far beyond their runtime: the "
            f"planner prices the longest ({'/'.join(map(str, job.key))}) at {job.gpu_hours:.1f} h ({job.units:g} "
            f"{job.unit}s x {job.seconds_per_unit:g} s x {job.seeds} seed(s), "
            f"{'measured' if job.measured else 'estimated'} cost per {job.unit}), more than {RUNTIME_MARGIN} x "
            f"resources.train.runtime ({runtime} min); check the value (python -m fedrepro.plan prices every job)"
        )
    return warnings_


def _keys_with_value(value, key: str, wanted: float) -> list[str]:
    """The iteration keys (rounds, epochs, iterations...) under `key` that hold `wanted`."""
    if isinstance(value, dict):
        return [k for child, item in value.items() for k in _keys_with_value(item, f"{key}.{child}", wanted)]
    name = key.rsplit(".", 1)[-1]
    found = value == wanted or (isinstance(value, list) and wanted in value)
    return [key] if ITERATION_KEY.match(name) and found and not isinstance(value, bool) else []


def print_duration_warnings(config: dict) -> None:
    """`duration_warnings` on stderr: Snakemake shows no Python warning raised while it reads the Snakefile."""
    for warning in duration_warnings(config):
        print(f"config warning: {warning}", file=sys.stderr)


def load_config(configfiles: list[str], overrides: list[str] | None = None) -> dict:
    """The config Snakemake would see: config.yaml, then each --configfile merged in order."""
    import yaml
    from snakemake.utils import update_config

    config: dict = {}
    for path in configfiles:
        update_config(config, yaml.safe_load(Path(path).read_text()) or {})
    for item in overrides or []:
        key, _, value = item.partition("=")
        config[key] = yaml.safe_load(value)
    check_config(config, REPO / "workflow" / "schemas")
    return config


def _jobs_line(name: str, jobs: list[Job]) -> str:
    hours = sum(j.gpu_hours for j in jobs)
    floor = sum(j.floor_hours for j in jobs)
    measured = sum(j.gpu_hours for j in jobs if j.measured)
    with_levers = sum(j.lever_hours for j in jobs)
    count = len({j.key[:4] for j in jobs})
    return f"| {name} | {count} | {floor:,.1f} | {hours:,.1f} | {with_levers:,.1f} | {measured:,.1f} |"


LEVER_GOAL_HOURS = 400  # the whole paper scale with the ready levers applied (docs/benchmarks.md)


def levers_report(planned: dict, constants: Constants | None) -> list[str]:
    """The levers (experiments/levers.py): applied or not and why, the hours each alone saves (applied or
    not: what its tests would buy), and the hours left above the goal."""
    lines = ["", "Levers ('with levers' column: today's seconds x lever model / today's model of each unit):", ""]
    lines += [
        "| lever | runs | assumed speed-up | source | CPU test (changes no number) | saves alone (h) | applied |",
        "|---|---|---|---|---|---|---|",
    ]
    whole = [j for per in planned.values() for j in per["all runs"]]
    for lever in levers.LEVERS:
        runs = f"{lever.paper} {'/'.join(lever.methods) if lever.methods else '(all)'}"
        value = f"{lever.value:.2f}x FLOP time" if lever.kind == "flops" else f"{lever.value * 1e6:g} us per launch"
        saves = math.nan
        if constants is not None:
            saves = sum(j.gpu_hours * (1 - levers.ratio(constants, j.work, j.paper, j.key[1], [lever])) for j in whole)
        missing = lever.missing_evidence()
        why = "yes" if lever.applied() else "no: gate failed" if not lever.gate else f"no: missing {', '.join(missing)}"
        evidence = "; ".join(lever.evidence)
        lines.append(f"| {lever.name} | {runs} | {value} | {lever.source} | {evidence} | {saves:,.1f} | {why} |")
    left = sum(j.lever_hours for j in whole) - LEVER_GOAL_HOURS
    per_paper = ", ".join(f"{p} {sum(j.lever_hours for j in per['all runs']):,.1f}" for p, per in planned.items())
    goal = f"{left:,.1f} h above" if left > 0 else "within"
    return [*lines, "", f"With levers, per paper: {per_paper} H200-hours; {goal} the {LEVER_GOAL_HOURS}-hour goal."]


def report(planned: dict, costs: list[Cost], constants: Constants | None = None) -> str:
    device = constants.device if constants else DEVICE
    lines = [
        f"# Cost plan ({device} GPU-hours: counted FLOPs and kernel launches, fitted to benchmarks/unit_costs.csv)",
        "",
        "Each table or figure counts every training job it reads (jobs shared by several are counted",
        "in each); a paper's total counts each job once. 'FLOP floor': the jobs' FLOPs at the device's",
        "dense bf16 peak. 'estimate': the fitted model (fedrepro.plan). 'on measured pools': the part of",
        "the estimate scaled from a row measured on the same data set and model.",
        "",
        "| paper / output | training jobs | FLOP floor (h) | estimate (GPU-h) | with levers (GPU-h) | on measured pools (h) |",
        "|---|---|---|---|---|---|",
    ]
    total: list[Job] = []
    for paper, per in planned.items():
        for name, jobs_ in per.items():
            if name != "all runs":
                lines.append(_jobs_line(f"{paper} {name}", jobs_))
        lines.append(_jobs_line(f"**{paper} (all)**", per["all runs"]))
        total += per["all runs"]
    lines.append(_jobs_line("**whole configuration**", total))
    lines += levers_report(planned, constants)
    if constants is not None:
        lines += [
            "",
            f"Model constants ({device}, fitted to the measured rows below): "
            f"{constants.achieved_flops / 1e12:,.1f} TFLOP/s achieved "
            f"({100 * constants.achieved_fraction:.1f} % of the {device} dense bf16 peak), "
            f"{constants.seconds_per_launch * 1e6:.1f} us per kernel launch, "
            + ("the longer of FLOP and launch time (--overlap)" if constants.overlap else "FLOP and launch time added")
            + ". Per-paper factors (measured / model "
            "on the paper's rows; they scale the paper's runs on pools without a row): "
            + ", ".join(f"{p} {f:.2f}" for p, f in sorted(constants.paper_factors.items()))
            + ".",
        ]
    jobs_all = [j for per in planned.values() for j in per["all runs"]]
    measured = row_works(jobs_all, [c for c in costs if c.device == device and not is_lever_row(c)])
    lines += ["", f"Measured rows ({', '.join(sorted({c.device for c in costs}))}):"]
    for c in costs:
        line = f"- {c.paper} {c.unit} {c.dataset} {c.model} {c.method} {c.setting}: {c.seconds:g} s ({c.source})"
        if is_lever_row(c):
            line += "; timed with a lever on: not in today's fit"
        elif constants is not None and c in measured:
            line += f"; the model gives {constants.seconds(measured[c]):.3g} s"
        elif c.device == device:
            line += "; no counted work (run benchmarks/cost_counts.py) and no planned run measured by it"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedrepro.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configfile", nargs="+", default=["config.yaml"], help="config files in Snakemake's order (config.yaml first)"
    )
    parser.add_argument("--config", nargs="*", default=[], help="top-level key=value overrides")
    parser.add_argument("--costs", default=str(COSTS), help="table of measured seconds per unit")
    parser.add_argument(
        "--overlap", action="store_true", help="price a unit as max(FLOP time, launch time), not their sum"
    )
    args = parser.parse_args(argv)
    configfiles = args.configfile if args.configfile[0].endswith("config.yaml") else ["config.yaml", *args.configfile]
    config = load_config(configfiles, args.config)
    costs = load_costs(Path(args.costs))
    planned, constants = plan_and_constants(config, costs, overlap=args.overlap)
    print(report(planned, costs, constants))
    return 0


if __name__ == "__main__":
    sys.exit(main())
