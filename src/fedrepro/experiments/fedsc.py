"""Planner of the FedSC paper (pure Python): config section -> runs, probes and report cells.

Runs (one pretraining job per method, dataset, participation, privacy level and seed batch):
* every method of `methods` (the methods of the table `fedrepro.algorithms.fedsc.METHODS` this
  scale runs), on every dataset, with full participation (`full`) and partial participation
  (`partial`: max(int(p J), 2) clients per round, p = `datasets.<d>.partial`);
* a `private` method (FedSC) instead at every privacy level of `datasets.<d>.privacy` for the
  participations the level lists; eps = inf (share every round, no noise) always runs;
* a `centralized` method (Centralized SC) once per dataset (setting `central`).
Two privacy levels whose runs would be identical (same participation, sharing
schedule and explicit sigma, e.g. Table 6's (6, 1e-2) and (8, 1e-4) on SVHN) share
one run that reports its epsilon at both deltas: Table 5's eps = 8 accuracies equal
Tables 3-4's eps = 6 ones, the same runs under two accountings.

Every run's spec holds only what its method reads; the probe stage's spec only
the encoder and probe settings. Report cells name the probe/summary files and
the (row, column) of the paper's tables they fill.
"""

from __future__ import annotations

import dataclasses
import json
import math

from fedrepro.algorithms.fedsc import METHODS
from fedrepro.algorithms.fedsc import prefix as shared_prefix
from fedrepro.algorithms.fedsc.participation import clients_per_round
from fedrepro.data.partition import make_tag
from fedrepro.experiments import Run, index, seed_tags, training_options
from fedrepro.pipeline import number_tag, seed_batches, seed_tag

PAPER = "fedsc"
DATASET_NAMES = {"svhn": "SVHN", "cifar10": "CIFAR10", "cifar100": "CIFAR100"}
TRAIN_KEYS = ("lr", "grad_clip")  # keys of a method block that go into the spec's `train`
PARTICIPATIONS = ("full", "partial")
PROPOSED, NO_SHARING = "fedsc", "fedavg_sc"  # the two methods Tables 3-5 and Figure 2 compare


def row_name(method: str) -> str:
    """The method's row in Table 2."""
    return METHODS[method].label


def short_name(method: str) -> str:
    """The method's name in Tables 3-5 and Figure 2 ('FedAvg+SC', 'FedSC')."""
    return row_name(method).removesuffix(" (Proposed)").replace(" + ", "+")


def partition_tag(ds: dict) -> str:
    params = {"clients": ds["clients"]}
    if ds.get("per_client") is not None:
        params["per_client"] = ds["per_client"]
    return make_tag("classes", **params)


def participants(ds: dict, participation: str) -> int:
    """Clients per round of a dataset's `full` or `partial` setting."""
    return clients_per_round(int(ds["clients"]), "full" if participation == "full" else float(ds["partial"]))


def column(dataset: str, ds: dict, participation: str) -> str:
    """The paper's column label, e.g. 'CIFAR10 2/10'."""
    return f"{DATASET_NAMES.get(dataset, dataset)} {participants(ds, participation)}/{ds['clients']}"


def _base_spec(config: dict, section: dict, dataset: str, method: str) -> dict:
    ds = section["datasets"][dataset]
    m = section["methods"][method]
    train = {**section["train"], "batch_size": ds["batch_size"], **{k: m[k] for k in TRAIN_KEYS}}
    spec = {
        "method": method,
        "rounds": section["rounds"],
        "encoder": ds["encoder"],
        "projector": ds["projector"],
        "train": train,
        "augment": {**section.get("augment", {}), **ds.get("augment", {})},
        "knn": section["knn"],
        "device": config.get("device", "auto"),
        **training_options(config),
    }
    if "normalize" in ds:
        spec["normalize_mean"], spec["normalize_std"] = ds["normalize"]["mean"], ds["normalize"]["std"]
    for key in METHODS[method].config_keys:
        if key not in TRAIN_KEYS:
            spec[key] = m.get(key, {})
    if "sc" in METHODS[method].traits:
        spec.update(mu=ds["mu"], loss_scale=section["loss_scale"], sharing=None)
    return spec


def _fedsc_spec(section: dict, ds: dict, base: dict, level: dict, deltas: list[float]) -> dict:
    eps = level["eps"]
    privacy = {"eps": eps, "deltas": deltas}
    if eps != "inf":
        privacy.update(
            delta=level["delta"],
            sigma=level.get("sigma"),
            sens_factor=section["sens_factor"],
            partial_scaling=section["partial_scaling"],
        )
    sharing = level.get("sharing", {"after": 0.0, "every": 1}) if eps != "inf" else {"after": 0.0, "every": 1}
    return {
        **base,
        "sharing": sharing,
        "privacy": privacy,
        "alpha": section["alpha"],
        "dpcalr": section["dpcalr"],
        "client_weights": section["client_weights"],
    }


