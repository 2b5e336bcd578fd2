"""Planner of the SteFFLe paper (Section 5, Figs. 1-5): config section -> runs and report targets.

A run is one (data set, method, fairness notion, N, h) family: every seed, epsilon
and lambda of it trained as one vectorised program. Central methods (dp_fermi, fermi,
erm, tran2021) do not depend on N or h, so one run per (data set, fairness) serves
every panel. A run's spec holds only what it reads: the method's hyper-parameters,
its epsilon list (the union over the panels that use the family) and the lambda grid.
A training job trains the runs of one data set and silo split one after another
(`train_groups`, `train_jobs: split`): a run takes seconds, the start of a process
several, so one process per run would be mostly start-up; each run keeps its own
folder, inputs and cell store, so a changed setting retrains only its cells.

Figures (section `figures`): fig1 / fig3 / fig4 / fig5 are method-comparison grids
(eps x h panels, one curve per method); fig2 is SteFFLe's ablation over h and N.
fig4 (Retired Adult) is built only when `enabled` (the file must be downloadable
or pre-staged); otherwise the claims table says it was not produced. The
`eta_w_check` runs SteFFLe with the paper's eta_w (1e-5, App. E.2.1) beside the tuned
value (1e-5 leaves W near 0, so the fairness term barely acts), reported in the eta_w table.
Which method is federated, private, fair or trained by SGDA is read from the method table
(`fedrepro.algorithms.steffle`).
"""

from __future__ import annotations

import re

from fedrepro.algorithms.steffle import METHODS, TRAIN_SETTINGS, has_trait
from fedrepro.data.partition import make_tag
from fedrepro.experiments import Run
from fedrepro.pipeline import number_tag

PAPER = "steffle"
FIGURES = ("fig1", "fig2", "fig3", "fig4", "fig5")
COMPARISON_FIGURES = ("fig1", "fig3", "fig4", "fig5")
TABLES = ("points", "headline", "claims", "privacy", "eta_w")


def partition_tag(section: dict, num_silos: int, h: float, age_sort: str | None = None) -> str:
    """Algorithm 3's silos; age_sort (default the section's, else stable) orders tied ages."""
    sort = age_sort or section.get("age_sort", "stable")
    return make_tag("age", clients=num_silos, h=float(h), seed=section["partition_seed"], sort=sort)


def setting_tag(fairness: str, method: str, num_silos: int, h: float, variant: str = "") -> str:
    """e.g. dp_N3_h0.75, eo_central; non-fair methods do not depend on the notion: N3_h0, central."""
    silos = f"N{num_silos}_h{number_tag(h)}" if has_trait(method, "federated") else "central"
    base = f"{fairness}_{silos}" if has_trait(method, "fair") else silos
    return base + (f"_{variant}" if variant else "")


def _train_spec(section: dict, method: str, overrides: dict | None = None) -> dict:
    if has_trait(method, "sgda"):
        spec = dict(section["train"])
    else:
        shared = {
            k: section["train"][k]
            for k in ("batch", "epochs", "eta_theta", "lr_decay", "decay_every", "iterate", "eval_every", "sampling")
            if k in section["train"]
        }
        spec = {**shared, **section["baselines"][method]}
    return {**spec, **TRAIN_SETTINGS.get(method, {}), **(overrides or {})}


def _panels(section: dict) -> list[dict]:
    """Every (figure, dataset, fairness, method, N, h, eps) the figures plot, as flat dicts."""
    out = []
    figures = section["figures"]
    for name in COMPARISON_FIGURES:
        fig = figures.get(name)
        if not fig or not fig.get("enabled", True):
            continue
        for method in fig.get("methods", section["methods"]):
            for h in fig["h"]:
                for eps in fig["epsilons"]:
                    out.append(
                        {
                            "figure": name,
                            "dataset": fig["dataset"],
                            "fairness": fig["fairness"],
                            "method": method,
                            "num_silos": fig["num_silos"],
                            "h": h,
                            "eps": eps,
                        }
                    )
    fig2 = figures.get("fig2")
    if fig2 and fig2.get("enabled", True):
        for panel in fig2["panels"]:
            for n in panel["num_silos"]:
                for h in panel["h"]:
                    out.append(
                        {
                            "figure": "fig2",
                            "dataset": fig2["dataset"],
                            "fairness": fig2["fairness"],
                            "method": "steffle",
                            "num_silos": n,
                            "h": h,
                            "eps": panel["eps"],
                        }
                    )
    return out


