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

import dataclasses
import math

from fedrepro.algorithms import method_table
from fedrepro.data.partition import make_tag
from fedrepro.experiments import Run, seed_tags, training_options
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


def shared_for(config: dict, dataset: str) -> dict:
    """`dpzv.shared` with the data set's `overrides`: the options every run on `dataset` reads."""
    section = config[PAPER]
    return {**section["shared"], **section["datasets"][dataset].get("overrides", {})}


# (train, test) of the published sets a data set's options subsample (Zhang et al. 2015's Amazon Review Polarity,
# as fedrepro.data.catalog describes it); the paper names neither a subset nor its size
PUBLISHED_SIZES = {"amazon_polarity": (3_600_000, 400_000)}


def subsample(config: dict, dataset: str) -> dict | None:
    """{n_train, n_test, full_train, full_test} where the data set's options keep a subsample of a larger
    published set (paper-scale Amazon Review Polarity), else None: D sets q = B/D and sigma."""
    from fedrepro.data.prepared import resolve_options

    full = PUBLISHED_SIZES.get(dataset)
    if full is None:
        return None
    options = resolve_options(dataset, (config.get("datasets") or {}).get(dataset))
    kept = (options.get("n_train") or full[0], options.get("n_test") or full[1])
    if kept == tuple(full):
        return None
    return {"n_train": kept[0], "n_test": kept[1], "full_train": full[0], "full_test": full[1]}


def method_spec(config: dict, dataset: str, method: str) -> dict:
    """Every setting one (data set, method) reads, shared + dataset + method learning rates."""
    section = config[PAPER]
    data_cfg = section["datasets"][dataset]
    shared = shared_for(config, dataset)
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
        # the clients' forwards honour `precision` only (fl/precision.py); set only when not fp32, so no fp32 job re-runs
        **{k: v for k, v in training_options(config).items() if k == "precision"},
    }
    spec.update({k: shared[k] for k in COMMON_KEYS if k in shared})
    spec.update({k: shared[k] for k in method_table(PAPER)[method].config_keys if k in shared})
    if spec.get("server_update") == "zo":
        spec.pop("momentum", None)  # a ZO server reads zo_momentum only
    return spec


PAPER_CALIBRATION, SOUND = "paper", "sound"


def _variant(method: str, eps, clip, calibration: str = PAPER_CALIBRATION) -> tuple:
    return (float(eps), float(clip) if method == "dpzv" else None, calibration)


def sound_variants(config: dict, dataset: str, method: str) -> set[tuple]:
    """DPZV's sound calibration (`dpzv.sound`: the head by DP-SGD and the server's secret subsample, calibrated
    against the pooled clients) at its labels, beside the paper's row (issue 39)."""
    sound = config[PAPER].get("sound") or {}
    if method != "dpzv" or dataset not in sound.get("datasets", []):
        return set()
    return {_variant(method, e, config[PAPER]["shared"]["clip"], SOUND) for e in sound["eps"]}


def variants_needed(config: dict, dataset: str, method: str) -> list[tuple]:
    """(eps, clip, calibration) of one data set and method over every figure, sorted."""
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
            wanted |= {_variant(method, math.inf, clip), _variant(method, math.inf, math.inf)}
        fig5 = figs.get("fig5", {})
        if dataset in fig5.get("datasets", []):
            wanted |= {_variant(method, fig5["eps"], c) for c in fig5["clips"]}
    wanted |= sound_variants(config, dataset, method)
    return sorted(wanted, key=lambda v: (v[0], v[1] if v[1] is not None else 0.0, v[2]))


def variant_spec(eps: float, clip, calibration: str = PAPER_CALIBRATION, options: dict | None = None) -> dict:
    """A variant as its job reads it; the sound calibration carries `dpzv.sound.options`."""
    out = {"eps": _eps_value(eps)}
    if clip is not None:
        out["clip"] = "inf" if clip == math.inf else clip
    if calibration != PAPER_CALIBRATION:
        out.update(options or {}, calibration=calibration)
    return out


def variant_tag(eps: float, clip, calibration: str = PAPER_CALIBRATION) -> str:
    tag = f"eps{number_tag(eps)}"
    tag = tag if clip is None else f"{tag}-C{number_tag(clip)}"
    return tag if calibration == PAPER_CALIBRATION else f"{tag}-{calibration}"


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
                out.append(_run(config, dataset, method, spec, variants[i : i + per_job]))
    by_key = {run.key: run for run in out}
    for run in more_seed_runs(config, out):
        if run.key in by_key:  # a second item on the same cells: both items' seeds
            run = dataclasses.replace(run, seeds=tuple(dict.fromkeys((*by_key[run.key].seeds, *run.seeds))))
        by_key[run.key] = run
    return list(by_key.values())


def _run(config: dict, dataset: str, method: str, spec: dict, group: list[tuple], seeds: tuple = ()) -> Run:
    options = (config[PAPER].get("sound") or {}).get("options")
    return Run(
        dataset,
        method,
        "+".join(variant_tag(*v) for v in group),
        {**spec, "variants": [variant_spec(*v, options=options) for v in group]},
        partition_tag(config[PAPER]["datasets"][dataset]),
        seeds,
    )


