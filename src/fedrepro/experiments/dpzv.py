"""Planner of DPZV (Figures 2-6 and the claims table); pure Python, no torch.

A run is one method on one data set for a group of privacy variants (eps, and
C for DPZV). The variants a (data set, method) needs are the union over the
figures: Figure 3's eps grid, Figure 2's eps, Figure 4's clipped/unclipped
DPZV at eps = inf and Figure 5's C sweep at eps = 1. `variants_per_job` groups
them (quick: several per job to save start-up; paper: 1). A run's spec holds
only the keys every method reads (`COMMON_KEYS`) and the `config_keys` of its
row of the method table (`fedrepro.algorithms.dpzv.METHODS`), so changing, say,
ZOO-VFL's pair-release rule re-runs only ZOO-VFL.
"""

from __future__ import annotations

import math

from fedrepro.algorithms import method_table
from fedrepro.data.partition import make_tag
from fedrepro.experiments import Run
from fedrepro.pipeline import number_tag

PAPER = "dpzv"
COMMON_KEYS = ("schedule", "client_weights", "table_init", "val", "val_fraction", "library_accountant")
FIGURES = ("fig2", "fig3", "fig4", "fig5", "fig6")


def _eps_value(value):
    """eps for a spec: a number, or the string "inf" (JSON has no infinity)."""
    return "inf" if math.isinf(float(value)) else float(value)


def partition_tag(dataset_cfg: dict) -> str:
    part = dataset_cfg["partition"]
    return make_tag("vertical", split=part["split"], clients=part["clients"])


def learning_rates(rates: dict, dataset: str, method: str) -> dict:
    """A method's {server, client} rates on a data set (`dpzv.datasets.<dataset>.lr`): its own entry, else
    the data set's `default` (so a new method runs at paper scale without an entry per data set; the paper
    tunes each method's rates by grid search, Sec. 6 Setup, so `default` is a starting point, not a tuning)."""
    if method in rates:
        return rates[method]
    if "default" in rates:
        return rates["default"]
    raise KeyError(f"dpzv.datasets.{dataset}.lr has no entry for method {method!r} and no default")


def method_spec(config: dict, dataset: str, method: str) -> dict:
    """Every setting one (data set, method) reads, shared + dataset + method learning rates."""
    section = config[PAPER]
    data_cfg = section["datasets"][dataset]
    shared = {**section["shared"], **data_cfg.get("overrides", {})}
    lr = learning_rates(data_cfg["lr"], dataset, method)
    model = data_cfg["model"]
    spec = {
        "dataset": dataset,
        "method": method,
        "batch_size": data_cfg["batch_size"],
        "epochs": data_cfg["epochs"],
        "evals_per_epoch": data_cfg.get("evals_per_epoch", 1),
        "client_model": model["client"],
        "client_kwargs": dict(model.get("options", {})),
        "embed_dim": model["embed_dim"],
        "server_hidden": model["server_hidden"],
        "lr_server": lr["server"],
        "lr_client": lr["client"],
        "delta": section["delta"],
        "device": config.get("device", "auto"),
    }
    spec.update({k: shared[k] for k in COMMON_KEYS if k in shared})
    spec.update({k: shared[k] for k in method_table(PAPER)[method].config_keys if k in shared})
    if spec.get("server_update") == "zo":
        spec.pop("momentum", None)  # a ZO server reads zo_momentum only
    return spec


def _variant(method: str, eps, clip) -> tuple:
    return (float(eps), float(clip) if method == "dpzv" else None)


def variants_needed(config: dict, dataset: str, method: str) -> list[tuple]:
    """(eps, clip) pairs of one data set and method over every figure, sorted."""
    section = config[PAPER]
    figs = section["figures"]
    clip = float(section["shared"]["clip"])
    wanted = set()
    if dataset in figs.get("fig3", []):
        grid = section["datasets"][dataset].get("eps_grid", section["eps_grid"])
        wanted |= {_variant(method, e, clip) for e in grid}
    fig2 = fig2_panels(config)
    if dataset in fig2:
        wanted.add(_variant(method, fig2[dataset], clip))
    if method == "dpzv":
        if dataset in figs.get("fig4", {}).get("datasets", []):
            wanted |= {(math.inf, clip), (math.inf, math.inf)}
        fig5 = figs.get("fig5", {})
        if dataset in fig5.get("datasets", []):
            wanted |= {(float(fig5["eps"]), float(c)) for c in fig5["clips"]}
    return sorted(wanted, key=lambda v: (v[0], v[1] if v[1] is not None else 0.0))


def variant_spec(eps: float, clip) -> dict:
    out = {"eps": _eps_value(eps)}
    if clip is not None:
        out["clip"] = "inf" if clip == math.inf else clip
    return out