def _family_key(p: dict) -> tuple:
    n, h = (p["num_silos"], p["h"]) if has_trait(p["method"], "federated") else (1, 0.0)
    h = 0.0 if n == 1 else h  # one silo holds all the data whatever h is
    fairness = p["fairness"] if has_trait(p["method"], "fair") else "dp"
    return (p["dataset"], p["method"], fairness, n, float(h))


def runs(config: dict) -> list[Run]:
    section = config[PAPER]
    families: dict[tuple, set] = {}
    for p in _panels(section):
        families.setdefault(_family_key(p), set()).add(p["eps"])
    out = []
    for (dataset, method, fairness, n, h), eps_set in families.items():
        out.append(_run(section, config, dataset, method, fairness, n, h, eps_set))
    check = section.get("eta_w_check")
    if check and check.get("enabled", True):
        for h in check["h"]:
            out.append(
                _run(
                    section,
                    config,
                    check["dataset"],
                    "steffle",
                    check["fairness"],
                    check["num_silos"],
                    h,
                    set(check["epsilons"]),
                    variant="wpaper",
                    overrides={"eta_w": section["eta_w_paper"], "w_step": "fixed"},
                )
            )
    return out + refcode_runs(config)


REFCODE = "refcode"


def refcode_runs(config: dict) -> list[Run]:
    """The authors' grid under compat_refcode (section `refcode_grid`): one run per h, all eps x lambda."""
    section = config[PAPER]
    grid = section.get("refcode_grid")
    if not grid:
        return []
    eps = {"inf" if float(e) == float("inf") else e for e in grid["epsilons"]}
    return [
        _run(
            section,
            config,
            grid["dataset"],
            "steffle",
            grid["fairness"],
            grid["num_silos"],
            h,
            eps,
            variant=REFCODE,
            overrides=grid["train"],
            lambdas=grid["lambdas"],
            age_sort=grid.get("age_sort"),
        )
        for h in grid["h"]
    ]


def main_runs(config: dict) -> list[Run]:
    """Every run of the default report (figures, tables, eta_w check): all but the refcode grid."""
    return [r for r in runs(config) if not r.setting.endswith("_" + REFCODE)]


def _eps_sorted(values) -> list:
    return sorted(values, key=float)  # float("inf") is inf


def _run(
    section, config, dataset, method, fairness, n, h, eps_set, variant="", overrides=None, lambdas=None, age_sort=None
) -> Run:
    spec = {
        "method": method,
        "fairness": fairness,
        "num_silos": n,
        "h": float(h),
        "epsilons": _eps_sorted(eps_set) if has_trait(method, "private") else ["inf"],
        "lambdas": [float(v) for v in (lambdas or section["lambdas"])] if has_trait(method, "fair") else [0.0],
        "train": _train_spec(section, method, overrides),
    }
    partition = partition_tag(section, n, h, age_sort) if has_trait(method, "federated") else None
    return Run(dataset, method, setting_tag(fairness, method, n, h, variant), spec, partition)


TRAIN_JOBS = ("split", "family")


def train_groups(config: dict) -> dict[str, list[Run]]:
    """The training jobs, job name -> its runs (every run of `runs`, the refcode grid's included).
    `train_jobs: split` (default): one job per data set and silo split (its partition tag, or central)
    trains every run on that split; `family`: one job per run (a cluster runs them side by side)."""
    per = config[PAPER].get("train_jobs", "split")
    if per not in TRAIN_JOBS:
        raise ValueError(f"config key '{PAPER}.train_jobs': {per!r}; allowed: {', '.join(TRAIN_JOBS)}")
    groups: dict[str, list[Run]] = {}
    for run in runs(config):
        key = (run.dataset, run.partition or "central") if per == "split" else run.key
        groups.setdefault(re.sub(r"\W", "_", "_".join(key)), []).append(run)
    return groups


def code_key(method: str) -> str:
    """The name of a training job's input that lists the code of `method`'s module (`code_sgda`)."""
    return "code_" + METHODS[method].entry.split(":")[0].rsplit(".", 1)[-1]