def more_seed_runs(config: dict, planned: list[Run]) -> list[Run]:
    """Issue 44: the cells of `dpzv.more_seeds` (claims that a few more seeds would decide) run these seeds too,
    one job per (data set, method) holding just those variants; a job whose setting the plan already has takes
    them as extra seed jobs of that run instead (paper scale: one variant per job)."""
    section = config[PAPER]
    taken = {r.key: r for r in planned}
    per_job = section.get("variants_per_job", 1)
    out = []
    for item in section.get("more_seeds") or []:
        tags = tuple(seed_tags({"seeds": item["seeds"], "seeds_per_job": section.get("seeds_per_job", 1)}))
        clip = float(item.get("clip", section["shared"]["clip"]))
        for method in item["methods"]:
            picked = [v for v in variants_needed(config, item["dataset"], method) if _picked(v, item["eps"], clip)]
            spec = method_spec(config, item["dataset"], method)
            for i in range(0, len(picked), per_job):
                run = _run(config, item["dataset"], method, spec, picked[i : i + per_job], tags)
                if run.key in taken:
                    run = dataclasses.replace(taken[run.key], seeds=(*seed_tags(section), *tags))
                out.append(run)
    return out


def _picked(variant: tuple, eps: list, clip: float) -> bool:
    """A paper-calibration variant at one of `eps` (DPZV's at clip C, the item's or the shared one)."""
    value, variant_clip, calibration = variant
    return calibration == PAPER_CALIBRATION and any(float(e) == value for e in eps) and variant_clip in (None, clip)


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
        "keys": ("scale", "decimals", "delta", "clip", "embed_clips", "subsamples", "server_updates"),
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
        "keys": ("scale", "decimals", "clip", "methods", "server_updates", "subsamples"),
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
    trained = [d for d in training_datasets(config) if d in section["datasets"]]
    full = {
        "scale": config["scale"],
        "decimals": config["report"]["decimals"],
        "delta": section["delta"],
        "figures": figures,
        "methods": section["methods"],
        "clip": section["shared"]["clip"],
        "server_update": section["shared"].get("server_update"),
        # per data set, as the runs read them (shared with the data set's overrides)
        "server_updates": {d: shared_for(config, d).get("server_update", "zo") for d in trained},
        "embed_clips": {d: shared_for(config, d).get("embed_clip") for d in trained},
        "subsamples": {d: sub for d in trained if (sub := subsample(config, d))},
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
    return errors + client_weight_errors(config)


def kept_for_training(section: dict, n: int) -> int:
    """Training samples left after the validation holdout (`dpzv.shared.val`; build_vfl_data's rounding)."""
    shared = section["shared"]
    if shared.get("val", "holdout") != "holdout":
        return n
    return n - max(1, int(round(shared.get("val_fraction", 0.1) * n)))


def count_errors(config: dict) -> list[str]:
    """Each data set's training samples (after the validation holdout) against what its jobs draw: a training
    run's batch (the trainer refuses a larger one), Figure 6's samples (its memory job would measure fewer
    than the figure says)."""
    from fedrepro.data.sizes import train_size

    section, errors = config[PAPER], []
    need = {
        dataset: (section["datasets"][dataset]["batch_size"], f"{PAPER}.datasets.{dataset}.batch_size")
        for dataset in training_datasets(config)
        if dataset in section["datasets"]
    }
    fig6 = section["figures"].get("fig6", {})
    for dataset, local in memory_settings(config).items():
        batch = local.get("batch_size", section["datasets"].get(dataset, {}).get("batch_size", 1))
        draws = max(int(fig6["num_samples"]), batch * (int(fig6["rounds"]) + int(fig6.get("warmup_rounds", 1))))
        if draws > need.get(dataset, (0, ""))[0]:
            need[dataset] = (draws, f"{PAPER}.figures.fig6.num_samples")  # or its batches, where more
    for dataset, (count, key) in need.items():
        n = train_size(config, dataset)
        if kept_for_training(section, n) < count:
            least = next(m for m in range(count, 2 * count + 10) if kept_for_training(section, m) >= count)
            errors.append(
                f"config key 'datasets.{dataset}': {n} training samples, {kept_for_training(section, n)} after "
                f"dpzv's validation holdout (dpzv.shared.val_fraction), but {key} draws {count}; allowed: at "
                f"least {least} training samples, or a smaller {key}"
            )
    return errors


def client_weight_errors(config: dict) -> list[str]:
    """`dpzv.shared.client_weights` (one positive weight per client, the random schedule's q_j) against the
    clients of every data set the runs use (the trainer refuses another length in the job)."""
    section = config[PAPER]
    weights = section["shared"].get("client_weights")
    if weights is None:
        return []
    clients = {
        dataset: section["datasets"][dataset]["partition"]["clients"]
        for dataset in sorted({*training_datasets(config), *memory_datasets(config)})
        if dataset in section["datasets"]
    }
    wrong = {dataset: n for dataset, n in clients.items() if n != len(weights)}
    if not wrong:
        return []
    counts = ", ".join(f"{dataset} {n}" for dataset, n in wrong.items())
    return [
        f"config key 'dpzv.shared.client_weights': {len(weights)} weights, but the data sets' partitions have "
        f"other client counts (dpzv.datasets.<data set>.partition.clients: {counts}); allowed: null, or one "
        "positive weight per client (every data set the runs use with that many clients)"
    ]
