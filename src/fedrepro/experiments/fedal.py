"""Planner of FedAL (Tables IV-IX, Figures 2, 4, 6-11): config section -> runs and report targets.

Config section `fedal` (schema: workflow/schemas/fedal.schema.yaml):
* `train`: settings every method shares (lr, batch_size, kd_temperature, evals);
* `discriminator`: FedAL / FedDF-AL's server discriminator;
* `methods`: per-method keys (tau, switches, baseline weights);
* `pools`: named client-model pools (lists of {name, options});
* `experiments`: named grids: dataset, pool, partition (dirichlet | natural),
  clients x alphas x public sizes, the iteration budget (one number or one per
  alpha), the methods to run, optional lr override and gradient diagnostics;
* `outputs`: each table / figure names the experiment (and methods, filters) it reads.

A run's spec holds only what its job reads: the shared training keys, its
method's keys, the pool, its budget, the discriminator only for adversarial
methods. A run's setting tag is `<pool>-a<alpha>-c<clients>-p<public>-i<iters>`
(`<pool>-n-c<clients>-...` for the natural split; `-gv` when it logs gradient
variances). Pure Python: no torch.
"""

from __future__ import annotations

import dataclasses
import json

from fedrepro.algorithms import method_table
from fedrepro.data.partition import make_tag
from fedrepro.experiments import Run, seed_tags
from fedrepro.pipeline import number_tag, seed_batches, seed_tag

PAPER = "fedal"
METHODS = tuple(method_table(PAPER))
TABLES = ("table4", "table5", "table6", "table7", "table8", "table9")
CURVES = ("fig7", "fig8", "fig9", "fig10", "fig11")
FIGURES = ("fig2", "fig4", "fig6", *CURVES)
OUTPUTS = (*TABLES, *FIGURES)


def _iterations(exp: dict, alpha_index: int) -> int:
    iters = exp["iterations"]
    if isinstance(iters, list):
        return int(iters[alpha_index])
    return int(iters)


def _grid(exp: dict) -> list[dict]:
    """One point per (alpha, clients, public) of an experiment."""
    natural = exp.get("partition", "dirichlet") == "natural"
    alphas = [None] if natural else exp["alphas"]
    return [
        {"alpha": a, "clients": int(c), "public": int(p), "iterations": _iterations(exp, i)}
        for i, a in enumerate(alphas)
        for c in exp["clients"]
        for p in exp["public"]
    ]


def setting_tag(exp: dict, point: dict) -> str:
    head = f"{exp['pool']}-" + ("n" if point["alpha"] is None else f"a{number_tag(point['alpha'])}")
    tag = f"{head}-c{point['clients']}-p{point['public']}-i{point['iterations']}"
    tag += f"-l{point['local_steps']}" if point.get("local_steps") else ""
    return tag + ("-gv" if exp.get("diagnostics") else "")


def parse_setting(tag: str) -> dict:
    """Inverse of `setting_tag`: {"pool", "alpha" (None for natural), "clients", "public", "iterations",
    "local_steps" (None unless the run is an `also_local_steps` variant)}."""
    parts = tag.split("-")
    try:
        fields = {p[0]: p[1:] for p in parts[1:] if p and p[0] in "acpil"}
        return {
            "pool": parts[0],
            "alpha": float(fields["a"]) if "a" in fields else None,
            "clients": int(fields["c"]),
            "public": int(fields["p"]),
            "iterations": int(fields["i"]),
            "local_steps": int(fields["l"]) if "l" in fields else None,
        }
    except (KeyError, ValueError):
        raise ValueError(f"fedal setting tag {tag!r} does not look like <pool>-a<alpha>-c<N>-p<P>-i<iters>") from None


def panel_setting(tag: str) -> str:
    """The setting without its local-steps variant: the runs one table panel compares."""
    return "-".join(p for p in tag.split("-") if not (p[:1] == "l" and p[1:].isdigit()))


def partition_tag(section: dict, point: dict) -> str:
    seed = section["partition_seed"]
    if point["alpha"] is None:
        return make_tag("natural", clients=point["clients"], public=point["public"], seed=seed)
    return make_tag(
        "dirichlet",
        alpha=point["alpha"],
        clients=point["clients"],
        public=point["public"],
        variant=section.get("dirichlet_variant", "client"),
        seed=seed,
    )