def code_entries(group: list[Run]) -> dict[str, str]:
    """Per method module of a training job, the input name of its code and the entry it runs."""
    return {code_key(r.method): METHODS[r.method].entry for r in group}


def train_outputs(group: list[Run], results: str) -> dict[str, str]:
    """A training job's outputs: metrics_i and summary_i of run i, in the run's folder ({seeds} open)."""
    return {
        f"{kind}_{i}": f"{run.folder(results, PAPER, '{seeds}')}/{kind}.{ext}"
        for i, run in enumerate(group)
        for kind, ext in (("metrics", "parquet"), ("summary", "json"))
    }


def group_spec(group: list[Run]) -> dict:
    """A training job's spec: per run, its method, setting, spec and the input naming its code; run i
    writes the job's outputs metrics_i and summary_i (`fedrepro.algorithms.steffle.jobs.run_group`)."""
    return {
        "runs": [{"method": r.method, "setting": r.setting, "spec": r.spec, "code": code_key(r.method)} for r in group]
    }


def figure_runs(config: dict) -> dict[str, list[Run]]:
    """Runs each figure reads (for its input list)."""
    section = config[PAPER]
    by_family = {
        _family_key({**r.spec, "dataset": r.dataset}): r for r in main_runs(config) if not r.setting.endswith("_wpaper")
    }
    out: dict[str, list[Run]] = {}
    for p in _panels(section):
        run = by_family[_family_key(p)]
        out.setdefault(p["figure"], [])
        if run not in out[p["figure"]]:
            out[p["figure"]].append(run)
    return out


def runs_of_figure(runs_by_figure: dict[str, list[Run]], name: str) -> list[Run]:
    """`figure_runs(config)[name]`; asking for a disabled figure says how to enable it."""
    if name not in runs_by_figure:
        raise ValueError(
            f"SteFFLe {name} is disabled in this config: set steffle.figures.{name}.enabled: true "
            "(fig4 needs the Retired Adult file, downloaded or pre-staged under data_root)"
        )
    return runs_by_figure[name]


def eta_w_spec(section: dict) -> dict:
    """W's ascent step the SGDA methods ran (and its rule) beside the paper's 1e-5 (App. E.2.1)."""
    return {
        "tuned": section["train"]["eta_w"],
        "paper": section["eta_w_paper"],
        "w_step_tuned": section["train"].get("w_step", "capped"),
    }


def figure_spec(config: dict, name: str) -> dict:
    """What a figure's report job needs: its panel layout, the scale and W's step size (for the title)."""
    section = config[PAPER]
    fig = dict(section["figures"][name])
    fig.setdefault("methods", list(section["methods"]))
    return {
        "figure": name,
        "layout": fig,
        "scale": config["scale"],
        "decimals": config["report"]["decimals"],
        "eta_w": eta_w_spec(section),
    }


def figures(config: dict) -> list[str]:
    section = config[PAPER]["figures"]
    return [name for name in FIGURES if name in section and section[name].get("enabled", True)]


def report_spec(config: dict) -> dict:
    section = config[PAPER]
    return {
        "scale": config["scale"],
        "decimals": config["report"]["decimals"],
        "figures": {name: figure_spec(config, name)["layout"] for name in figures(config)},
        "disabled_figures": [n for n in FIGURES if n not in figures(config)],
        "eta_w": eta_w_spec(section),
        "refcode_epochs": section.get("refcode_grid", {}).get("train", {}).get("epochs"),
    }


def check(config: dict) -> list[str]:
    """Cross-field errors the schema cannot express."""
    section = config[PAPER]
    errors = []
    for name, fig in section["figures"].items():
        for method in fig.get("methods", []):
            if method not in section["methods"]:
                errors.append(
                    f"config key '{PAPER}.figures.{name}.methods': {method!r} is not in "
                    f"{PAPER}.methods {section['methods']}"
                )
    for method in section["methods"]:
        if not has_trait(method, "sgda") and method not in section["baselines"]:
            errors.append(f"config key '{PAPER}.baselines': missing the settings of {method!r}")
        if not has_trait(method, "sgda") and section["train"].get("sampling") == "shuffle_keep_last":
            errors.append(
                f"config key '{PAPER}.train.sampling': 'shuffle_keep_last' (batch means over each batch's real "
                f"size) is for the SGDA methods only, and {method!r} (in {PAPER}.methods) inherits it; allowed "
                "for it: poisson, shuffle, replacement"
            )
    return errors or refcode_errors(config)  # runs() needs known methods