def privacy_levels(ds: dict) -> list[dict]:
    """The configured levels plus eps = inf (for both participations)."""
    return [{"eps": "inf", "participation": list(PARTICIPATIONS)}, *ds.get("privacy", [])]


def _level_identity(participation: str, level: dict):
    if level["eps"] == "inf":
        return (participation, "inf")
    sharing = level.get("sharing", {"after": 0.0, "every": 1})
    noise = ("sigma", level["sigma"]) if level.get("sigma") is not None else ("eps", level["eps"], level["delta"])
    return (participation, sharing.get("after", 0.0), sharing.get("every", 1), noise)


def level_tag(participation: str, level: dict) -> str:
    if level["eps"] == "inf":
        return f"{participation}_epsinf"
    return f"{participation}_eps{number_tag(level['eps'])}_d{number_tag(level['delta'])}"


def fedsc_settings(ds: dict) -> dict[tuple[str, object, object], str]:
    """(participation, eps, delta) -> the setting tag of the run serving it (shared runs deduplicated)."""
    by_identity: dict = {}
    out = {}
    for level in privacy_levels(ds):
        for participation in level["participation"]:
            key = _level_identity(participation, level)
            tag = by_identity.setdefault(key, level_tag(participation, level))
            out[(participation, level["eps"], level.get("delta"))] = tag
    return out


def _private_runs(config, section, dataset, method, part_tag) -> list[Run]:
    ds = section["datasets"][dataset]
    base = _base_spec(config, section, dataset, method)
    groups: dict[str, tuple[dict, str, list[float]]] = {}
    settings = fedsc_settings(ds)
    for level in privacy_levels(ds):
        for participation in level["participation"]:
            tag = settings[(participation, level["eps"], level.get("delta"))]
            deltas = groups.setdefault(tag, (level, participation, []))[2]
            if level.get("delta") is not None and level["delta"] not in deltas:
                deltas.append(level["delta"])
    runs = []
    for tag, (level, participation, deltas) in groups.items():
        spec = _fedsc_spec(section, ds, _participating(section, ds, base, participation), level, deltas)
        runs.append(Run(dataset, method, tag, spec, part_tag))
    return runs


def _participation(ds: dict, participation: str):
    return "full" if participation == "full" else participants(ds, participation)


def _participating(section: dict, ds: dict, spec: dict, participation: str) -> dict:
    """`spec` under `participation`; partial SC runs also carry `first_round` (who trains in round 1)."""
    out = {**spec, "participation": _participation(ds, participation)}
    if participation != "full" and "sc" in METHODS[spec["method"]].traits:
        out["first_round"] = section.get("first_round", "all")
    return out


def enabled_datasets(section: dict) -> list[str]:
    """`run_datasets` names the datasets this scale runs (config merging cannot delete the others)."""
    return list(section["run_datasets"])


def runs(config: dict) -> list[Run]:
    section = config[PAPER]
    out = []
    for dataset in enabled_datasets(section):
        ds = section["datasets"][dataset]
        part_tag = partition_tag(ds)
        for method in section["methods"]:
            traits = METHODS[method].traits
            if "private" in traits:
                out += _private_runs(config, section, dataset, method, part_tag)
            elif "centralized" in traits:
                central = section["centralized"]
                spec = _base_spec(config, section, dataset, method)
                spec.update(
                    participation="full",
                    rounds=central["rounds"],
                    train={**spec["train"], "local_epochs": central["local_epochs"]},
                )
                out.append(Run(dataset, method, "central", spec, part_tag))
            else:
                for participation in PARTICIPATIONS:
                    spec = _participating(section, ds, _base_spec(config, section, dataset, method), participation)
                    out.append(Run(dataset, method, participation, spec, part_tag))
    return [_knn_where_read(section, run) for run in out]


def _figure2_settings(section: dict) -> set[tuple[str, str, str]]:
    """(data set, method, setting) of the runs whose kNN curves Figure 2 draws."""
    datasets = section.get("tables", {}).get("figure2", {}).get("datasets", [])
    out = set()
    for dataset in datasets:
        if dataset in section["datasets"]:
            out.add((dataset, PROPOSED, fedsc_settings(section["datasets"][dataset])[("full", "inf", None)]))
            out.add((dataset, NO_SHARING, "full"))
    return out


def _knn_where_read(section: dict, run: Run) -> Run:
    """Only Figure 2 reads the per-round kNN monitor: every other run evaluates it at its last round only
    (`knn.every` = rounds; the loop always evaluates the last round). The monitor draws no random
    numbers and leaves the model as it was, so training is the same either way (tests/fedsc)."""
    if (run.dataset, run.method, run.setting) in _figure2_settings(section):
        return run
    return dataclasses.replace(run, spec={**run.spec, "knn": {**run.spec["knn"], "every": run.spec["rounds"]}})


