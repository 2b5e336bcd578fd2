"""Benchmark 7: seconds per unit of every pool the cost planner prices, measured on a GPU in one command.

    make bench-costs                                        # = .venv/bin/python benchmarks/paper_scale.py --costs
    .venv/bin/python benchmarks/paper_scale.py --costs --plan     # only list the rows, commands and planned minutes
    .venv/bin/python benchmarks/paper_scale.py --costs --all      # every pool's kind (BUDGET_S), not DECIDING
    .venv/bin/python benchmarks/paper_scale.py --costs --kinds <label>  # one row (labels as --plan lists them)
    .venv/bin/python benchmarks/paper_scale.py --costs --trial    # CPU: time the kinds at smoke sizes, write nothing

`make bench-costs` times DECIDING, the rows that decide the paper-scale hours and have no measurement of
today's code, within DECIDING_BUDGET_S (10 minutes: one call of a lent GPU machine); a kind with a
`precision` (FedSC in bf16 + channels-last) writes a lever row (setting "<setting>+bf16"), which the planner
keeps out of today's fit and prices. `--all` times every kind below within BUDGET_S.

`fedrepro.plan` prices a run from the newest row of benchmarks/unit_costs.csv measured on its pool (paper,
unit, data set, model), scaled by its counted work; `KINDS` below holds one run per pool the paper
configuration plans (tests/test_bench_costs.py fails when a pool has none) plus a second method where the
methods' code differs most. For each kind the command

1. stages real-format data (tests/data/formats.py; random pixels and tokens, a randomly initialised
   bert-base for Amazon) at `staged_sizes`: every client gets whole batches at the paper's batch size and a
   unit lasts seconds, not the paper's minutes; Snakemake prepares and partitions it as the pipeline does;
2. runs the paper-scale job's own entry point in this process (the spec the pipeline would run, seed 0)
   and stops it after `WARMUP + TIMED` rounds of `fedrepro.fl.loop.run_rounds`: the first round (CUDA
   warm-up, allocator growth, round 1's all-client FedSC round) is dropped, the median of the others is
   the seconds per round, converted to the paper's unit (FedAL: round / tau; DPZV: round x evaluations per
   epoch). FedSC's linear probe is timed as a whole random-encoder probe job / its epochs (best of
   `PROBE_REPEATS` after one warm-up), which is the planner's probe epoch;
3. counts the timed unit's FLOPs and kernel launches with the planner's own composition
   (`fedrepro.plan.*_work`) at the staged data sizes, and writes seconds, counted work and
   `counted = timed run` into unit_costs.csv, REPLACING the rows of the same paper, unit, data set, model,
   method, setting and device (other devices' and other kinds' rows are kept; the newest row wins in the
   planner). benchmarks/cost_counts.py leaves a timed row's work alone.

Before it times anything it prints the planner's own estimate of the benchmarked units plus start-up
(`planned_seconds`); over its budget (`--all`: `BUDGET_S`, 20 minutes on the device the table is for) it drops the
second-method kinds from the end and refuses when the pool kinds alone do not fit. Each kind's timed rounds
stop after `KIND_CAP_S` and the whole command stops timing once its budget has passed.

Without a GPU the table is never written: CPU seconds on tiny data say nothing about GPU-hours.
`--trial` runs every kind at tests/paperscale/smoke.yaml's sizes on the CPU and prints the rows it
would write (the check that the command works end to end); `benchmarks/run.py` runs that trial.

    .venv/bin/python benchmarks/paper_scale.py --levers   # the issue-20 levers only (no pipeline jobs)

Lever rows (`levers`): an optimiser step over a ResNet-18 parameter list and over 200 small tensors,
the per-tensor loop (fl/optim.py before issue 20) against the foreach step; a FedSC local step
(SC loss, 2 views, SGD momentum) eager against `compile: true` (torch.compile, inductor; its compile
time is its own row), with the step's FLOPs (torch.utils.flop_counter, forward + backward),
achieved FLOP/s and the ratio of the step time to its FLOP floor at the device's measured matmul
rate (bf16 on a GPU, fp32 on a CPU). Paper's encoder (Fixup ResNet-20x8) and batch 512 on a GPU;
width 1 and batch 8 on a CPU, where the numbers only show that every path runs.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
import yaml  # noqa: E402
from common import seconds, write  # noqa: E402
from cost_counts import COLUMNS, TIMED  # noqa: E402

from fedrepro import plan  # noqa: E402
from fedrepro.experiments.cost import PEAK_FLOPS  # noqa: E402

SMOKE = ROOT / "tests" / "paperscale" / "smoke.yaml"
PAPER_CONFIG = [ROOT / "config.yaml", ROOT / "configs" / "paper.yaml"]
BUDGET_S = 20 * 60  # the whole command on the GPU (issue 30)
WARMUP, TIMED_ROUNDS = 1, 3  # rounds dropped, rounds whose median is the row
PROBE_REPEATS = 2  # FedSC probe jobs timed after one warm-up job
KIND_CAP_S = 120  # a kind's timed rounds stop after this many seconds (at least one round is timed)
# Start-up the planner does not model: the random bert-base, staging and preparing the data with Snakemake,
# counting the kinds' work again on the prepared sizes (measured 264 + 37 s on 2 loaded CPU cores,
# docs/benchmarks.md), CUDA's; and per kind building the models, moving the data to the GPU and the first
# round's CUDA set-up beyond its own work.
STARTUP_S, PER_KIND_S = 330, 15
MAIN_UNIT = {"fedsc": "round", "fedal": "iteration", "dpzv": "epoch"}


@dataclass(frozen=True)
class Kind:
    """One timed run: the first run the planners list with this paper, data set, method and a setting
    starting with `setting`; `unit` one of the planner's units (FedSC's probe: probe_epoch)."""

    paper: str
    dataset: str
    method: str
    setting: str
    unit: str = ""
    precision: str = ""  # "bf16": a lever row (PRECISION_KEYS in the spec; its setting gets "+bf16")

    @property
    def the_unit(self) -> str:
        return self.unit or MAIN_UNIT[self.paper]

    @property
    def label(self) -> str:
        return "/".join([self.paper, self.dataset, self.method, self.setting, self.the_unit, self.precision or "fp32"])


KINDS = [
    # one per pool (paper, unit, data set, model) the paper configuration plans on a GPU; FedSC and DPZV
    # at eps = inf / the first eps (no sharing round: every round the same work), FedAL at alpha 5 (even
    # client sizes) and the fewest clients
    Kind("fedsc", "cifar10", "fedsc", "full_epsinf"),
    Kind("fedsc", "svhn", "fedsc", "full_epsinf"),
    Kind("fedsc", "cifar100", "fedsc", "full_epsinf"),
    Kind("fedsc", "cifar10", "fedsc", "full_epsinf", "probe_epoch"),
    Kind("fedsc", "svhn", "fedsc", "full_epsinf", "probe_epoch"),
    Kind("fedsc", "cifar100", "fedsc", "full_epsinf", "probe_epoch"),
    Kind("fedal", "cifar10", "fedal", "cifar_resnet-a5"),
    Kind("fedal", "cinic10", "fedal", "cifar_resnet-a5"),
    Kind("fedal", "svhn", "fedal", "svhn_wrn-a5"),
    Kind("fedal", "svhn", "fedal", "svhn_wrn10_1-a5"),
    Kind("fedal", "celeba", "fedal", "celeba_cnn-n-c20"),
    Kind("fedal", "mnist", "fedal", "mnist_lenet-a5"),
    Kind("dpzv", "amazon_polarity", "dpzv", "eps"),
    Kind("dpzv", "modelnet40", "dpzv", "eps"),
    Kind("dpzv", "mnist", "dpzv", "eps"),
    Kind("dpzv", "cifar10", "dpzv", "eps"),
    # second methods whose code differs most from the pool's first (dropped first when over budget):
    # VAFL backpropagates where the zeroth-order methods perturb tensor by tensor; FedMD has no
    # discriminator and tau 1; the BYOL baselines run a target network
    Kind("dpzv", "amazon_polarity", "vafl", "eps"),
    Kind("dpzv", "modelnet40", "vafl", "eps"),
    Kind("fedal", "cifar10", "fedmd", "cifar_resnet-a5"),
    Kind("fedsc", "cifar10", "fedu", "full"),
]
POOL_KINDS = 16  # KINDS[:POOL_KINDS] are the pool rows, never trimmed
PRECISION_KEYS = {"bf16": {"precision": "bf16", "channels_last": True}}  # fl/precision.py's config keys
# `make bench-costs` (the default of --costs): the rows today's planner has no measurement of that decide
# the hours (docs/benchmarks.md, issue 42), within DECIDING_BUDGET_S: FedSC's CIFAR-10 round in fp32 and in
# bf16 + channels-last in the same session (the precision lever's ratio), FedAL's CIFAR-10 ResNet pool as
# today's code runs it on a GPU (stacked clients, foreach Adam; its rows were timed per client at 72f0df1),
# and Amazon's bert-base epoch, the largest estimate, for DPZV and for VAFL (backpropagation).
DECIDING = [
    Kind("fedsc", "cifar10", "fedsc", "full_epsinf"),
    Kind("fedsc", "cifar10", "fedsc", "full_epsinf", precision="bf16"),
    Kind("fedal", "cifar10", "fedal", "cifar_resnet-a5"),
    Kind("dpzv", "amazon_polarity", "dpzv", "eps"),
    Kind("dpzv", "amazon_polarity", "vafl", "eps"),
]
DECIDING_BUDGET_S = 10 * 60  # one call of a lent GPU machine

# Staged data on a GPU (tests/data/formats.py makers): training and test images per data set. FedSC's
# clients (5-20, batch 256-512) each get at least two whole batches, FedAL's (10-20 after the 1,000
# public samples, batch 32) a few; a DPZV epoch is 60-1,000 server rounds. CelebA: LEAF users of 40
# images (36 for training); ModelNet40: 9 training objects per class.
GPU_N = 10240  # stage_all's n: CIFAR-10, CIFAR-100, SVHN, MNIST, CINIC-10 (n / 10 per class), Amazon rows
CELEBA_USERS, CELEBA_IMAGES = 120, 40
MODELNET_PER_CLASS = 9
AMAZON_ROWS = (720, 320)  # prepare's n_train, n_test subsample of the staged rows


def device_name() -> str:
    """The cost table's device: the PEAK_FLOPS key in the GPU's name (the planner's DEVICE is "H200"), else
    the name; the CPU when no GPU is present."""
    if not torch.cuda.is_available():
        return "CPU (no GPU present)"
    name = torch.cuda.get_device_name(0)
    return next((key for key in PEAK_FLOPS if key in name), name)


# ---------------------------------------------------------------------------------------- configuration
def bench_overrides(scratch: Path, gpu: bool, bert: Path | None = None) -> dict:
    """The config file the bench adds to config.yaml + configs/paper.yaml (+ smoke.yaml off a GPU): its
    results and raw data in `scratch`, Amazon's staged subsample, and on a GPU the random bert-base in
    `bert` as Amazon's tokenizer and client encoder (pretrained_source custom)."""
    overrides: dict = {"results": str(scratch / "results"), "data_root": str(scratch / "raw")}
    if not gpu:  # the planner counts Amazon at the catalog's 384 tokens: smoke's small encoder must take 128
        overrides["datasets"] = {"amazon_polarity": {"length": 384}}
        overrides["dpzv"] = {"datasets": {"amazon_polarity": {"model": {"options": {"max_len": 128}}}}}
    if gpu:
        overrides["datasets"] = {"amazon_polarity": {"n_train": AMAZON_ROWS[0], "n_test": AMAZON_ROWS[1]}}
    if bert is not None:
        overrides["pretrained_source"] = "custom"
        overrides["datasets"]["amazon_polarity"]["tokenizer_dir"] = str(bert)
        model = {"model": {"options": {"pretrained_dir": str(bert)}}}
        overrides["dpzv"] = {"datasets": {"amazon_polarity": model}}
    return overrides


def bench_config(scratch: Path, gpu: bool, bert: Path | None = None) -> tuple[list[str], dict]:
    """(config files in Snakemake's order, the config they make)."""
    scratch.mkdir(parents=True, exist_ok=True)
    extra = scratch / "bench.yaml"
    extra.write_text(yaml.safe_dump(bench_overrides(scratch, gpu, bert)))
    files = [str(f) for f in PAPER_CONFIG] + ([] if gpu else [str(SMOKE)]) + [str(extra)]
    return files, plan.load_config(files)


def staged_sizes(gpu: bool) -> dict[str, tuple[int, int]]:
    """(training, test) samples the staged data prepare to on a GPU (`stage`; Amazon: the config's
    subsample; CelebA: LEAF's 0.9 split of each user). Off a GPU: {} (the smoke sizes are read from the
    prepared meta.json after staging)."""
    if not gpu:
        return {}
    return {
        "cifar10": (GPU_N, GPU_N // 3),
        "cifar100": (GPU_N, 40),
        "svhn": (GPU_N, GPU_N // 3),
        "mnist": (GPU_N, GPU_N // 3),
        "cinic10": (GPU_N, 10 * max(1, GPU_N // 10 // 4)),
        "celeba": (CELEBA_USERS * round(0.9 * CELEBA_IMAGES), CELEBA_USERS * round(0.1 * CELEBA_IMAGES)),
        "modelnet40": (40 * MODELNET_PER_CLASS, 40 * max(1, MODELNET_PER_CLASS // 2)),
        "amazon_polarity": AMAZON_ROWS,
    }


@contextlib.contextmanager
def sizes_of(sizes: dict[str, tuple[int, int]]):
    """The planner's data set sizes replaced by the staged ones while it composes units: the bench
    times a unit of the staged data, and its row must carry that unit's work."""
    if not sizes:
        yield
        return
    n_train = plan._n_train
    datasets = {**plan.DATASETS, **{d: replace(plan.DATASETS[d], n_train=a, n_test=b) for d, (a, b) in sizes.items()}}
    with (
        mock.patch.object(plan, "DATASETS", datasets),
        mock.patch.object(plan, "_n_train", lambda config, d: sizes[d][0] if d in sizes else n_train(config, d)),
    ):
        yield


# ---------------------------------------------------------------------------------------- what is timed
@dataclass
class Timed:
    """A kind, the planner's run and job for it (work per unit at the staged sizes, priced), and how
    many of the job's units the bench runs (warm-up included)."""

    kind: Kind
    run: object
    job: plan.Job
    units_per_round: float

    @property
    def bench_units(self) -> float:
        if self.kind.the_unit == "probe_epoch":
            return (1 + PROBE_REPEATS) * self.job.units
        return (WARMUP + TIMED_ROUNDS) * self.units_per_round


def _runs(config: dict, paper: str) -> list:
    import importlib

    planner = importlib.import_module(f"fedrepro.experiments.{paper}")
    if paper == "fedal":
        names = [n for n, o in config["fedal"]["outputs"].items() if "experiment" in o]
        return [r for n in names for r in planner.output_runs(config, n)]
    return planner.runs(config)


def units_per_round(paper: str, spec: dict) -> float:
    """The paper's units in one round of fedrepro.fl.loop: a FedAL round is tau iterations (unless the
    budget counts rounds), a DPZV round one evaluation period of an epoch."""
    if paper == "fedal":
        return float(spec.get("tau", 1)) if spec.get("iteration_unit", "step") == "step" else 1.0
    if paper == "dpzv":
        return 1.0 / int(spec.get("evals_per_epoch", 1))
    return 1.0


def kind_runs(config: dict, kinds: list[Kind], strict: bool = True) -> list[tuple[Kind, object]]:
    """Each kind with the first run the planners list for it. A kind the configuration does not plan
    raises; with `strict` False (the CPU trial on smoke.yaml's reduced grid) it takes the first run of its
    data set, method and pool instead, or is left out."""
    out = []
    for kind in kinds:
        runs = [r for r in _runs(config, kind.paper) if (r.dataset, r.method) == (kind.dataset, kind.method)]
        run = next((r for r in runs if r.setting.startswith(kind.setting)), None)
        if run is None and not strict:
            pool = kind.setting.split("-")[0]
            run = next((r for r in runs if r.setting.split("-")[0] == pool), None)
            if run is None:
                print(f"{kind}: not planned by this configuration, left out")
                continue
        if run is None:
            raise ValueError(
                f"{kind}: the configuration plans no such run (settings: {sorted({r.setting for r in runs})})"
            )
        out.append((kind, run))
    return out


def timed_work(config: dict, run, job: plan.Job, counts) -> plan.Work:
    """The work of the unit the median times: the planner's unit, less a FedAL iteration's share of its
    `evals` test passes (the median round has none; the planner adds them back when it scales the row)."""
    if job.paper != "fedal":
        return job.work
    from fedrepro.experiments.fedal import parse_setting

    without = replace(run, spec={**run.spec, "evals": 0})
    return plan.fedal_work(config, without, counts, parse_setting(run.setting)["clients"])


def timed_kinds(
    config: dict, kinds: list[Kind], sizes: dict, costs: list[plan.Cost], strict: bool = True
) -> list[Timed]:
    """Each kind's run and planned job (priced by the planner, `fedrepro.plan.plan_and_constants`), the
    job's work per unit the one the bench times (`timed_work`) at `sizes`; a kind the configuration does
    not plan raises."""
    counts = plan.load_default_counts()  # plan_and_constants counts the steps missing from the table into it
    with sizes_of(sizes):
        planned, _ = plan.plan_and_constants(config, costs, counts)
    out = []
    for kind, run in kind_runs(config, kinds, strict):
        job = next(j for j in planned[kind.paper]["all runs"] if j.key[:3] == run.key and j.unit == kind.the_unit)
        if kind.precision:  # the same run in the lever's precision (the same counted work)
            run = replace(run, spec={**run.spec, **PRECISION_KEYS[kind.precision]})
        with sizes_of(sizes):
            work = timed_work(config, run, job, counts)
        if work != job.work:  # the bench's own copy: the planner's job object is shared by its tables
            job = replace(job, work=work)
        out.append(Timed(kind, run, job, units_per_round(kind.paper, run.spec)))
    return out


def planned_seconds(timed: list[Timed]) -> float:
    """The planner's estimate of the whole command: every benchmarked unit at the planner's seconds per
    unit, plus start-up."""
    return STARTUP_S + sum(PER_KIND_S + t.bench_units * t.job.seconds_per_unit for t in timed)


def fit_budget(timed: list[Timed], budget: float = BUDGET_S) -> list[Timed]:
    """`timed` less the second-method kinds from the end until the estimate fits `budget`; raises when
    the pool kinds alone do not fit."""
    kept = list(timed)
    while planned_seconds(kept) > budget:
        second = [t for t in kept if t.kind in KINDS[POOL_KINDS:]]
        if not second:
            raise RuntimeError(
                f"the planner expects the pool kinds alone to take {planned_seconds(kept) / 60:.1f} min, over the "
                f"{budget / 60:.0f}-minute budget: lower GPU_N or TIMED_ROUNDS in benchmarks/paper_scale.py"
            )
        kept.remove(second[-1])
        print(f"over budget: {second[-1].kind} left out")
    return kept


def pools(planned: dict) -> set[tuple[str, str, str, str]]:
    """(paper, unit, data set, model) of every planned job priced from the cost table (not CPU-sized)."""
    return {
        (j.paper, j.unit, j.key[0], j.model)
        for per in planned.values()
        for j in per["all runs"]
        if j.work != plan.Work()
    }


# ---------------------------------------------------------------------------------------- the table
def cost_row(timed: Timed, seconds: float, device: str, source: str) -> dict:
    """A unit_costs.csv row: the timed unit's seconds beside its counted work. A probe row prices every
    method's probe (the probe does not depend on the method that trained the encoder)."""
    job = timed.job
    return {
        "paper": job.paper,
        "unit": job.unit,
        "dataset": job.key[0],
        "model": job.model,
        "method": "*" if job.unit == "probe_epoch" else job.key[1],
        "device": device,
        "seconds": f"{seconds:.4g}",
        "source": source,
        "setting": job.key[2] + (plan.LEVER_SETTING + timed.kind.precision if timed.kind.precision else ""),
        "flops": f"{job.work.flops:.6g}",
        "launches": f"{job.work.launches:.6g}",
        "counted": TIMED,
    }


REPLACE_KEY = ("paper", "unit", "dataset", "model", "method", "setting", "device")


def _key(row: dict) -> tuple:
    return tuple((row.get(k) or "*") if k == "setting" else row.get(k) for k in REPLACE_KEY)


def replace_costs(path: Path, new_rows: list[dict]) -> int:
    """Write `new_rows` (dicts of COLUMNS) into the cost table at its end (the newest), dropping the
    older rows of the same paper, unit, data set, model, method, setting and device; every other row is
    kept as it was. Returns how many rows it dropped. A row given as a list holds COLUMNS in order."""
    new_rows = [r if isinstance(r, dict) else dict(zip(COLUMNS, r)) for r in new_rows]
    with open(path, newline="") as f:
        old = list(csv.DictReader(f))
    keys = {_key(r) for r in new_rows}
    kept = [r for r in old if _key(r) not in keys]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows([{c: r.get(c) or "" for c in COLUMNS} for r in kept + new_rows])
    return len(old) - len(kept)


# ---------------------------------------------------------------------------------------- staging
def save_random_bert(folder: Path) -> Path:
    """A bert-base-uncased-shaped checkpoint with random weights (no network on a GPU machine): what
    the Amazon jobs run is the same work whatever the weights and the words."""
    from transformers import BertConfig, BertModel, BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    config = BertConfig()  # bert-base: 12 layers, hidden 768, 12 heads, 30,522 tokens, 512 positions
    words = ["great", "awful", "good", "bad", "love", "broke", "fine", "waste", "superb", "meh", "title"]
    filler = [f"w{i}" for i in range(config.vocab_size - 5 - len(words))]
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *filler]) + "\n")
    tokenizer = BertTokenizer(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    tokenizer.model_max_length = config.max_position_embeddings
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    return folder


def stage(root: Path, gpu: bool, datasets: set[str]) -> dict:
    """Raw files of `datasets` in their real formats under root (`staged_sizes` on a GPU, stage_all's tiny
    sizes off one); returns the checksum overrides (tests/data/formats.stage_all)."""
    from fedrepro.data import sources
    from tests.data import formats

    checksums = formats.stage_all(root, n=GPU_N if gpu else 60)
    if gpu:  # stage_all's CelebA and ModelNet40 are a handful of samples
        if "celeba" in datasets:
            formats.make_celeba(root / "celeba", counts=(CELEBA_IMAGES,) * CELEBA_USERS)
        if "modelnet40" in datasets:
            formats.make_modelnet_sized(
                root / "modelnet40" / sources.raw_files("modelnet40")[0], classes=40, per_class=MODELNET_PER_CLASS
            )
        for dataset in ("celeba", "modelnet40"):
            for name in sources.raw_files(dataset):
                checksums["files"][name] = {"md5": sources.file_digest(root / dataset / name, "md5")}
    return checksums


def prepare_inputs(kinds: list[Kind], config: dict, configfiles: list[str], env: dict, strict: bool = True) -> None:
    """Snakemake prepares every kind's data, partition and pre-trained marker as the pipeline does."""
    from fedrepro.data import pretrained

    results = config["results"]
    targets = set()
    for kind, run in kind_runs(config, kinds, strict):
        targets.add(f"{results}/data/{run.dataset}/arrays.npz")  # workflow/rules/common.smk: prepared()
        if run.partition and kind.the_unit != "probe_epoch":
            targets.add(f"{results}/partitions/{run.dataset}/{run.partition}.npz")  # partition_file()
        targets.update(pretrained.markers(run.spec))
    command = [
        sys.executable,  # python -m snakemake: a GPU machine's image may have no snakemake script on PATH
        "-m",
        "snakemake",
        *sorted(targets),
        f"-c{os.cpu_count() or 1}",
        "--nolock",
        "--configfile",
        *configfiles[1:],
    ]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"preparing the bench's data failed:\n{done.stderr[-4000:]}")


# ---------------------------------------------------------------------------------------- timing
class Enough(Exception):
    """Raised by the round clock after the rounds a kind times: the job stops there."""


@contextlib.contextmanager
def round_clock(rounds: int, cap_s: float = KIND_CAP_S):
    """Time each round of fedrepro.fl.loop.run_rounds (its loop iterates over `tqdm(range(...))`): the
    yielded list gets a time stamp at the start of every round and after the last; after `rounds` rounds,
    or once `cap_s` has passed since the end of the first, the run is stopped by `Enough`."""
    from fedrepro.fl import loop

    stamps: list[float] = []

    def now() -> float:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    def timed(iterable, *args, **kwargs):
        for i, item in enumerate(iterable):
            stamps.append(now())
            if i == rounds or (i >= 2 and stamps[-1] - stamps[1] > cap_s):
                raise Enough
            yield item
        stamps.append(now())

    with mock.patch.object(loop, "tqdm", timed):
        yield stamps


def median_round(stamps: list[float]) -> float:
    """The median round after the first (the warm-up); a single round stands for itself."""
    rounds = [b - a for a, b in zip(stamps, stamps[1:])]
    return statistics.median(rounds[WARMUP:] or rounds)


def _job(t: Timed, config: dict, folder: Path):
    from fedrepro.data import pretrained
    from fedrepro.experiments import seed_tags
    from fedrepro.pipeline import make_job, parse_seed_tag

    results = config["results"]
    inputs = {"data": f"{results}/data/{t.run.dataset}/arrays.npz"}
    if t.kind.the_unit == "probe_epoch":
        from fedrepro.experiments.fedsc import random_probe_spec

        spec, outputs = random_probe_spec(config, t.run.dataset), {"probe": folder / "probe.json"}
    else:
        spec = t.run.spec
        outputs = {name: folder / f"{name}.{ext}" for name, ext in (("metrics", "parquet"), ("summary", "json"))}
        outputs["model"] = folder / "model.pt"
        inputs["partition"] = f"{results}/partitions/{t.run.dataset}/{t.run.partition}.npz"
        inputs["pretrained"] = pretrained.markers(spec)
    seeds = parse_seed_tag(seed_tags(config[t.kind.paper])[0])[:1]
    return make_job(spec, {k: str(v) for k, v in outputs.items()}, inputs, seeds, log=str(folder / "job.log"))


def _entry(t: Timed) -> str:
    from fedrepro.algorithms import methods

    if t.kind.the_unit == "probe_epoch":
        return "fedrepro.algorithms.fedsc.probing:random_probe_job"
    return methods(t.kind.paper)[t.kind.method]


def seconds_per_unit(t: Timed, config: dict, scratch: Path) -> float:
    """Time one kind in this process through its job's entry point (module docstring)."""
    from fedrepro.pipeline import run_job

    entry = _entry(t)
    if t.kind.the_unit == "probe_epoch":
        times = []
        for repeat in range(1 + PROBE_REPEATS):
            job = _job(t, config, scratch / f"{t.run.dataset}-probe-{repeat}")
            start = time.perf_counter()
            run_job(job, entry)
            times.append(time.perf_counter() - start)
        return min(times[1:] or times) / t.job.units
    folder = scratch / f"{t.kind.paper}-{t.run.dataset}-{t.run.method}-{t.run.setting}"
    with round_clock(WARMUP + TIMED_ROUNDS) as stamps:
        try:
            run_job(_job(t, config, folder), entry)
        except Enough:
            pass
    return median_round(stamps) / t.units_per_round


def _optimiser_rows(repeats: int) -> list[dict]:
    from torchvision.models import resnet18

    from fedrepro.fl.optim import SGD, Adam
    from tests.foundation.test_optim_foreach import LoopAdam, LoopSGD

    cases = {
        "ResNet-18 (62 tensors, 11.7M)": list(resnet18().parameters()),
        "200 tensors of 64": [torch.randn(64, requires_grad=True) for _ in range(200)],
    }
    rows = []
    for label, params in cases.items():
        for p in params:
            p.grad = torch.randn_like(p)
        for name, foreach, loop in [
            (
                "SGD momentum + decay",
                SGD(params, lr=0.01, momentum=0.9, weight_decay=5e-4),
                LoopSGD(params, lr=0.01, momentum=0.9, weight_decay=5e-4),
            ),
            ("Adam", Adam(params), LoopAdam(params, 1e-3, (0.9, 0.999), 1e-8)),
        ]:
            foreach.step(), loop.step()  # momentum buffers allocated
            ours, reference = seconds(foreach.step, repeats), seconds(loop.step, repeats)
            rows.append(
                lever_row(f"optimiser step, {name}, {label}: foreach vs per-tensor loop", "s/step", ours, reference)
            )
    return rows


def lever_row(case: str, unit: str, ours: float, reference: float) -> dict:
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (no GPU present)"
    return {
        "benchmark": "paper_scale levers",
        "case": case,
        "unit": unit,
        "ours": ours,
        "reference": reference,
        "ratio": reference / ours if ours else float("nan"),
        "ratio_is": "reference / ours",
        "target": device,
        "met": "",
    }


def matmul_flops_per_second(device: torch.device) -> float:
    """The device's measured dense matmul rate (bf16 on a GPU, fp32 on a CPU): the FLOP floor's rate."""
    size, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (512, torch.float32)
    a, b = torch.randn(size, size, device=device, dtype=dtype), torch.randn(size, size, device=device, dtype=dtype)

    def matmul():
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    matmul()
    return 2 * size**3 / seconds(matmul, 5)


def _fedsc_step_rows(repeats: int) -> list[dict]:
    import precision_speed
    from torch.utils.flop_counter import FlopCounterMode

    from fedrepro.algorithms.fedsc.fedsc import FedSC
    from fedrepro.fl.device import pick_device

    device = pick_device("auto")
    gpu = device.type == "cuda"
    batch, steps = (512, 4) if gpu else (8, 2)
    encoder = precision_speed.ENCODER if gpu else {"name": "fixup_resnet20", "kwargs": {"widen_factor": 1}}
    data = precision_speed.client_data(batch * steps, device)
    eager = precision_speed.seconds_per_step(data, batch, {}, device, repeats, encoder)
    start = time.perf_counter()
    compiled = precision_speed.seconds_per_step(data, batch, {"compile": True}, device, repeats, encoder)
    compile_seconds = time.perf_counter() - start - compiled * steps * repeats
    algo = FedSC(precision_speed.spec(batch, {}, encoder), data, seed=0, device=device)
    with FlopCounterMode(display=False) as counter:
        algo.client_update(0, algo.global_state(), 1, 0.03)
    flops_per_step = counter.get_total_flops() / steps
    floor = flops_per_step / matmul_flops_per_second(device)
    case = f"FedSC local step, {encoder['name']} x{encoder['kwargs']['widen_factor']}, batch {batch}, fp32"
    return [
        lever_row(f"{case}: compile vs eager", "s/step", compiled, eager),
        lever_row(
            f"{case}: compile time (first epoch minus steady steps), vs one eager step", "s", compile_seconds, eager
        ),
        lever_row(
            f"{case}: eager achieved FLOP/s ({flops_per_step:.3g} FLOP/step) vs matmul rate",
            "FLOP/s",
            flops_per_step / eager,
            flops_per_step / floor,
        ),
        lever_row(
            f"{case}: compiled achieved FLOP/s vs matmul rate",
            "FLOP/s",
            flops_per_step / compiled,
            flops_per_step / floor,
        ),
        lever_row(f"{case}: FLOP floor (step FLOPs / matmul rate) vs compiled step", "s/step", floor, compiled),
    ]


def levers(quick: bool = False) -> list[dict]:
    """Issue 20's levers, foreach optimiser steps and torch.compile, on whatever device this runs on."""
    torch.set_num_threads(1 if not torch.cuda.is_available() else torch.get_num_threads())
    return _optimiser_rows(3 if quick else 10) + _fedsc_step_rows(1 if quick else 3)


def prepared_sizes(config: dict, datasets: set[str]) -> dict[str, tuple[int, int]]:
    """(training, test) samples of each prepared data set, from its meta.json."""
    out = {}
    for dataset in datasets:
        meta = json.loads((Path(config["results"]) / "data" / dataset / "meta.json").read_text())
        out[dataset] = (int(meta["n_train"]), int(meta["n_test"]))
    return out


def plan_bench(
    gpu: bool, scratch: Path, kinds: list[Kind] = KINDS, budget: float = BUDGET_S
) -> tuple[list[Timed], float]:
    """The kinds that fit `budget` (`fit_budget`; a GPU run's), each priced by the planner at the staged
    sizes, and the estimate."""
    _, config = bench_config(scratch, gpu)
    costs = plan.load_costs()
    timed = timed_kinds(config, kinds, staged_sizes(gpu), costs, strict=gpu)
    if gpu:
        timed = fit_budget(timed, budget)
    return timed, planned_seconds(timed)


def row_lines(timed: list[Timed]) -> list[str]:
    """Each row the command fills (the unit_costs.csv key it writes) and the command that fills it alone."""
    lines = []
    for t in timed:
        setting = t.job.key[2] + (plan.LEVER_SETTING + t.kind.precision if t.kind.precision else "")
        row = f"{t.job.paper} {t.job.unit} {t.job.key[0]} {t.job.model} {t.job.key[1]} {setting}"
        command = f"python benchmarks/paper_scale.py --costs --kinds {t.kind.label}"
        lines.append(f"  {row}: {t.bench_units:g} {t.job.unit}s x {t.job.seconds_per_unit:.3g} s; `{command}`")
    return lines


def chosen_kinds(all_kinds: bool, papers: list[str] | None, labels: list[str] | None) -> list[Kind]:
    """The kinds to time: DECIDING (the default), every kind (`all_kinds`), or those named by `labels`
    (Kind.label); `papers` keeps those papers' kinds only."""
    pool = KINDS + [k for k in DECIDING if k not in KINDS] if all_kinds or labels else DECIDING
    if labels:
        unknown = set(labels) - {k.label for k in pool}
        if unknown:
            raise ValueError(f"--kinds: unknown {sorted(unknown)}; allowed: {', '.join(k.label for k in pool)}")
        pool = [k for k in pool if k.label in labels]
    return [k for k in pool if papers is None or k.paper in papers]


def bench_costs(
    trial: bool = False,
    plan_only: bool = False,
    keep: bool = False,
    papers: list[str] | None = None,
    all_kinds: bool = False,
    labels: list[str] | None = None,
) -> list[dict]:
    """The command (module docstring); returns the benchmark rows (results/benchmarks/paper_scale.*).
    Times DECIDING within DECIDING_BUDGET_S, or every kind (`all_kinds`, BUDGET_S) or the kinds `labels`
    names; `papers`: only these papers' kinds (a partial refresh)."""
    gpu = torch.cuda.is_available()
    device = device_name()
    scratch = Path(tempfile.mkdtemp(prefix="bench_costs_"))
    budget = BUDGET_S if all_kinds else DECIDING_BUDGET_S
    # the GPU command's plan on any machine, but for the CPU trial's (smoke sizes)
    timed, estimate = plan_bench(gpu or not trial, scratch, chosen_kinds(all_kinds, papers, labels), budget)
    print(
        f"{len(timed)} rows to fill; the planner expects {estimate / 60:.1f} min on {plan.DEVICE} (budget {budget / 60:.0f})"
    )
    print("\n".join(row_lines(timed)))
    if plan_only or not (gpu or trial):
        if not gpu and not plan_only:
            print("no GPU present: nothing timed (CPU seconds say nothing about GPU-hours); --trial runs the kinds")
        shutil.rmtree(scratch, ignore_errors=True)
        return []
    start = time.perf_counter()
    bert = save_random_bert(scratch / "bert-base") if gpu else None
    configfiles, config = bench_config(scratch, gpu, bert)
    from fedrepro.data import sources
    from fedrepro.pipeline import hand_over_process_settings

    checksums = scratch / "checksums.json"
    datasets = {t.run.dataset for t in timed}
    checksums.write_text(json.dumps(stage(Path(config["data_root"]), gpu, datasets)))
    os.environ[sources.CHECKSUM_OVERRIDES_ENV] = str(checksums)
    kinds = [t.kind for t in timed]
    prepare_inputs(kinds, config, configfiles, dict(os.environ), strict=gpu)
    print(f"staged and prepared in {time.perf_counter() - start:.0f} s")
    hand_over_process_settings(config)
    # the rows' work: the planner's units at the prepared sizes, with the executed config (Amazon's bert)
    timed = timed_kinds(config, kinds, prepared_sizes(config, datasets), plan.load_costs(), strict=gpu)
    rows, new_costs = [], []
    source = f"measured: benchmarks/paper_scale.py --costs {time.strftime('%Y-%m-%d')}, torch {torch.__version__}"
    for t in timed:
        if time.perf_counter() - start > budget:
            print(f"{t.kind}: not timed, the {budget / 60:.0f}-minute budget is spent")
            continue
        kind_start = time.perf_counter()
        try:
            seconds = seconds_per_unit(t, config, scratch / "jobs")
        except Exception as error:  # one kind failing leaves the others' rows
            print(f"{t.kind}: failed ({type(error).__name__}: {error}); see {scratch}/jobs")
            continue
        finally:  # the stopped job's models and data leave the GPU before the next kind
            gc.collect()
            if gpu:
                torch.cuda.empty_cache()
        model = seconds / t.job.seconds_per_unit if t.job.seconds_per_unit else math.nan
        print(
            f"{t.kind}: {seconds:.4g} s per {t.job.unit} (planner {t.job.seconds_per_unit:.3g} s, x{model:.2f}) "
            f"in {time.perf_counter() - kind_start:.0f} s"
        )
        rows.append(
            {
                "benchmark": "paper_scale",
                "case": f"{t.job.paper} {t.job.unit} {t.job.key[0]} {t.job.model} {t.job.key[1]} ({t.job.key[2]})",
                "unit": f"s per {t.job.unit}",
                "ours": seconds,
                "reference": t.job.seconds_per_unit,
                "ratio": model,
                "ratio_is": "ours / reference",
                "target": f"{device}; reference: the planner's estimate",
                "met": "",
            }
        )
        new_costs.append(cost_row(t, seconds, device, source))
    print(f"{len(new_costs)} of {len(timed)} kinds timed in {time.perf_counter() - start:.0f} s on {device}")
    if gpu and new_costs:
        replaced = replace_costs(plan.COSTS, new_costs)
        print(f"wrote {len(new_costs)} rows to {plan.COSTS} ({replaced} older rows of the same kind replaced)")
    elif not gpu:
        print("no GPU present (trial at smoke sizes): benchmarks/unit_costs.csv left unchanged")
    if not keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


def run(quick: bool = False) -> list[dict]:
    """benchmarks/run.py's interface: without a GPU the cost bench's trial at smoke sizes (that every
    kind runs; nothing written), on a GPU nothing of it (`make bench-costs` is its own 20-minute command);
    the lever rows unless `quick`."""
    if torch.cuda.is_available():
        print("paper_scale: the unit-cost rows are `make bench-costs`'s (benchmarks/paper_scale.py --costs)")
        rows = []
    else:
        rows = bench_costs(trial=True, all_kinds=True)
    return rows if quick else rows + levers()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", action="store_true", help="time every pool's kind and write unit_costs.csv (GPU)")
    parser.add_argument("--plan", action="store_true", help="with --costs: only print the kinds and the estimate")
    parser.add_argument("--trial", action="store_true", help="with --costs: time at smoke sizes on the CPU too")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--papers", nargs="+", choices=sorted(MAIN_UNIT), help="with --costs: only these papers' kinds")
    parser.add_argument("--all", action="store_true", help="with --costs: every pool's kind (20 min), not DECIDING")
    parser.add_argument("--kinds", nargs="+", help="with --costs: only these kinds (labels as --plan prints them)")
    parser.add_argument("--levers", action="store_true", help="only the issue-20 lever rows (no pipeline jobs)")
    parser.add_argument("--quick", action="store_true", help="with --levers: one repeat")
    options = parser.parse_args()
    if options.levers:
        print(write(levers(options.quick), "paper_scale_levers").to_markdown(index=False, floatfmt=".4g"))
        return
    if not options.costs:
        parser.error("choose --costs (the unit-cost bench) or --levers")
    rows = bench_costs(options.trial, options.plan, options.keep, options.papers, options.all, options.kinds)
    if rows:
        print(write(rows, "paper_scale").to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
