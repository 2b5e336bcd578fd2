"""What a configuration starts: jobs and GPU-hours per paper and per table, before anything runs.

    python -m fedrepro.plan --configfile config.yaml configs/paper.yaml

The training runs come from the same planners the Snakefile uses (`fedrepro.experiments.<paper>`),
so the job counts are the pipeline's. Each run costs `units x seconds per unit x seeds per job`,
where the unit is the paper's training loop (FedSC round, FedAL iteration, DPZV epoch per privacy
variant, SteFFLe epoch of a vectorised grid job, FedAvg round) and the seconds come from a small
table of measured costs (`benchmarks/unit_costs.csv`: paper, unit, dataset, model, method, device,
seconds, source; `make bench` appends rows when a GPU is present). A run without a measured row
is costed by the nearest row (same paper and unit, then same paper) scaled as documented in
`_scaled`, and is counted in the "estimated" column: the total is only as good as those rows.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fedrepro.config import ITERATION_KEY, check_config, enabled_papers

REPO = Path(__file__).resolve().parents[2]
COSTS = REPO / "benchmarks" / "unit_costs.csv"

# Where no row was measured (documented assumptions, printed as "estimated"):
# - FedSC rounds scale with the training samples per round (SVHN 73,257 / CIFAR 50,000) and the
#   encoder's FLOPs per sample relative to Fixup ResNet-20x8 (ResNet-34 BasicBlock at 32x32: 1.16 /
#   about 2.6 GFLOP, so 0.45x); centralised SC is the same samples through one model.
# - A FedSC linear-probe epoch: one encoder forward pass of the training set is done once, the
#   epochs train a linear layer: costed as 0.02 of a round per epoch.
# - FedAL: methods without a row cost what FedAL costs on the same pool (tau-1 methods like FedMD
#   run one local step per iteration but a public-set distillation pass each: about the same);
#   pools without a row cost the CIFAR ResNet pool's per-iteration time scaled by clients / 15.
# - DPZV: data sets without a row cost what CIFAR-10 costs per epoch, scaled by training samples.
# - SteFFLe (logistic regression, CPU-sized) and FedAvg: 0.05 s per epoch / round.
ENCODER_FLOP_RATIO = {"fixup_resnet20": 1.0, "resnet34": 0.45, "resnet18": 0.22}
TRAIN_SAMPLES = {
    "cifar10": 50000,
    "cifar100": 50000,
    "svhn": 73257,
    "cinic10": 90000,
    "mnist": 60000,
    "modelnet40": 9843,
    "amazon_polarity": 100000,
    "celeba": 180000,
}


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
            )
            for r in csv.DictReader(f)
        ]


@dataclass
class Job:
    """One training job: its paper, the tables that read it, and its cost."""

    paper: str
    key: tuple
    units: float
    unit: str
    seconds_per_unit: float
    seeds: int
    measured: bool

    @property
    def gpu_hours(self) -> float:
        return self.units * self.seconds_per_unit * self.seeds / 3600.0


def _lookup(costs: list[Cost], paper: str, unit: str, dataset: str, model: str, method: str) -> tuple[float, bool]:
    """Seconds per unit and whether a measured row matched: the method's own row on this data set and
    model (or a row for every method, *), else a row of another method on the same pool (the same
    data set and model run the same networks); the newest (last) row wins."""
    row = _row(costs, paper, unit, dataset=dataset, model=model, method=method) or _row(
        costs, paper, unit, dataset=dataset, model=model
    )
    if row is not None:
        return row.seconds, True
    return _scaled(costs, paper, unit, dataset, model, method), False


def _row(costs, paper, unit, **match) -> Cost | None:
    """The newest (last) row of `paper`'s `unit` whose fields equal `match` (or are *)."""
    rows = [
        c
        for c in costs
        if c.paper == paper and c.unit == unit and all(getattr(c, k) in (v, "*") for k, v in match.items())
    ]
    return rows[-1] if rows else None