@dataclasses.dataclass(frozen=True)
class Prefix:
    """A prefix job (`fedrepro.algorithms.fedsc.prefix`): the first `rounds` rounds of FedAvg+SC in one setting,
    started from the shorter prefix `start` of the same setting (None: from round 1)."""

    dataset: str
    setting: str
    rounds: int
    spec: dict = dataclasses.field(hash=False, compare=False)
    partition: str | None = None
    start: str | None = None


def prefixes(runs: list[Run]) -> tuple[dict[tuple[str, str], Prefix], dict[tuple[str, str, str], str]]:
    """The prefix jobs by (data set, setting), and the prefix setting each run (dataset, method, setting) starts
    from. Runs of one setting without privacy (same identity) share a chain of prefixes, one per first
    sharing round: a private run starts from the prefix ending before its first sharing round, each prefix
    from the next shorter one, the FedAvg+SC run from the longest. A setting with fewer than two such runs
    gets none."""
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        traits = METHODS[run.method].traits
        before = shared_prefix.rounds_before_sharing(run.spec)
        starts = run.spec.get("sharing") is None or 0 < before < int(run.spec["rounds"])  # else shares never / at once
        if "sc" in traits and "centralized" not in traits and starts:
            key = (run.dataset, run.partition, json.dumps(shared_prefix.identity(run.spec), sort_keys=True))
            groups.setdefault(key, []).append(run)
    jobs: dict[tuple[str, str], Prefix] = {}
    starts: dict[tuple[str, str, str], str] = {}
    for (dataset, partition, _), members in groups.items():
        private = {r.key: shared_prefix.rounds_before_sharing(r.spec) for r in members if r.spec.get("sharing")}
        if not private or len(members) < 2:
            continue
        every = math.gcd(*(shared_prefix.knn_every(r.spec) for r in members))
        name, start = members[0].setting.split("_")[0], None
        for rounds in sorted(set(private.values())):
            setting = f"{name}_r{rounds}"
            if (dataset, setting) in jobs:
                raise ValueError(f"fedsc: two settings of {dataset} share the prefix name {setting}")
            spec = shared_prefix.prefix_spec(members[0].spec, rounds, every)
            jobs[(dataset, setting)] = Prefix(dataset, setting, rounds, spec, partition, start)
            starts.update({key: setting for key, r in private.items() if r == rounds})
            start = setting
        starts.update({r.key: start for r in members if r.key not in private})  # FedAvg+SC: the longest
    return jobs, starts


def prefix_folder(results: str, dataset: str, setting: str, seeds: str) -> str:
    return f"{results}/{PAPER}/prefixes/{dataset}/{setting}/{seeds}"


def prefix_input(results: str, dataset: str, setting: str | None, seeds: str) -> list[str]:
    """The `prefix` input of a job that starts from prefix `setting` (none for None)."""
    return [] if setting is None else [f"{prefix_folder(results, dataset, setting, seeds)}/prefix.pt"]


RANDOM_ROW = "Random encoder (untrained) + probe"


def random_probe_spec(config: dict, dataset: str) -> dict:
    """The reference row's probe: an untrained backbone of the dataset's architecture, same probe."""
    section = config[PAPER]
    ds = section["datasets"][dataset]
    spec = {
        "encoder": ds["encoder"],
        "projector": ds["projector"],
        "probe": section["probe"],
        "device": config.get("device", "auto"),
    }
    if "normalize" in ds:
        spec["normalize_mean"], spec["normalize_std"] = ds["normalize"]["mean"], ds["normalize"]["std"]
    return spec


def random_probe_paths(config: dict, dataset: str) -> list[str]:
    return [
        f"{config['results']}/{PAPER}/runs/{dataset}/random_encoder/untrained/{tag}/probe.json"
        for tag in seed_tags(config[PAPER])
    ]


def probe_spec(config: dict, run: Run) -> dict:
    section = config[PAPER]
    spec = {
        "encoder": run.spec["encoder"],
        "projector": run.spec["projector"],
        "probe": section["probe"],
        "device": config.get("device", "auto"),
    }
    for key in ("normalize_mean", "normalize_std"):
        if key in run.spec:
            spec[key] = run.spec[key]
    return spec


# ----------------------------------------------------------------------------- report cells


def _folders(config: dict, dataset: str, method: str, setting: str) -> list[str]:
    return [f"{config['results']}/{PAPER}/runs/{dataset}/{method}/{setting}/{tag}" for tag in seed_tags(config[PAPER])]


def _where(config: dict, dataset: str, col: str) -> dict:
    """The data set and participation of a cell in column `col`."""
    full = column(dataset, config[PAPER]["datasets"][dataset], "full")
    return {"dataset": dataset, "participation": "full" if col == full else "partial"}


def _cells(config, dataset, method, setting, row, col, filename="probe.json") -> list[dict]:
    return [
        {"path": f"{folder}/{filename}", "row": row, "column": col, **_where(config, dataset, col)}
        for folder in _folders(config, dataset, method, setting)
    ]