def variant_tag(eps: float, clip) -> str:
    tag = f"eps{number_tag(eps)}"
    return tag if clip is None else f"{tag}-C{number_tag(clip)}"


def fig2_panels(config: dict) -> dict:
    """Figure 2's data sets and their eps (a list in config: lists replace, dicts would merge across files)."""
    return {item["dataset"]: item["eps"] for item in config[PAPER]["figures"].get("fig2", [])}


def training_datasets(config: dict) -> list[str]:
    figs = config[PAPER]["figures"]
    names = [
        *figs.get("fig3", []),
        *fig2_panels(config),
        *figs.get("fig4", {}).get("datasets", []),
        *figs.get("fig5", {}).get("datasets", []),
    ]
    return list(dict.fromkeys(names))


def runs(config: dict) -> list[Run]:
    section = config[PAPER]
    per_job = section.get("variants_per_job", 1)
    out = []
    for dataset in training_datasets(config):
        for method in section["methods"]:
            variants = variants_needed(config, dataset, method)
            spec = method_spec(config, dataset, method)
            for i in range(0, len(variants), per_job):
                group = variants[i : i + per_job]
                setting = "+".join(variant_tag(*v) for v in group)
                out.append(
                    Run(
                        dataset,
                        method,
                        setting,
                        {**spec, "variants": [variant_spec(*v) for v in group]},
                        partition_tag(section["datasets"][dataset]),
                    )
                )
    return out


def runs_for(all_runs: list[Run], datasets, methods, eps=None, clip=None) -> list[Run]:
    """The runs holding a variant of `datasets` x `methods` (optionally with a given eps / clip)."""
    chosen = []
    for run in all_runs:
        if run.dataset not in datasets or run.method not in methods:
            continue
        variants = run.spec["variants"]
        if eps is not None:
            variants = [v for v in variants if float(v["eps"]) == float(eps)]
        if clip is not None and run.method == "dpzv":
            variants = [v for v in variants if float(v["clip"]) == float(clip)]
        if variants:
            chosen.append(run)
    return chosen


def figure_runs(config: dict, all_runs: list[Run]) -> dict[str, list[Run]]:
    """Which runs each figure/table reads."""
    section = config[PAPER]
    figs = section["figures"]
    methods = section["methods"]
    out = {"fig3": runs_for(all_runs, figs.get("fig3", []), methods)}
    out["fig2"] = [r for d, e in fig2_panels(config).items() for r in runs_for(all_runs, [d], methods, eps=e)]
    out["fig4"] = runs_for(all_runs, figs.get("fig4", {}).get("datasets", []), ["dpzv"], eps="inf")
    fig5 = figs.get("fig5", {})
    out["fig5"] = runs_for(all_runs, fig5.get("datasets", []), ["dpzv"], eps=fig5.get("eps"))
    out["claims"] = list(dict.fromkeys(out["fig2"] + out["fig3"] + out["fig4"] + out["fig5"]))
    return out


def memory_settings(config: dict) -> dict:
    """Figure 6's data sets with their model/batch overrides (a list in config, like fig2)."""
    return {item["dataset"]: item for item in config[PAPER]["figures"].get("fig6", {}).get("datasets", [])}


def memory_datasets(config: dict) -> list[str]:
    return list(memory_settings(config))


def memory_spec(config: dict, dataset: str) -> dict:
    """Figure 6 job: each method's settings on `dataset` with the figure's model/batch overrides."""
    section = config[PAPER]
    fig6 = section["figures"]["fig6"]
    local = memory_settings(config)[dataset]
    entries = []
    for method in section["methods"]:
        spec = method_spec(config, dataset, method)
        if "model" in local:
            spec.update(
                client_model=local["model"]["client"],
                client_kwargs=dict(local["model"].get("options", {})),
                embed_dim=local["model"]["embed_dim"],
                server_hidden=local["model"]["server_hidden"],
            )
        spec["batch_size"] = local.get("batch_size", spec["batch_size"])
        spec["epochs"] = 1
        for key in ("dataset", "method", "device"):
            spec.pop(key)
        momenta = fig6.get("zo_momentum", [spec.get("zo_momentum", 0.9)]) if "zo_momentum" in spec else [None]
        # no label: the report labels each bar (fedrepro.report.dpzv.memory_label), so a label edit re-measures nothing
        for m in momenta:
            entries.append({"method": method, "options": dict(spec) if m is None else {**spec, "zo_momentum": m}})
    return {
        "dataset": dataset,
        "entries": entries,
        "settings": {},
        "rounds": fig6["rounds"],
        "warmup_rounds": fig6.get("warmup_rounds", 1),
        "num_samples": fig6["num_samples"],
        "device": config.get("device", "auto"),
        "val": section["shared"].get("val", "holdout"),
        "val_fraction": section["shared"].get("val_fraction", 0.1),
    }