REFCODE_NEEDS = {"sampling": "shuffle_keep_last", "fairness": "dp"}  # SteffleConfig: the authors' DP stream
REFCODE_DATASET = "adult"  # refcode_hash_seed orders their Adult one-hot columns (refcode_columns)


def _train_key(section: dict, run: Run, key: str) -> str:
    """The config key a run's `train.<key>` comes from: the refcode grid's own train block, else the section's."""
    grid = section.get("refcode_grid") or {}
    if run.setting.endswith(f"_{REFCODE}") and key in grid.get("train", {}):
        return f"{PAPER}.refcode_grid.train.{key}"
    return f"{PAPER}.train.{key}"


def refcode_errors(config: dict) -> list[str]:
    """`rng: refcode` and `refcode_hash_seed` against every SGDA run they reach (SteffleConfig would refuse
    them in the training job): the authors' stream needs their sampling and notion, the hash seed their
    stream and their Adult columns. One error per key and problem, naming the runs."""
    section, found = config[PAPER], {}
    for run in runs(config):
        if not has_trait(run.method, "sgda"):
            continue
        train, grid_run = run.spec["train"], run.setting.endswith(f"_{REFCODE}")
        rng, hash_seed = train.get("rng", "streams"), train.get("refcode_hash_seed")
        got = {"sampling": train.get("sampling"), "fairness": run.spec["fairness"]}
        if rng == "refcode" and got != REFCODE_NEEDS:
            problem = (
                f"'refcode' (the authors' demographic-parity stream over their DataLoader batches) needs sampling "
                f"'shuffle_keep_last' and fairness 'dp', not sampling {got['sampling']!r} and fairness "
                f"{got['fairness']!r}; allowed: streams, or refcode where both hold (as in steffle.refcode_grid)"
            )
            found.setdefault((_train_key(section, run, "rng"), problem), []).append(run)
        if hash_seed is not None and rng != "refcode":
            problem = (
                f"{hash_seed} orders the authors' stream's columns and needs rng 'refcode', not {rng!r}; allowed: "
                "null, or an integer with rng: refcode"
            )
            found.setdefault((_train_key(section, run, "refcode_hash_seed"), problem), []).append(run)
        elif hash_seed is not None and run.dataset != REFCODE_DATASET:
            key = _train_key(section, run, "refcode_hash_seed")
            key = f"{PAPER}.refcode_grid.dataset" if grid_run and key.startswith(f"{PAPER}.refcode_grid") else key
            problem = (
                f"refcode_hash_seed orders the authors' Adult one-hot columns (algorithms/steffle/refcode_columns.py), "
                f"not those of data set {run.dataset!r}; allowed: data set {REFCODE_DATASET!r}, or refcode_hash_seed: null"
            )
            found.setdefault((key, problem), []).append(run)
    return [f"config key '{key}': {problem} (runs: {_run_names(hit)})" for (key, problem), hit in found.items()]


def _run_names(hit: list[Run], shown: int = 3) -> str:
    names = ["/".join(run.key) for run in hit]
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def count_errors(config: dict) -> list[str]:
    """Every figure's silos against the training set (Algorithm 3 gives each silo at least one sample;
    fedrepro.config.data_count_errors)."""
    from fedrepro.data.sizes import train_size

    section, errors = config["steffle"], []
    blocks = {f"steffle.figures.{name}": fig for name, fig in section["figures"].items() if fig.get("enabled", True)}
    blocks.update({f"steffle.{name}": section[name] for name in ("eta_w_check", "refcode_grid") if name in section})
    for key, block in blocks.items():
        n = train_size(config, block["dataset"])
        silos = {f"{key}.num_silos": block.get("num_silos")}
        silos.update({f"{key}.panels[{i}].num_silos": p["num_silos"] for i, p in enumerate(block.get("panels", []))})
        for where, value in silos.items():
            for count in value if isinstance(value, list) else [value] if value is not None else []:
                if count > n:
                    errors.append(
                        f"config key '{where}': {count} silos, but data set {block['dataset']!r} has {n} training "
                        f"samples (Algorithm 3 gives each silo at least one); allowed: 1 to {n}"
                    )
    return errors