def _random_cells(config: dict, dataset: str, col: str) -> list[dict]:
    return [
        {"path": path, "row": RANDOM_ROW, "column": col, **_where(config, dataset, col)}
        for path in random_probe_paths(config, dataset)
    ]


def table2_cells(config: dict) -> list[dict]:
    """Linear-probe accuracy of every method at the table's participations (`tables.table2.participation`,
    both by default); FedSC at eps = inf. Centralized SC is not federated: its one run keeps the paper's
    column, full participation (Table 2's "10/10"), whichever participations the table lists."""
    section = config[PAPER]
    table = section["tables"]["table2"]
    participations = table.get("participation", list(PARTICIPATIONS))
    central_at = "full" if "full" in participations else participations[0]  # where its row is listed
    cells = []
    for participation in participations:
        for dataset in table["datasets"]:
            ds = section["datasets"][dataset]
            col = column(dataset, ds, participation)
            for method in METHODS:
                if method not in section["methods"]:
                    continue
                traits = METHODS[method].traits
                if "centralized" in traits:
                    if participation == central_at:
                        full = column(dataset, ds, "full")
                        cells += _cells(config, dataset, method, "central", row_name(method), full)
                    continue
                setting = fedsc_settings(ds)[(participation, "inf", None)] if "private" in traits else participation
                cells += _cells(config, dataset, method, setting, row_name(method), col)
            cells += _random_cells(config, dataset, col)
    return cells


def dp_table_cells(config: dict, name: str) -> list[dict]:
    """Tables 3-5: FedAvg+SC, FedSC at each eps of the table (at its delta) and at eps = inf."""
    section = config[PAPER]
    table = section["tables"][name]
    cells = []
    for participation in table.get("participation", list(PARTICIPATIONS)):
        for dataset in table["datasets"]:
            ds = section["datasets"][dataset]
            col = column(dataset, ds, participation)
            settings = fedsc_settings(ds)
            cells += _cells(config, dataset, NO_SHARING, participation, short_name(NO_SHARING), col)
            for eps in [*table["eps"], "inf"]:
                delta = None if eps == "inf" else table["delta"]
                key = (participation, eps, delta)
                if key not in settings:
                    raise ValueError(
                        f"fedsc.tables.{name}: no privacy level eps={eps} delta={delta} for "
                        f"{participation} participation on {dataset}; add it to "
                        f"fedsc.datasets.{dataset}.privacy"
                    )
                row = f"ε={number_tag(eps).replace('inf', '∞')}"
                cells += [
                    {**c, "private": eps != "inf"} for c in _cells(config, dataset, PROPOSED, settings[key], row, col)
                ]
            cells += _random_cells(config, dataset, col)
    return cells


def claim_cells(claims_list: list[dict]) -> list[dict]:
    """Every cell of both sides of every claim."""
    return [c for claim in claims_list for side in ("a", "b") for c in claim[side]]


def meta_files(results: str, datasets: list[str]) -> list[str]:
    """The prepared data sets' meta.json: their test-set sizes (one test image is a claim's resolution)."""
    return [f"{results}/data/{d}/meta.json" for d in datasets]


def summary_inputs(cells: list[dict]) -> list[str]:
    """The pretraining summaries beside a table's probe files (run health; realised epsilon)."""
    return sorted(
        {c["path"].removesuffix("probe.json") + "summary.json" for c in cells if "/random_encoder/" not in c["path"]}
    )


# The kinds of claim; each has its smallest effect that matters, the paper's smallest reported difference of
# that kind (fedrepro.report.fedsc.smallest_effect reads it from the published tables).
PROPOSED_VS_NO_SHARING, PRIVATE_VS_NO_SHARING, VS_UNTRAINED = (
    "proposed_vs_fedavg_sc",
    "private_vs_fedavg_sc",
    "vs_untrained",
)


def claims(config: dict, private_vs_untrained: bool = False) -> list[dict]:
    """The paper's orderings, per table and column: FedSC (eps = inf) beats FedAvg+SC and every trained
    method beats the untrained encoder (Table 2); FedSC at each private level beats FedAvg+SC (Tables 3-5)
    and, with `private_vs_untrained`, the untrained encoder. Each claim carries its `kind`, the `dataset`
    and `comparison` (the run sets on both sides): a comparison two tables share is listed by each, and the
    claims table prints it once (`fedrepro.report.claims.distinct`). The claims `more_seeds` names get its
    extra seeds on both sides."""
    section = config[PAPER]
    out = []
    for name in [t for t in ("table2", "table3", "table4", "table5") if t in section["tables"]]:
        by_key: dict = {}
        for cell in table2_cells(config) if name == "table2" else dp_table_cells(config, name):
            paths = by_key.setdefault((cell["row"], cell["column"]), {})
            paths.setdefault(cell["path"], cell)
        for column in dict.fromkeys(c for _, c in by_key):
            out += _table_claims(section, name, by_key, column, private_vs_untrained)
    return _with_more_seeds(config, out)