# The report jobs, one per function of fedrepro.report.dpzv, and each one's output stem: `runs` names the
# runs it reads (a key of `figure_runs`), `files` which of their outputs, `memory` the input name of Figure
# 6's memory tables where it reads them, `keys` and `figures` the options it reads (its params: a job re-runs
# when its own options change, not when another figure's do).
REPORT_JOBS = {
    "figure2": {
        "stem": "fig2_accuracy_curves",
        "runs": "fig2",
        "files": ("metrics", "summaries"),
        "keys": ("scale", "delta", "clip", "server_updates"),
        "figures": ("fig2",),
    },
    "figure3": {
        "stem": "fig3_privacy_tradeoff",
        "runs": "fig3",
        "files": ("summaries",),
        "keys": ("scale", "delta", "clip", "server_updates"),
        "figures": ("fig3",),
    },
    "figure4": {
        "stem": "fig4_clipping",
        "runs": "fig4",
        "files": ("metrics",),
        "keys": ("scale", "server_updates"),
        "figures": ("fig4",),
    },
    "figure5": {
        "stem": "fig5_clip_threshold",
        "runs": "fig5",
        "files": ("metrics",),
        "keys": ("scale", "server_updates"),
        "figures": ("fig5",),
    },
    "figure6": {
        "stem": "fig6_memory",
        "runs": None,
        "files": (),
        "memory": "tables",
        "keys": ("scale",),
        "figures": (),
    },
    "table3": {
        "stem": "fig3_accuracy",
        "runs": "fig3",
        "files": ("summaries",),
        "keys": ("scale", "decimals", "delta", "clip", "embed_clip", "server_updates"),
        "figures": ("fig3",),
    },
    "table6": {
        "stem": "fig6_memory",
        "runs": None,
        "files": (),
        "memory": "tables",
        "keys": ("scale", "decimals"),
        "figures": (),
    },
    "claims": {
        "stem": None,
        "runs": "claims",
        "files": ("summaries", "metrics"),
        "memory": "memory",
        "keys": ("scale", "decimals", "clip", "methods", "server_updates"),
        "figures": ("fig3", "fig4", "fig5"),
    },
}
FIGURE_JOBS = {job["stem"]: name for name, job in REPORT_JOBS.items() if name.startswith("figure")}
TABLE_JOBS = {job["stem"]: name for name, job in REPORT_JOBS.items() if name.startswith("table")}


def report_inputs(job: str, run_folders: list[str], memory_tables: list[str]) -> dict[str, list[str]]:
    """Input files of one report job: the `files` it reads from each run folder and, where it reads
    them, Figure 6's memory tables."""
    reads = REPORT_JOBS[job]
    names = {"metrics": "metrics.parquet", "summaries": "summary.json"}
    inputs = {key: [f"{folder}/{names[key]}" for folder in run_folders] for key in reads["files"]}
    if "memory" in reads:
        inputs[reads["memory"]] = list(memory_tables)
    return inputs


def report_spec(config: dict, job: str | None = None) -> dict:
    """Every report option; with `job` (a key of REPORT_JOBS) only the options that job reads."""
    section = config[PAPER]
    figures = {**section["figures"], "fig2": fig2_panels(config)}
    full = {
        "scale": config["scale"],
        "decimals": config["report"]["decimals"],
        "delta": section["delta"],
        "figures": figures,
        "methods": section["methods"],
        "clip": section["shared"]["clip"],
        "embed_clip": section["shared"].get("embed_clip"),
        "server_update": section["shared"].get("server_update"),
        "server_updates": {
            d: {**section["shared"], **section["datasets"][d].get("overrides", {})}.get("server_update", "zo")
            for d in training_datasets(config)
            if d in section["datasets"]
        },
    }
    if job is None:
        return full
    reads = REPORT_JOBS[job]
    return {**{k: full[k] for k in reads["keys"]}, "figures": {f: figures[f] for f in reads["figures"] if f in figures}}


def check(config: dict) -> list[str]:
    """Cross-field errors a schema cannot express."""
    section = config[PAPER]
    errors = []
    for dataset in {*training_datasets(config), *memory_datasets(config)}:
        if dataset not in section["datasets"]:
            errors.append(f"dpzv.figures uses data set {dataset!r}, which dpzv.datasets does not configure")
            continue
        rates = section["datasets"][dataset]["lr"]
        missing = [m for m in section["methods"] if m not in rates and "default" not in rates]
        if missing:
            errors.append(f"dpzv.datasets.{dataset}.lr lacks {', '.join(missing)}")
    if float(section["shared"]["clip"]) == math.inf:
        errors.append("dpzv.shared.clip must be finite (the DP sensitivity is 2C/B); Figure 4 adds the unclipped run")
    return errors