def _scaled(costs: list[Cost], paper: str, unit: str, dataset: str, model: str, method: str) -> float:
    if paper == "fedsc":
        base = _row(costs, "fedsc", "round", model="fixup_resnet20")
        if base is None:
            raise ValueError("benchmarks/unit_costs.csv needs a fedsc round row for fixup_resnet20")
        per_round = (
            base.seconds
            * TRAIN_SAMPLES.get(dataset, 50000)
            / TRAIN_SAMPLES[base.dataset]
            * ENCODER_FLOP_RATIO.get(model, 1.0)
        )
        return per_round * (0.02 if unit == "probe_epoch" else 1.0)
    if paper == "fedal":
        base = _row(costs, "fedal", "iteration", model=model, method=method) or _row(
            costs, "fedal", "iteration", model="cifar_resnet", method="fedal"
        )
        if base is None:
            raise ValueError("benchmarks/unit_costs.csv needs a fedal iteration row for cifar_resnet, fedal")
        return base.seconds
    if paper == "dpzv":
        base = _row(costs, "dpzv", "epoch", dataset="cifar10")
        if base is None:
            raise ValueError("benchmarks/unit_costs.csv needs a dpzv epoch row for cifar10")
        return base.seconds * TRAIN_SAMPLES.get(dataset, 50000) / TRAIN_SAMPLES["cifar10"]
    return 0.05


def _fedal_jobs(config: dict, costs: list[Cost]) -> dict[str, list[Job]]:
    from fedrepro.experiments import fedal, seed_tags

    section = config["fedal"]
    tags = seed_tags(section)
    per_output = {}
    for name in section.get("outputs", {}):
        if "experiment" not in section["outputs"][name]:
            continue
        jobs = []
        for run in fedal.output_runs(config, name):
            pool = run.setting.split("-")[0]
            clients = int(next(p[1:] for p in run.setting.split("-")[1:] if p[:1] == "c" and p[1:].isdigit()))
            seconds, measured = _lookup(costs, "fedal", "iteration", run.dataset, pool, run.method)
            if not measured and pool != "cifar_resnet":
                seconds *= clients / 15
            for tag in tags:
                jobs.append(
                    Job(
                        "fedal",
                        (run.dataset, run.method, run.setting, tag),
                        run.spec["iterations"],
                        "iteration",
                        seconds,
                        len(tag[1:].split("_")),
                        measured,
                    )
                )
        per_output[name] = jobs
    return per_output