def run_spec(config: dict, exp: dict, method: str, point: dict) -> dict:
    """Exactly the settings one job reads."""
    section = config[PAPER]
    method_keys = dict(section["methods"][method])
    spec = {
        **section["train"],
        **({"lr": exp["lr"]} if "lr" in exp else {}),
        **method_keys,
        **({"local_steps": point["local_steps"]} if point.get("local_steps") else {}),
        "method": method,
        "pool": section["pools"][exp["pool"]],
        "iterations": point["iterations"],
        "device": config.get("device", "auto"),
    }
    if _has(method, "adversarial") and method_keys.get("use_al", True):
        spec["discriminator"] = dict(section["discriminator"])
    if exp.get("diagnostics") and method == "fedal":
        spec["diagnostics"] = dict(exp["diagnostics"])
    return spec


def _has(method: str, trait: str) -> bool:
    return trait in method_table(PAPER)[method].traits


def _planned(config: dict, name: str) -> list[tuple[dict, Run]]:
    """(grid point, run) of an experiment; a run with diagnostics whose twin without them another
    experiment plans is that twin, with the diagnostics added to it (`_diagnostic_twins`)."""
    twins = _diagnostic_twins(config)
    out = []
    for point, run in _raw_planned(config, name):
        plain = run.key if run.key in twins else twins.get(("gv", *run.key))
        if plain is not None:
            spec = {**run.spec, "diagnostics": twins[plain]}
            run = Run(plain[0], plain[1], plain[2], spec, run.partition)
        out.append((point, run))
    return out


def _diagnostic_twins(config: dict) -> dict[tuple, object]:
    """Figure 6's run is the SVHN alpha = 2 FedAL run of Tables VI and VIII plus gradient diagnostics, which
    change no number of the run (tests/fedal/test_sharing.py): one run serves both. Returns, per such
    pair, {plain run key: diagnostics, ("gv", diagnostics run key): plain run key}."""
    section = config[PAPER]
    plain = {
        run.key: run
        for name, exp in section["experiments"].items()
        if not exp.get("diagnostics")
        for _, run in _raw_planned(config, name)
    }
    twins: dict[tuple, object] = {}
    for name, exp in section["experiments"].items():
        if not exp.get("diagnostics"):
            continue
        bare = {k: v for k, v in exp.items() if k != "diagnostics"}
        for point, run in _raw_planned(config, name):
            key = (run.dataset, run.method, setting_tag(bare, point))
            twin = plain.get(key)
            rest = {k: v for k, v in run.spec.items() if k != "diagnostics"}
            if "diagnostics" in run.spec and twin is not None and (twin.spec, twin.partition) == (rest, run.partition):
                twins[key] = run.spec["diagnostics"]
                twins[("gv", *run.key)] = key
    return twins


def _variants(exp: dict, method: str) -> list[dict]:
    """The runs of `method` at one grid point: its own settings ({}), and one per value of the
    experiment's `also_local_steps` for it (a baseline's local budget that is a free choice)."""
    return [{}, *({"local_steps": int(n)} for n in exp.get("also_local_steps", {}).get(method, []))]


def _raw_planned(config: dict, name: str) -> list[tuple[dict, Run]]:
    section = config[PAPER]
    exp = section["experiments"][name]
    return [
        (
            point,
            Run(
                exp["dataset"],
                method,
                setting_tag(exp, point),
                run_spec(config, exp, method, point),
                partition_tag(section, point),
            ),
        )
        for grid_point in _grid(exp)
        for method in exp["methods"]
        for point in ({**grid_point, **variant} for variant in _variants(exp, method))
    ]


def experiment_runs(config: dict, name: str) -> list[Run]:
    return [run for _, run in _planned(config, name)]


def runs(config: dict) -> list[Run]:
    """Every run of every experiment; one run where two experiments plan the same job, and a run that is the
    first rounds of a longer one read from it (`_read_from_longer`)."""
    by_key: dict[tuple, Run] = {}
    for name in config[PAPER]["experiments"]:
        for run in experiment_runs(config, name):
            seen = by_key.get(run.key)
            if seen is not None and seen.spec != run.spec:
                raise ValueError(f"fedal: experiments plan the run {run.key} twice with different settings")
            by_key.setdefault(run.key, run)
    return _read_from_longer(list(by_key.values()))


# A run is, round for round, the first rounds of a run of the same setting with a larger budget: nothing but
# the number of rounds and the evaluation cadence reads `iterations` (fedrepro.algorithms.fedal.budget). Such a
# run (Table IX's |P| = 1000 cells, alpha = 1, 5,000 iterations, within the 7,000-iteration runs of Tables VI
# and VIII) runs only its last round, from the longest run's state (`budget.run_read_at`); the longest keeps
# that state (`budget.run_keeping`). Spec keys: `entry` (the method's), `read_at` (the longest run: the
# budgets read from it), `read_from` (a shorter run: the longest run's setting).
BUDGET = "fedrepro.algorithms.fedal.budget"