def _table_claims(section: dict, name: str, by_key: dict, column: str, private_vs_untrained: bool) -> list[dict]:
    """The claims of table `name` in one column."""
    fedsc, fedavg_sc = short_name(PROPOSED), short_name(NO_SHARING)
    if name == "table2":
        wanted = [
            (row_name(PROPOSED), row_name(NO_SHARING), f"{fedsc} (ε=∞) > {fedavg_sc} (Table 2)", PROPOSED_VS_NO_SHARING)
        ]
        wanted += [
            (row_name(m), RANDOM_ROW, f"{row_name(m)} > untrained encoder (Table 2)", VS_UNTRAINED)
            for m in METHODS
            if m in section["methods"]
        ]
    else:
        delta, number = section["tables"][name]["delta"], name[-1]
        wanted = []
        for row in [r for r, c in by_key if c == column and r.startswith("ε=") and r != "ε=∞"]:
            level = f"{fedsc} ({row}, δ={delta:g})"
            wanted.append((row, fedavg_sc, f"{level} > {fedavg_sc} (Table {number})", PRIVATE_VS_NO_SHARING))
            if private_vs_untrained:
                wanted.append((row, RANDOM_ROW, f"{level} > untrained encoder (Table {number})", VS_UNTRAINED))
    return [c for c in (_claim(by_key, a, b, column, text, kind) for a, b, text, kind in wanted) if c is not None]


def _claim(by_key: dict, a_row: str, b_row: str, column: str, claim: str, kind: str) -> dict | None:
    """'a_row beats b_row in column' when both rows have cells there."""
    if (a_row, column) not in by_key or (b_row, column) not in by_key:
        return None
    a, b = list(by_key[(a_row, column)].values()), list(by_key[(b_row, column)].values())
    return {
        "claim": claim,
        "column": column,
        "dataset": a[0]["dataset"],
        "participation": a[0]["participation"],
        "kind": kind,
        "a_name": a_row,
        "b_name": b_row,
        "a": a,
        "b": b,
        "comparison": [sorted(c["path"] for c in a), sorted(c["path"] for c in b)],
    }


def _with_more_seeds(config: dict, claims_list: list[dict]) -> list[dict]:
    """Claims named by `more_seeds.claims` get the cells of their extra seeds on both sides (paired), and
    `more_seeds` lists those seeds; the probe tables keep the section's seeds. A claim's extra seeds are its
    entry's `seeds`, else `more_seeds.seeds`, in jobs of `more_seeds.seeds_per_job` (default: one job)."""
    more = config[PAPER].get("more_seeds") or {}
    seeds_of = {_selector(c): list(c.get("seeds", more.get("seeds", []))) for c in more.get("claims", [])}
    out = []
    for claim in claims_list:
        seeds = seeds_of.get(_selector(claim))
        if seeds:
            tags = [seed_tag(b) for b in seed_batches(seeds, more.get("seeds_per_job", len(seeds)))]
            extra = {side: [_reseeded(c, t) for c in _one_per_run(claim[side]) for t in tags] for side in "ab"}
            claim = {**claim, "a": claim["a"] + extra["a"], "b": claim["b"] + extra["b"], "more_seeds": seeds}
        out.append(claim)
    return out


def _one_per_run(cells: list[dict]) -> list[dict]:
    """One cell per run folder (the section's seed batches of one run give one cell each)."""
    return list({c["path"].rsplit("/", 2)[0]: c for c in cells}.values())


def _reseeded(cell: dict, tag: str) -> dict:
    """`cell` for the seed batch `tag`: the same run's folder, another `{seeds}`."""
    folder, _, filename = cell["path"].rsplit("/", 2)
    return {**cell, "path": f"{folder}/{tag}/{filename}"}


def _selector(claim: dict) -> tuple[str, str, str]:
    """How `more_seeds.claims` names a claim: its text, data set and participation (not the column label,
    which changes with the number of clients)."""
    return (claim["claim"], claim["dataset"], claim["participation"])


def more_seeds_errors(config: dict, private_vs_untrained: bool = False) -> list[str]:
    """Every claim `more_seeds.claims` names is one of the claims table's, and its seeds are not the section's."""
    section = config[PAPER]
    more = section.get("more_seeds") or {}
    if not more:
        return []
    known = {_selector(c) for c in claims(config, private_vs_untrained)}
    errors = [
        f"{PAPER}.more_seeds.claims: no claim {c['claim']!r} on {c['dataset']} at {c['participation']} "
        "participation; allowed there: "
        + "; ".join(sorted(repr(k[0]) for k in known if k[1:] == (c["dataset"], c["participation"])))
        for c in more.get("claims", [])
        if _selector(c) not in known
    ]
    for where, seeds in [("seeds", more.get("seeds", []))] + [
        (f"claims[{i}].seeds", c["seeds"]) for i, c in enumerate(more.get("claims", [])) if "seeds" in c
    ]:
        shared = sorted(set(seeds) & set(section["seeds"]))
        if shared:
            errors.append(f"{PAPER}.more_seeds.{where}: {shared} already in fedsc.seeds; list only extra seeds")
    return errors