def _fedsc_jobs(config: dict, costs: list[Cost]) -> dict[str, list[Job]]:
    from fedrepro.experiments import fedsc, seed_tags

    tags = seed_tags(config["fedsc"])
    jobs_by_folder = {}
    for run in fedsc.runs(config):
        model = run.spec["encoder"]["name"]
        rounds = run.spec.get("rounds", 1)
        seconds, measured = _lookup(costs, "fedsc", "round", run.dataset, model, run.method)
        probe_epochs = fedsc.probe_spec(config, run)["probe"]["epochs"]
        probe_seconds, probe_measured = _lookup(costs, "fedsc", "probe_epoch", run.dataset, model, run.method)
        for tag in tags:
            folder = f"{config['results']}/fedsc/runs/{run.dataset}/{run.method}/{run.setting}/{tag}"
            n = len(tag[1:].split("_"))
            jobs_by_folder[folder] = [
                Job("fedsc", (run.dataset, run.method, run.setting, tag), rounds, "round", seconds, n, measured),
                Job(
                    "fedsc",
                    (run.dataset, run.method, run.setting, tag, "probe"),
                    probe_epochs,
                    "probe_epoch",
                    probe_seconds,
                    n,
                    probe_measured,
                ),
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
    out["all runs"] = [j for jobs in jobs_by_folder.values() for j in jobs]
    return out


def _dpzv_jobs(config: dict, costs: list[Cost]) -> dict[str, list[Job]]:
    from fedrepro.experiments import dpzv, seed_tags

    tags = seed_tags(config["dpzv"])
    all_runs = dpzv.runs(config)

    def jobs_of(runs) -> list[Job]:
        jobs = []
        for run in runs:
            seconds, measured = _lookup(
                costs, "dpzv", "epoch", run.dataset, run.spec.get("client_model", ""), run.method
            )
            units = run.spec["epochs"] * len(run.spec.get("variants", [None]))
            jobs += [
                Job(
                    "dpzv",
                    (run.dataset, run.method, run.setting, tag),
                    units,
                    "epoch",
                    seconds,
                    len(tag[1:].split("_")),
                    measured,
                )
                for tag in tags
            ]
        return jobs

    out = {name: jobs_of(runs) for name, runs in dpzv.figure_runs(config, all_runs).items()}
    out["all runs"] = jobs_of(all_runs)
    return out


def _simple_jobs(paper: str, config: dict, costs: list[Cost]) -> dict[str, list[Job]]:
    """SteFFLe (per figure) and FedAvg: epochs or rounds of CPU-sized models."""
    import importlib

    from fedrepro.experiments import seed_tags

    module = importlib.import_module(f"fedrepro.experiments.{paper}")
    tags = seed_tags(config[paper])
    vectorised = paper == "steffle"  # one job trains all its seeds as one program
    unit = "epoch" if paper == "steffle" else "round"

    def jobs_of(runs) -> list[Job]:
        jobs = []
        for run in runs:
            units = run.spec.get("train", {}).get("epochs") or run.spec.get("rounds") or 1
            seconds, measured = _lookup(costs, paper, unit, run.dataset, "*", run.method)
            jobs += [
                Job(
                    paper,
                    (run.dataset, run.method, run.setting, tag),
                    units,
                    unit,
                    seconds,
                    1 if vectorised else len(tag[1:].split("_")),
                    measured,
                )
                for tag in tags
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


def plan(config: dict, costs: list[Cost] | None = None) -> dict[str, dict[str, list[Job]]]:
    """Per enabled paper: {table or figure: its training jobs, "all runs": every training job}."""
    costs = load_costs() if costs is None else costs
    out = {}
    for paper in enabled_papers(config):
        if paper == "fedal":
            per = _fedal_jobs(config, costs)
            per["all runs"] = _unique(j for jobs in per.values() for j in jobs)
        elif paper == "fedsc":
            per = _fedsc_jobs(config, costs)
        elif paper == "dpzv":
            per = _dpzv_jobs(config, costs)
        else:
            per = _simple_jobs(paper, config, costs)
        out[paper] = per
    return out


RUNTIME_MARGIN = 10  # the planner's costs are coarse (GPU rows, scaled): warn an order of magnitude out


def duration_warnings(config: dict) -> list[str]:
    """Jobs the planner (fedrepro.plan) prices at more than RUNTIME_MARGIN x `resources.train.runtime`,
    one warning per paper naming the iteration keys that give the job its length."""
    runtime = config["resources"]["train"]["runtime"]
    try:
        planned = plan(config)
    except (OSError, ValueError):  # no cost table (an installed package) or a row it needs: no estimate
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
    estimated = sum(j.gpu_hours for j in jobs if not j.measured)
    count = len({j.key[:4] for j in jobs})
    return f"| {name} | {count} | {hours:,.1f} | {estimated:,.1f} |"


def report(planned: dict, costs: list[Cost]) -> str:
    lines = [
        "# Cost plan (GPU-hours from benchmarks/unit_costs.csv)",
        "",
        "Each table or figure counts every training job it reads (jobs shared by several are counted",
        "in each); a paper's total counts each job once. 'estimated': hours from rows scaled by",
        "fedrepro.plan's documented assumptions, not measured for that data set, model and method.",
        "",
        "| paper / output | training jobs | GPU-hours | of which estimated |",
        "|---|---|---|---|",
    ]
    total: list[Job] = []
    for paper, per in planned.items():
        for name, jobs in per.items():
            if name != "all runs":
                lines.append(_jobs_line(f"{paper} {name}", jobs))
        lines.append(_jobs_line(f"**{paper} (all)**", per["all runs"]))
        total += per["all runs"]
    lines.append(_jobs_line("**whole configuration**", total))
    devices = sorted({c.device for c in costs})
    lines += ["", f"Measured rows ({', '.join(devices)}):"]
    lines += [f"- {c.paper} {c.unit} {c.dataset} {c.model} {c.method}: {c.seconds:g} s ({c.source})" for c in costs]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedrepro.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--configfile", nargs="+", default=["config.yaml"], help="config files in Snakemake's order (config.yaml first)"
    )
    parser.add_argument("--config", nargs="*", default=[], help="top-level key=value overrides")
    parser.add_argument("--costs", default=str(COSTS), help="table of measured seconds per unit")
    args = parser.parse_args(argv)
    configfiles = args.configfile if args.configfile[0].endswith("config.yaml") else ["config.yaml", *args.configfile]
    config = load_config(configfiles, args.config)
    costs = load_costs(Path(args.costs))
    print(report(plan(config, costs), costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