def _read_from_longer(planned: list[Run]) -> list[Run]:
    groups: dict[tuple, list[Run]] = {}
    for run in planned:
        rest = json.dumps({k: v for k, v in run.spec.items() if k != "iterations"}, sort_keys=True, default=str)
        groups.setdefault((run.dataset, run.method, run.partition, rest), []).append(run)
    out = {run.key: run for run in planned}
    for members in groups.values():
        longest = max(members, key=lambda r: r.spec["iterations"])
        shorter = [r for r in members if r.spec["iterations"] < longest.spec["iterations"]]
        if not shorter:
            continue
        entry = {"entry": method_table(PAPER)[longest.method].entry}
        budgets = sorted({r.spec["iterations"] for r in shorter})
        out[longest.key] = dataclasses.replace(longest, spec={**longest.spec, **entry, "read_at": budgets})
        for run in shorter:
            out[run.key] = dataclasses.replace(run, spec={**run.spec, **entry, "read_from": longest.setting})
    return list(out.values())


def job_entry(run: Run) -> str:
    """The function a run's job calls: the method's, or the budget wrapper of a run read from / kept for another."""
    if "read_at" in run.spec:
        return f"{BUDGET}:run_keeping"
    if "read_from" in run.spec:
        return f"{BUDGET}:run_read_at"
    return method_table(PAPER)[run.method].entry


def longer_input(results: str, run: Run, seeds: str) -> list[str]:
    """The `longer` input of a run read from a longer one: that run's summary (none for the others)."""
    if "read_from" not in run.spec:
        return []
    return [f"{run.folder(results, PAPER, seeds).rsplit('/', 2)[0]}/{run.spec['read_from']}/{seeds}/summary.json"]


# ------------------------------------------------------------------ seeds
def seed_tags_by_run(config: dict) -> dict[tuple, list[str]]:
    """Each run's `{seeds}` tags: `fedal.seeds` in jobs of at most `seeds_per_job`; a run that
    `fedal.more_seeds` names runs those seeds too (in the same jobs where `seeds_per_job` allows)."""
    section = config[PAPER]
    extra: dict[tuple, set[int]] = {}
    for entry in section.get("more_seeds", []):
        for _, run in _planned(config, entry["experiment"]):
            if run.method in entry["methods"]:
                extra.setdefault(run.key, set()).update(int(s) for s in entry["seeds"])
    per_job = int(section.get("seeds_per_job", len(section["seeds"])))
    base = list(section["seeds"])
    out = {}
    for run in runs(config):
        seeds = base + sorted(extra.get(run.key, set()) - set(base))
        out[run.key] = [seed_tag(batch) for batch in seed_batches(seeds, per_job)]
    return out


def run_folders(config: dict, results: str, planned: list[Run]) -> list[str]:
    """The folders of `planned` runs, one per seed tag of each (`seed_tags_by_run`)."""
    tags = seed_tags_by_run(config)
    return [run.folder(results, PAPER, tag) for run in planned for tag in tags[run.key]]


# ------------------------------------------------------------------ report targets
def output_runs(config: dict, name: str) -> list[Run]:
    """The runs a table or figure reads: its experiment, methods and optional alpha filter. A
    figure leaves out the `also_local_steps` variants (a table prints them as rows of their own)."""
    out = config[PAPER]["outputs"][name]
    alphas = None if out.get("alphas") is None else {float(a) for a in out["alphas"]}
    return [
        run
        for point, run in _planned(config, out["experiment"])
        if run.method in out["methods"]
        and (alphas is None or (point["alpha"] is not None and float(point["alpha"]) in alphas))
        and (name in TABLES or not point.get("local_steps"))
    ]


#: the outputs whose runs the claims table compares (the paper's claims: Tables IV-IX, Fig. 10)
CLAIM_OUTPUTS = (*TABLES, "fig10")


def claims_runs(config: dict) -> list[Run]:
    """Every run a claims-table comparison reads, once."""
    return list({run.key: run for name in CLAIM_OUTPUTS for run in output_runs(config, name)}.values())


def claims_spec(config: dict) -> dict:
    """The claims table's spec: per output, its panel axis and the runs it shows ([method, setting])."""
    section = config[PAPER]["outputs"]
    return {
        "name": "claims",
        "outputs": {
            name: {
                "axis": section[name].get("axis", "alpha"),
                "runs": [[run.method, run.setting] for run in output_runs(config, name)],
            }
            for name in CLAIM_OUTPUTS
        },
        "scale": config["scale"],
        "decimals": config["report"]["decimals"],
    }