def figure2_cells(config: dict) -> list[dict]:
    """kNN curves of FedSC (eps = inf) and FedAvg+SC, full participation."""
    section = config[PAPER]
    cells = []
    for dataset in section["tables"]["figure2"]["datasets"]:
        ds = section["datasets"][dataset]
        panel = DATASET_NAMES.get(dataset, dataset)
        cells += _cells(
            config,
            dataset,
            PROPOSED,
            fedsc_settings(ds)[("full", "inf", None)],
            short_name(PROPOSED),
            panel,
            "metrics.parquet",
        )
        cells += _cells(config, dataset, NO_SHARING, "full", short_name(NO_SHARING), panel, "metrics.parquet")
    return cells


def privacy_cells(config: dict) -> list[dict]:
    """Summaries of every private FedSC run (realised T_j and epsilons)."""
    section = config[PAPER]
    cells = []
    for dataset in enabled_datasets(section):
        ds = section["datasets"][dataset]
        for tag in sorted(set(fedsc_settings(ds).values())):
            if not tag.endswith("epsinf"):
                cells += _cells(config, dataset, PROPOSED, tag, tag, dataset, "summary.json")
    return cells


# ----------------------------------------------------------------------------- the offline stand-ins

STANDIN_TABLE = "table3"  # its probe table: FedAvg+SC, FedSC at each eps and at eps = inf, the untrained encoder


def standin_datasets(config: dict) -> list[str]:
    """The generated data sets of target fedsc_standin (none without `standin`)."""
    standin = config[PAPER].get("standin")
    return list(standin["datasets"]) if standin else []


def standin_config(config: dict) -> dict | None:
    """The config that plans the stand-ins' runs, probe table and claims (target `fedsc_standin`): the
    fedsc section restricted to `standin`'s data sets, seeds, rounds, local epochs (Centralized SC's too) and
    methods, with
    Table 2 and Table 3 (at `standin.eps`, `standin.delta`) on each data set, and `standin.more_seeds` in
    place of the default run's `more_seeds`. None without `standin`."""
    section = config[PAPER]
    standin = section.get("standin")
    if not standin:
        return None
    names = standin_datasets(config)
    stand = {
        **section,
        "more_seeds": standin.get("more_seeds"),
        "seeds": standin["seeds"],
        "seeds_per_job": standin["seeds_per_job"],
        "run_datasets": names,
        "rounds": standin["rounds"],
        "train": {**section["train"], "local_epochs": standin["local_epochs"]},
        "centralized": {"rounds": standin["rounds"], "local_epochs": standin["local_epochs"]},  # as the federated runs
        "methods": {m: section["methods"][m] for m in standin["methods"]},
        "tables": {
            "table2": {"datasets": names},
            STANDIN_TABLE: {"datasets": names, "delta": standin["delta"], "eps": standin["eps"]},
        },
    }
    return {**config, PAPER: stand}


def standin_budget(config: dict) -> str:
    """The stand-in runs' budget, for their tables' captions: every method the same rounds, local epochs,
    batch, learning rate and gradient clip; Centralized SC as many epochs over all images."""
    section, standin = config[PAPER], config[PAPER]["standin"]
    batches = sorted({section["datasets"][d]["batch_size"] for d in standin["datasets"]})
    learning = {(section["methods"][m]["lr"], section["methods"][m]["grad_clip"]) for m in standin["methods"]}
    (lr, clip), *rest = sorted(learning)
    same = "" if not rest else " (per method: fedsc.methods)"
    return (
        f"Budget: every federated method {standin['rounds']} rounds x {standin['local_epochs']} local epochs, "
        f"batch {'/'.join(map(str, batches))}, SGD lr {lr:g} (cosine), gradient clip {clip:g}{same}; Centralized "
        f"SC {standin['rounds']} x {standin['local_epochs']} epochs over every image, one client"
    )


def standin_table_cells(config: dict) -> list[dict]:
    """The stand-ins' probe table: Table 3's rows (FedAvg+SC, FedSC at each eps and at eps = inf, the untrained
    encoder) and Table 2's Centralized SC (that self-supervision beats the untrained encoder there)."""
    stand = standin_config(config)
    if not stand:
        return []
    central = [c for c in table2_cells(stand) if c["row"] == row_name("centralized_sc")]
    return dp_table_cells(stand, STANDIN_TABLE) + central


def standin_runs(config: dict) -> list[Run]:
    stand = standin_config(config)
    return runs(stand) + ablation_runs(config) if stand else []


def standin_claims(config: dict) -> list[dict]:
    """Tables 2 and 3 on each stand-in: FedSC (eps = inf) and FedSC at each private level against FedAvg+SC
    and against the untrained encoder; FedAvg+SC against the untrained encoder."""
    stand = standin_config(config)
    return claims(stand, private_vs_untrained=True) if stand else []


