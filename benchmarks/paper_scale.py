"""Benchmark 7 (issue 20): seconds per unit of every paper-scale training kind, through the pipeline.

    .venv/bin/python benchmarks/paper_scale.py            # CPU: tiny data (tests/paperscale/smoke.yaml sizes)
    .venv/bin/python benchmarks/paper_scale.py --n 50000  # GPU: full-size real-format data (random pixels)

It writes every paper-scale raw format (tests/data/formats.py:stage_all) into a scratch data_root, runs
one training job per kind below through Snakemake at paper scale (config.yaml + configs/paper.yaml, plus
tests/paperscale/smoke.yaml's tiny sizes on a CPU), and reads the seconds per round that
`fedrepro.fl.loop.run_rounds` logs (checkpoints included, job start-up excluded), converted to the
paper's unit: FedSC round, FedAL iteration (round / tau), DPZV epoch (round x evaluations per epoch),
SteFFLe epoch of a vectorised grid job (its "trained N models in S s" line / epochs).

With a GPU present the rows are appended to benchmarks/unit_costs.csv (the cost planner's table,
`python -m fedrepro.plan`), named by the GPU. Without one the table is left alone and every row says
"no GPU present": CPU seconds on tiny data say nothing about GPU-hours.

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
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from common import seconds, write  # noqa: E402

from fedrepro.data import sources  # noqa: E402
from fedrepro.plan import COSTS, load_config  # noqa: E402
from tests.data.formats import stage_all  # noqa: E402

SMOKE = ROOT / "tests" / "paperscale" / "smoke.yaml"
# (paper, dataset, method, setting prefix, unit, cost-table model): one training job per kind
KINDS = [
    ("fedsc", "cifar10", "fedsc", "full_eps", "round", "fixup_resnet20"),
    ("fedsc", "cifar10", "fedu", "full", "round", "fixup_resnet20"),
    ("fedsc", "cifar100", "fedsc", "full_eps", "round", "resnet34"),
    ("fedal", "cifar10", "fedal", "cifar_resnet", "iteration", "cifar_resnet"),
    ("fedal", "cifar10", "fedmd", "cifar_resnet", "iteration", "cifar_resnet"),
    ("fedal", "svhn", "fedal", "svhn_wrn-", "iteration", "svhn_wrn"),
    ("fedal", "celeba", "fedal", "celeba_cnn", "iteration", "celeba_cnn"),
    ("dpzv", "mnist", "dpzv", "eps", "epoch", "vfl_mnist_cnn"),
    ("dpzv", "cifar10", "dpzv", "eps", "epoch", "vfl_cifar_cnn"),
    ("dpzv", "modelnet40", "dpzv", "eps", "epoch", "vfl_resnet18"),
    ("steffle", "credit", "steffle", "dp_N3", "epoch", "logreg"),
]
PER_ROUND = re.compile(r"rounds (\d+)-(\d+): ([0-9.]+) s per round")
STEFFLE = re.compile(r"trained (\d+) models in ([0-9.]+) s")


def _run_for(config: dict, paper: str, dataset: str, method: str, prefix: str):
    import importlib

    from fedrepro.experiments import seed_tags

    planner = importlib.import_module(f"fedrepro.experiments.{paper}")
    runs = planner.runs(config)
    if paper == "fedal":
        names = [n for n, o in config["fedal"]["outputs"].items() if "experiment" in o]
        runs = [r for n in names for r in planner.output_runs(config, n)]
    for run in runs:
        if run.dataset == dataset and run.method == method and run.setting.startswith(prefix):
            return run, seed_tags(config[paper])[0]
    return None, None


def _seconds_per_unit(paper: str, run, log_text: str) -> float | None:
    if paper == "steffle":
        match = STEFFLE.search(log_text)
        return float(match.group(2)) / run.spec["train"]["epochs"] if match else None
    matches = PER_ROUND.findall(log_text)
    if not matches:
        return None
    per_round = float(matches[-1][2])
    if paper == "fedal":
        tau = int(run.spec.get("tau", 1))
        return per_round / tau if run.spec.get("iteration_unit", "step") == "step" else per_round
    if paper == "dpzv":
        return per_round * int(run.spec.get("evals_per_epoch", 1))
    return per_round


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


def run(quick: bool = False, n: int | None = None, keep: bool = False, papers: list[str] | None = None) -> list[dict]:
    """benchmarks/run.py's interface; `quick` times the cheapest kind of each paper only."""
    gpu = torch.cuda.is_available()
    device = torch.cuda.get_device_name(0) if gpu else "CPU (no GPU present)"
    n = n or (50000 if gpu else 60)
    scratch = Path(tempfile.mkdtemp(prefix="paper_scale_"))
    data_root, results = scratch / "raw", scratch / "results"
    checksums = scratch / "checksums.json"
    checksums.write_text(json.dumps(stage_all(data_root, n=n)))
    configfiles = [str(ROOT / "config.yaml"), str(ROOT / "configs" / "paper.yaml")]
    if not gpu:
        configfiles.append(str(SMOKE))
    config = load_config(configfiles, [f"results={results}", f"data_root={data_root}"])
    jobs = []
    kinds = [k for k in KINDS if papers is None or k[0] in papers]
    prefix_of = {}
    if quick:
        kinds = [k for i, k in enumerate(kinds) if k[0] not in [q[0] for q in kinds[:i]]]
    for paper, dataset, method, prefix, unit, model in kinds:
        run, tag = _run_for(config, paper, dataset, method, prefix)
        if run is None:
            print(f"skipped {paper} {dataset} {method}: not planned by this configuration")
            continue
        folder = f"{results}/{paper}/runs/{run.dataset}/{run.method}/{run.setting}/{tag}"
        jobs.append((paper, dataset, method, unit, model, run, tag, folder))
        prefix_of[(paper, dataset, method)] = prefix
    env = {**os.environ, sources.CHECKSUM_OVERRIDES_ENV: str(checksums)}
    start = time.perf_counter()
    command = [
        str(Path(sys.executable).with_name("snakemake")),
        *[f"{j[-1]}/summary.json" for j in jobs],
        "-c2",
        "--keep-going",
        "--nolock",
        "--config",
        f"results={results}",
        f"data_root={data_root}",
        "--configfile",
        *configfiles[1:],
    ]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    rows, new_costs = [], []
    for paper, dataset, method, unit, model, run, tag, _folder in jobs:
        log = results / "logs" / paper / run.dataset / run.method / run.setting / f"{tag}.log"
        text = log.read_text() if log.exists() else ""
        seconds = _seconds_per_unit(paper, run, text)
        case = f"{paper} {dataset} {method} ({run.setting})"
        if seconds is None:
            print(f"{case}: no timing in {log} (the job failed? see {scratch})")
            continue
        rows.append(
            {
                "benchmark": "paper_scale",
                "case": case,
                "unit": f"s per {unit}",
                "ours": seconds,
                "reference": float("nan"),
                "ratio": float("nan"),
                "ratio_is": "",
                "target": device,
                "met": "",
            }
        )
        if gpu:
            new_costs.append(
                [
                    paper,
                    unit,
                    dataset,
                    model,
                    method,
                    device,
                    f"{seconds:.4g}",
                    f"measured: benchmarks/paper_scale.py {time.strftime('%Y-%m-%d')}, n={n}",
                    prefix_of[(paper, dataset, method)],
                    "",  # flops, launches: benchmarks/cost_counts.py counts them
                    "",
                ]
            )
    print(f"{len(rows)} of {len(jobs)} kinds timed in {wall:.0f} s on {device}; snakemake exit {done.returncode}")
    if gpu and new_costs:
        replaced = replace_costs(COSTS, new_costs)
        print(f"wrote {len(new_costs)} rows to {COSTS} ({replaced} older rows of the same kind replaced)")
        import cost_counts

        print(f"counted work of {cost_counts.fill_costs()} measured rows written into {COSTS}")
    elif not gpu:
        print("no GPU present: tiny sizes on the CPU; benchmarks/unit_costs.csv left unchanged")
    if done.returncode:
        print(done.stderr[-3000:])
    if not quick:
        rows += levers()
    if not keep and not done.returncode:
        import shutil

        shutil.rmtree(scratch)
    return rows


def replace_costs(path: Path, new_rows: list[list[str]]) -> int:
    """Write `new_rows` into the cost table, dropping older rows of the same kind (paper, unit, data
    set, model, method, device), so a new measurement replaces the old one; returns how many it dropped."""
    with open(path, newline="") as f:
        header, *old = list(csv.reader(f))
    kinds = {tuple(row[:6]) for row in new_rows}
    kept = [row for row in old if tuple(row[:6]) not in kinds]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([header, *kept, *new_rows])
    return len(old) - len(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n", type=int, default=None, help="training images per image data set (default: 60 on a CPU, 50000 on a GPU)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--papers", nargs="+", choices=sorted({k[0] for k in KINDS}), help="only these papers")
    parser.add_argument("--quick", action="store_true", help="the first kind of each paper only")
    parser.add_argument("--levers", action="store_true", help="only the issue-20 lever rows (no pipeline jobs)")
    options = parser.parse_args()
    if options.levers:
        print(write(levers(options.quick), "paper_scale_levers").to_markdown(index=False, floatfmt=".4g"))
        return
    write(run(options.quick, n=options.n, keep=options.keep, papers=options.papers), "paper_scale")


if __name__ == "__main__":
    main()