def fig4_partitions(config: dict) -> list[tuple[str, str]]:
    """(dataset, partition tag) per alpha of Figure 4's bubble plots."""
    f = config[PAPER]["outputs"]["fig4"]
    return [
        (
            f["dataset"],
            make_tag(
                "dirichlet", alpha=a, clients=f["clients"], public=f["public"], seed=config[PAPER]["partition_seed"]
            ),
        )
        for a in f["alphas"]
    ]


def report_spec(config: dict, name: str) -> dict:
    """What a report job reads besides its inputs (the output's own config + scale)."""
    return {
        "name": name,
        **config[PAPER]["outputs"][name],
        "scale": config["scale"],
        "decimals": config["report"]["decimals"],
    }


def count_errors(config: dict) -> list[str]:
    """The counts the data must hold: clients + public samples against the training set, a natural split's
    clients against its groups, Figure 2's class against the classes (fedrepro.config.data_count_errors)."""
    from fedrepro.data.sizes import dataset_options, num_classes, train_size

    section, errors = config[PAPER], []
    for name, exp in section["experiments"].items():
        if exp.get("partition", "dirichlet") == "natural":
            errors += _natural_group_errors(config, name, exp)
            continue
        key, dataset, n = f"fedal.experiments.{name}", exp["dataset"], train_size(config, exp["dataset"])
        for clients, public in ((c, p) for c in exp["clients"] for p in exp["public"] if c + p > n):
            errors.append(
                f"config keys '{key}.clients' and '{key}.public': {clients} clients and {public} public samples "
                f"need at least {clients + public} training samples (one per client), but {dataset!r} has {n}; "
                f"allowed: clients + public <= {n}"
            )
    for name, out in section["outputs"].items():
        if "class" in out and out.get("experiment") in section["experiments"]:
            dataset = section["experiments"][out["experiment"]]["dataset"]
            classes = num_classes(dataset, dataset_options(config, dataset))
            if not 0 <= out["class"] < classes:
                errors.append(
                    f"config key 'fedal.outputs.{name}.class': {out['class']}, but data set {dataset!r} "
                    f"(experiment {out['experiment']!r}) has {classes} classes; allowed: 0 to {classes - 1}"
                )
    return errors


def _natural_group_errors(config: dict, name: str, exp: dict) -> list[str]:
    """A natural split has one client per natural group (LEAF user), and only the prepared data knows
    how many groups there are: checked here when the data set is already prepared with the config's
    options, else by the partition job, before any training (fedrepro.data.partition.natural_partition)."""
    from fedrepro.experiments.fit import prepared_group_count

    groups = prepared_group_count(config, exp["dataset"])
    key = f"fedal.experiments.{name}.clients"
    return [
        f"config key '{key}': {clients} clients, but the prepared {exp['dataset']!r} has {groups} natural groups "
        f"(one client per group); allowed: 1 to {groups}"
        for clients in exp["clients"]
        if groups is not None and not 1 <= clients <= groups
    ]


def _budget_errors(key: str, exp: dict, section: dict, method: str) -> list[str]:
    """With iterations counted in steps, a budget below a method's tau buys not even one round."""
    if {**section["train"], **section["methods"][method]}.get("iteration_unit", "step") != "step":
        return []
    tau = section["methods"][method].get("tau", 1)
    budgets = exp["iterations"] if isinstance(exp["iterations"], list) else [exp["iterations"]]
    if min(budgets) < tau:
        return [
            f"config key '{key}.iterations': {min(budgets)} is smaller than {PAPER}.methods.{method}.tau = {tau}, "
            "so not even one round would run; give at least tau iterations"
        ]
    return []


def _pool_errors(key: str, exp: dict, section: dict) -> list[str]:
    """Methods whose pool must hold one architecture (FedAvg) or several (FedDF-AL's discriminator)."""
    if exp["pool"] not in section["pools"]:
        return []
    homogeneous = len(section["pools"][exp["pool"]]) == 1
    needs = {
        "one_architecture": (homogeneous, "a one-architecture pool"),
        "two_architectures": (not homogeneous, "at least two architectures"),
    }
    return [
        f"config key '{key}.methods': {method} needs {text}"
        for method in exp["methods"]
        if method in METHODS
        for trait, (met, text) in needs.items()
        if _has(method, trait) and not met
    ]