# ----------------------------------------------------------------------------- ablations (target fedsc_ablations)


def _merged(spec: dict, change: dict) -> dict:
    """`spec` with `change` merged in, one level deep for dict values (`dpcalr: {passes: 1}` keeps the views)."""
    out = dict(spec)
    for key, value in change.items():
        out[key] = {**out[key], **value} if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _ablation_base(ds: dict, variant: dict) -> str:
    """The setting of the stand-in's full-participation FedSC run at the variant's eps (and delta)."""
    eps = variant["eps"]
    return fedsc_settings(ds)[("full", eps, None if eps == "inf" else variant["delta"])]


def _variants(config: dict) -> dict:
    return (config[PAPER].get("standin") or {}).get("ablations") or {}


def ablation_runs(config: dict) -> list[Run]:
    """One FedSC run per stand-in and `standin.ablations` variant: the full-participation FedSC run at the
    variant's eps with `change` merged into its spec, setting '<base setting>_<variant>'."""
    stand = standin_config(config)
    planned = index(runs(stand)) if _variants(config) else {}
    out = []
    for dataset in standin_datasets(config):
        for name, variant in _variants(config).items():
            base = planned[(dataset, PROPOSED, _ablation_base(stand[PAPER]["datasets"][dataset], variant))]
            out.append(
                Run(dataset, PROPOSED, f"{base.setting}_{name}", _merged(base.spec, variant["change"]), base.partition)
            )
    return out


def ablation_cells(config: dict) -> list[dict]:
    """The ablation table's probe files: per stand-in, FedAvg+SC (full participation), every FedSC run an
    ablation starts from, and each variant (`against`: the row of its base run)."""
    section, variants = config[PAPER], _variants(config)
    stand = standin_config(config)
    cells = []
    for dataset in standin_datasets(config):
        ds = section["datasets"][dataset]
        col = column(dataset, ds, "full")
        cells += _cells(stand, dataset, NO_SHARING, "full", short_name(NO_SHARING), col)
        bases = set()
        for name, variant in variants.items():
            setting = _ablation_base(ds, variant)
            label = f"{short_name(PROPOSED)} ε={number_tag(variant['eps']).replace('inf', '∞')}"
            if setting not in bases:
                bases.add(setting)
                cells += _cells(stand, dataset, PROPOSED, setting, label, col)
            cells += [
                {**c, "against": label, "variant": name, "change": variant["change"]}
                for c in _cells(stand, dataset, PROPOSED, f"{setting}_{name}", f"{label}, {name}", col)
            ]
    return _ablation_more_seeds(config, cells)


def _ablation_more_seeds(config: dict, cells: list[dict]) -> list[dict]:
    """The variants `standin.ablations_more_seeds` names get its seed batch, and so do the rows they are paired
    with (the run they change and FedAvg+SC on that stand-in); the other rows keep the stand-in's seeds."""
    more = (config[PAPER].get("standin") or {}).get("ablations_more_seeds") or {}
    wanted = {(v["dataset"], v["variant"]) for v in more.get("variants", [])}
    if not wanted:
        return cells
    tag = seed_tag(list(more["seeds"]))
    rows = set()
    for c in cells:
        if (c["dataset"], c.get("variant")) in wanted:
            rows |= {(c["dataset"], c["row"]), (c["dataset"], c["against"]), (c["dataset"], short_name(NO_SHARING))}
    extra = [_reseeded(c, tag) for c in _one_per_run(cells) if (c["dataset"], c["row"]) in rows]
    return cells + extra


def ablations_more_seeds_errors(config: dict) -> list[str]:
    """Every variant `standin.ablations_more_seeds` names is an ablation on a stand-in, at seeds not the stand-in's."""
    standin = config[PAPER]["standin"]
    more = standin.get("ablations_more_seeds") or {}
    where = f"{PAPER}.standin.ablations_more_seeds"
    allowed = [f"{d}/{v}" for d in standin["datasets"] for v in standin.get("ablations") or {}]
    errors = [
        f"{where}.variants: no ablation {v['variant']!r} on {v['dataset']!r}; allowed: {', '.join(allowed)}"
        for v in more.get("variants", [])
        if f"{v['dataset']}/{v['variant']}" not in allowed
    ]
    shared = sorted(set(more.get("seeds", [])) & set(standin["seeds"]))
    if shared:
        errors.append(f"{where}.seeds: {shared} already in fedsc.standin.seeds; list only extra seeds")
    return errors