def _variant_errors(key: str, exp: dict) -> list[str]:
    """`also_local_steps` names methods the experiment runs that have a local-steps setting."""
    takes = sorted(m for m, row in method_table(PAPER).items() if "local_steps" in row.config_keys)
    errors = []
    for method in exp.get("also_local_steps", {}):
        if method not in exp["methods"]:
            errors.append(f"config key '{key}.also_local_steps.{method}': {method!r} is not in {key}.methods")
        elif method not in takes:
            errors.append(
                f"config key '{key}.also_local_steps.{method}': {method!r} has no local-steps setting; "
                f"allowed: {', '.join(takes)}"
            )
    return errors


def _more_seeds_errors(config: dict) -> list[str]:
    """`more_seeds` names planned experiments and methods they run."""
    section, errors = config[PAPER], []
    for i, entry in enumerate(section.get("more_seeds", [])):
        key = f"{PAPER}.more_seeds[{i}]"
        exp = section["experiments"].get(entry["experiment"])
        if exp is None:
            errors.append(
                f"config key '{key}.experiment': {entry['experiment']!r} is not one of {sorted(section['experiments'])}"
            )
        elif set(entry["methods"]) - set(exp["methods"]):
            absent = sorted(set(entry["methods"]) - set(exp["methods"]))
            errors.append(f"config key '{key}.methods': {absent} not run by experiment {entry['experiment']!r}")
    return errors


def _shared_rounds_errors(config: dict) -> list[str]:
    """A run with `more_seeds` is not read from (or kept for) a run of another budget, whose seeds it
    would have to share (`_read_from_longer`). Two experiments that plan one run with different settings
    cannot be planned at all; `fedrepro.config.duplicate_run_errors` names their keys, so none here."""
    try:
        tags = seed_tags_by_run(config)
    except ValueError:
        return []
    base = seed_tags(config[PAPER])
    return [
        f"config key '{PAPER}.more_seeds': run {'/'.join(run.key)} shares its rounds with a run of another "
        "budget (one is read from the other), so both need the same seeds; remove it from more_seeds"
        for run in runs(config)
        if tags[run.key] != base and ("read_from" in run.spec or "read_at" in run.spec)
    ]


def check(config: dict) -> list[str]:
    """Cross-field errors the schema cannot express."""
    section = config[PAPER]
    errors = []
    for name, exp in section["experiments"].items():
        key = f"{PAPER}.experiments.{name}"
        if exp["pool"] not in section["pools"]:
            errors.append(f"config key '{key}.pool': {exp['pool']!r} is not one of {sorted(section['pools'])}")
        natural = exp.get("partition", "dirichlet") == "natural"
        if not natural and "alphas" not in exp:
            errors.append(f"config key '{key}.alphas': required for partition dirichlet")
        if isinstance(exp["iterations"], list) and len(exp["iterations"]) != (
            1 if natural else len(exp.get("alphas", []))
        ):
            errors.append(f"config key '{key}.iterations': give one number or one per alpha")
        for method in exp["methods"]:
            if method not in section["methods"]:
                errors.append(f"config key '{key}.methods': {method!r} has no settings under {PAPER}.methods")
            else:
                errors += _budget_errors(key, exp, section, method)
        errors += _pool_errors(key, exp, section) + _variant_errors(key, exp)
    errors += _more_seeds_errors(config)
    for name, out in section["outputs"].items():
        if name != "fig4" and out["experiment"] not in section["experiments"]:
            errors.append(
                f"config key '{PAPER}.outputs.{name}.experiment': {out['experiment']!r} "
                f"is not one of {sorted(section['experiments'])}"
            )
        elif name != "fig4":
            exp = section["experiments"][out["experiment"]]
            missing = set(out["methods"]) - set(exp["methods"])
            if missing:
                errors.append(
                    f"config key '{PAPER}.outputs.{name}.methods': {sorted(missing)} not run by "
                    f"experiment {out['experiment']!r}"
                )
            if out.get("alphas") is not None:
                natural = exp.get("partition", "dirichlet") == "natural"
                planned = set() if natural else {float(a) for a in exp.get("alphas", [])}
                absent = sorted(float(a) for a in out["alphas"] if float(a) not in planned)
                if absent:
                    errors.append(
                        f"config key '{PAPER}.outputs.{name}.alphas': {absent} not planned by experiment "
                        f"{out['experiment']!r} ("
                        + ("a natural partition has no alpha; " if natural else f"its alphas are {sorted(planned)}; ")
                        + "set alphas: null to keep every point)"
                    )
    return errors or _shared_rounds_errors(config)