def standin_errors(config: dict) -> list[str]:
    section = config[PAPER]
    standin = section.get("standin")
    if not standin:
        return []
    where = f"{PAPER}.standin"
    errors = []
    for name in standin["datasets"]:
        if name not in section["datasets"]:
            errors.append(f"{where}.datasets: {name!r} has no entry in fedsc.datasets")
        elif name in section["run_datasets"]:
            errors.append(f"{where}.datasets: {name!r} is also in fedsc.run_datasets; its runs would be planned twice")
    errors += [
        f"{where}.collapse_counted: {name!r} is not a stand-in; allowed: {', '.join(standin['datasets'])}"
        for name in standin.get("collapse_counted", [])
        if name not in standin["datasets"]
    ]
    if errors:
        return errors
    from fedrepro.experiments.fit import dataset_size_errors

    errors = [
        f"{where}.methods: {m!r} has no block in fedsc.methods ({', '.join(section['methods'])})"
        for m in standin["methods"]
        if m not in section["methods"]
    ]
    compared = [m for m in (PROPOSED, NO_SHARING) if m not in standin["methods"]]
    if compared:  # the stand-in's table and claims are Table 3's: FedSC against FedAvg+SC
        errors.append(
            f"{where}.methods: {standin['methods']} lacks {compared}; the stand-in compares FedSC with FedAvg+SC "
            f"(Table 3), so it must list fedsc and fedavg_sc; allowed values: {', '.join(section['methods'])}"
        )
    for name in standin["datasets"]:
        errors += dataset_size_errors(f"{PAPER}.datasets.{name}.clients", name, section["datasets"][name]["clients"])
    if errors:
        return errors
    try:
        dp_table_cells(standin_config(config), STANDIN_TABLE)
    except ValueError as err:
        errors.append(f"{where}: {err}")
    if errors:
        return errors
    errors = [
        e.replace(f"{PAPER}.more_seeds", f"{where}.more_seeds")
        for e in more_seeds_errors(standin_config(config), private_vs_untrained=True)
    ]
    return errors or ablation_errors(config) or ablations_more_seeds_errors(config)


def ablation_errors(config: dict) -> list[str]:
    """Each ablation starts from a FedSC run the stand-in plans (full participation, its eps and delta)."""
    errors = []
    standin = config[PAPER]["standin"]
    for name, variant in (standin.get("ablations") or {}).items():
        for dataset in standin["datasets"]:
            ds = config[PAPER]["datasets"][dataset]
            key = ("full", variant["eps"], None if variant["eps"] == "inf" else variant.get("delta"))
            if key not in fedsc_settings(ds):
                errors.append(
                    f"{PAPER}.standin.ablations.{name}: no full-participation privacy level eps={key[1]} "
                    f"delta={key[2]} on {dataset}; allowed: eps inf or a level of fedsc.datasets.{dataset}.privacy"
                )
    return errors


def check(config: dict) -> list[str]:
    """Errors a schema cannot express."""
    from fedrepro.experiments.fit import dataset_size_errors

    section = config[PAPER]
    errors = [
        f"{PAPER}.run_datasets: {d!r} has no entry in fedsc.datasets"
        for d in section["run_datasets"]
        if d not in section["datasets"]
    ]
    if errors:
        return errors
    for dataset in enabled_datasets(section):
        ds = section["datasets"][dataset]
        errors += dataset_size_errors(f"{PAPER}.datasets.{dataset}.clients", dataset, ds["clients"])
        for level in ds.get("privacy", []):
            if level.get("eps") == "inf":
                errors.append(f"{PAPER}.datasets.{dataset}.privacy: eps 'inf' always runs; list only finite levels")
    for name in section["tables"]:
        for dataset in section["tables"][name].get("datasets", []):
            if dataset not in section["run_datasets"]:
                errors.append(
                    f"{PAPER}.tables.{name}.datasets: {dataset!r} is not one of fedsc.run_datasets "
                    f"({', '.join(section['run_datasets'])})"
                )
    if errors:
        return errors
    for name in ("table3", "table4", "table5"):
        try:
            dp_table_cells(config, name)
        except ValueError as err:
            errors.append(str(err))
    errors += standin_errors(config)
    return errors or more_seeds_errors(config)  # more_seeds names claims of valid tables


def count_errors(config: dict) -> list[str]:
    """FedSC samples max(int(p J), 2) clients a round (the authors' rule, which gives Table 2's 2/5 from
    p = 0.2), and its noise and column label follow that count. A `partial` p asking for less than one
    client a round (0.01 of 10) is an error: it would run what p = 2/J runs."""
    from fedrepro.data.sizes import dataset_options, num_classes

    section, errors = config[PAPER], []
    for dataset in dict.fromkeys([*section["run_datasets"], *standin_datasets(config)]):
        ds = section["datasets"].get(dataset, {})
        p, clients = ds.get("partial"), int(ds.get("clients", 0))
        if num_classes(dataset, dataset_options(config, dataset)) % clients:
            continue  # clients that cannot split the classes: the fit check names `clients`, the key at fault
        if p is not None and p * clients < 1:
            runs = clients_per_round(clients, float(p))
            errors.append(
                f"config key 'fedsc.datasets.{dataset}.partial': {p} of {clients} clients is {p * clients:g} "
                f"clients a round; FedSC would run max(int(p J), 2) = {runs}, as p = {runs / clients:g} does; "
                f"allowed: {1 / clients:g} <= p < 1 (at least one client a round)"
            )
    return errors
