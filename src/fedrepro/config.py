"""Config validation: fail before any job runs, with a message that names the key.

The schema is `workflow/schemas/config.schema.yaml` (top level) plus one
`workflow/schemas/<paper>.schema.yaml` per paper section. Checks that a JSON
schema cannot express (more clients than samples, ...) come from the papers'
planners: `fedrepro.experiments.<paper>.check(config) -> list[str]`.
"""

from __future__ import annotations

import importlib
import math
import re
import sys
from pathlib import Path

import jsonschema
import yaml

from fedrepro.algorithms import PAPERS
from fedrepro.pipeline import number_tag

PAPER_SECTIONS = tuple(PAPERS)  # the paper keys: config sections, `papers:` values, method tables


class ConfigError(ValueError):
    """A config that must not start a run; the message names every offending key."""


def load_schema(schema_dir: str | Path, papers: list[str]) -> dict:
    """The top-level schema with the section schemas of `papers` plugged in (and required)."""
    schema_dir = Path(schema_dir)
    from fedrepro.data.catalog import DATASETS

    schema = yaml.safe_load((schema_dir / "config.schema.yaml").read_text())
    schema["$defs"]["dataset"]["enum"] = sorted(DATASETS)
    schema["properties"]["papers"]["items"]["enum"] = list(PAPER_SECTIONS)
    for paper in papers:
        schema["properties"][paper] = yaml.safe_load((schema_dir / f"{paper}.schema.yaml").read_text())
        schema.setdefault("required", []).append(paper)
    return schema


def key_path(error: jsonschema.ValidationError) -> str:
    """'fedavg.partition.alphas[0]' for the error's location in the config."""
    text = ""
    for part in error.absolute_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<top level>"


def _strict_integer(checker, value) -> bool:
    """An integer is an int (not 30.0, not True): JSON Schema would accept 30.0 and a job
    would then fail with a TypeError."""
    return isinstance(value, int) and not isinstance(value, bool)


Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)


def schema_errors(config: dict, schema: dict) -> list[str]:
    validator = Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    return [f"config key '{key_path(e)}': {_message(e)}{_allowed(e)}" for e in errors]


def _message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message, but for a value a `not` rule excludes, which it words as the rule itself."""
    return f"{error.instance!r} is not allowed" if error.validator == "not" else error.message


def _allowed(error: jsonschema.ValidationError) -> str:
    """For 'not valid under any of the given schemas' (or 'should not be valid under'), say what is valid."""
    description = error.schema.get("description") if isinstance(error.schema, dict) else None
    return f" (allowed: {description})" if error.validator in ("oneOf", "anyOf", "not") and description else ""


# Checks of every value, whatever its schema (the per-paper schemas leave some open).
GRID_KEY = re.compile(
    r"^(papers|seeds|alphas|lambdas|epsilons|eps|eps_grid|clips|methods|datasets|run_datasets|h|num_silos"
    r"|\w+_grid|grid)$"
)  # lists that define a grid of runs: no value twice
ITERATION_KEY = re.compile(r"^(\w+_)?(rounds|epochs|steps|iters|iterations)$")  # how long a job runs
SIZE_KEY = re.compile(r"^(n_\w+|num_\w+|\w+_size|seeds_per_job|variants_per_job|views|channels|length|chunks)$")
PRIVACY_KEY = re.compile(r"(^|[._])eps")  # epsilon keys, where inf means "no privacy"
MAX_ITERATIONS = 10**6
MAX_INTEGER = 2**32


def _number_text(value) -> str:
    return {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan" if value != value else repr(value))


def value_errors(value, key: str = "") -> list[str]:
    """Non-finite numbers, non-integer or absurd counts and sizes, grids with a value twice,
    anywhere in the config (`key` is the location so far)."""
    name = key.rsplit(".", 1)[-1].split("[")[0]
    here = f"config key '{key or '<top level>'}'"
    errors = []
    if isinstance(value, dict):
        for child, item in value.items():
            errors += value_errors(item, f"{key}.{child}" if key else str(child))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            errors += value_errors(item, f"{key}[{i}]")
        if GRID_KEY.match(name) and all(isinstance(v, (str, int, float)) for v in value):
            seen, twice = set(), []
            for v in value:
                # numbers compare by the folder name their runs get: 1 and 1.0000001 would share one
                canonical = number_tag(v) if isinstance(v, (int, float)) or v == "inf" else v
                if canonical in seen:
                    twice.append(v)
                seen.add(canonical)
            if twice:
                errors.append(
                    f"{here}: {twice} given twice (values equal to 6 significant digits share one results"
                    " folder); a grid lists each value once"
                )
    elif isinstance(value, float) and not math.isfinite(value) and not (value == math.inf and PRIVACY_KEY.search(key)):
        errors.append(
            f"{here}: {_number_text(value)} is not a finite number"
            " (only a privacy budget epsilon may be inf: no privacy)"
        )
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        counted = ITERATION_KEY.match(name) or SIZE_KEY.match(name)
        if counted and not float(value).is_integer():
            errors.append(f"{here}: {value!r} is not a whole number")
        elif counted and isinstance(value, float):
            errors.append(f"{here}: write {int(value)}, not {value!r} (a count is an integer)")
        elif SIZE_KEY.match(name) and value < 1:
            errors.append(f"{here}: {value} must be at least 1")
        elif ITERATION_KEY.match(name) and value > MAX_ITERATIONS:
            errors.append(f"{here}: {value} is beyond any run this pipeline makes (at most {MAX_ITERATIONS})")
        elif isinstance(value, int) and abs(value) > MAX_INTEGER:
            errors.append(f"{here}: {value} is out of range (at most {MAX_INTEGER} in size)")
    return errors


def dataset_option_errors(config: dict) -> list[str]:
    """Preparation options are checked here too, so a typo fails before any job runs."""
    from fedrepro.data.prepared import resolve_options

    errors = []
    for dataset, options in config.get("datasets", {}).items():
        try:
            resolve_options(dataset, options)
        except (KeyError, ValueError) as error:
            errors.append(f"config key 'datasets.{dataset}': {error}")
    return errors


def planner_errors(config: dict, papers: list[str]) -> list[str]:
    errors = []
    for paper in papers:
        planner = importlib.import_module(f"fedrepro.experiments.{paper}")
        if hasattr(planner, "check"):
            errors += planner.check(config)
    return errors


def audit_errors(config: dict) -> list[str]:
    """The audit block's cross-field errors (fedrepro.audit.dpzv.check), where the config has one."""
    if "audit" not in config:
        return []
    from fedrepro.audit.dpzv import check

    return check(config)


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error
    (PyYAML keeps the last one silently)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(
                f"{node.start_mark.name}, line {key_node.start_mark.line + 1}: key {key!r} "
                f"given twice in one mapping (first on line {seen[key]})"
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load_yaml(path: str | Path):
    """Load a config file; malformed YAML or a key given twice names the file and line."""
    path = Path(path)
    try:
        with open(path) as stream:
            return yaml.load(stream, Loader=_StrictLoader)  # a SafeLoader: builds no Python objects
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: malformed YAML: {error.problem or error.context}") from None


def check_config_files(paths) -> None:
    """Read every config file strictly (load_yaml) before Snakemake merges them."""
    for path in paths:
        if Path(path).exists():
            load_yaml(path)


NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _coerce(value):
    """A `--config` value as YAML reads it: Snakemake keeps 'true' and nested numbers as strings."""
    if isinstance(value, dict):
        return {key: _coerce(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_coerce(item) for item in value]
    if isinstance(value, str):
        if NUMBER.fullmatch(value):
            return int(value) if re.fullmatch(r"[-+]?\d+", value) else float(value)
        parsed = yaml.safe_load(value) if value else value
        if parsed is None or isinstance(parsed, (bool, int, float)):
            return parsed
    return value


def coerce_overrides(config: dict, overrides) -> None:
    """Give the values of `--config key=value` their YAML types in `config` (in place), so that
    `--config channels_last=true` or `'fedavg={seeds: [0, 1]}'` mean what they would in a file."""
    for key, value in dict(overrides or {}).items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            coerce_overrides(config[key], value)
        elif key in config:
            config[key] = _coerce(config[key])


def enabled_papers(config: dict) -> list[str]:
    papers = config.get("papers", [])
    unknown = [p for p in papers if p not in PAPER_SECTIONS]
    if unknown:
        raise ConfigError(f"config key 'papers': unknown paper(s) {unknown}; allowed values: {list(PAPER_SECTIONS)}")
    return list(papers)


def check_config(config: dict, schema_dir: str | Path, fit_cache: str | Path | None = None) -> None:
    """Raise ConfigError listing every problem; return silently for a good config. `fit_cache`:
    where the model/data fit check (fedrepro.experiments.fit) keeps its model runs."""
    papers = enabled_papers(config)
    sections = sorted(set(papers) | {p for p in PAPER_SECTIONS if p in config})
    errors = value_errors(config) + schema_errors(config, load_schema(schema_dir, sections))
    if not errors:
        errors = dataset_option_errors(config) + planner_errors(config, papers) + audit_errors(config)
    if not errors:
        errors = data_count_errors(config, papers) + duplicate_run_errors(config, papers)
    if not errors:
        from fedrepro.experiments.fit import fit_errors

        errors = fit_errors(config, papers, fit_cache)
    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(errors))


def data_count_errors(config: dict, papers: list[str]) -> list[str]:
    """Counts the data must hold, checked here so that a partition or report job does not fail
    after the dry run passed: each planner's `count_errors(config)` (FedAL's clients, public samples
    and Figure 2's class, SteFFLe's silos, FedSC's clients per round under partial participation),
    run once the config's other checks passed."""
    errors = []
    for paper in papers:
        planner = importlib.import_module(f"fedrepro.experiments.{paper}")
        if hasattr(planner, "count_errors"):
            errors += planner.count_errors(config)
    return errors


def duplicate_run_errors(config: dict, papers: list[str]) -> list[str]:
    """Two experiments of one paper that plan the same run (one results folder) with different
    settings; the planners that name experiments expose `experiment_runs(config, name)`."""
    errors = []
    for paper in papers:
        planner = importlib.import_module(f"fedrepro.experiments.{paper}")
        if not hasattr(planner, "experiment_runs"):
            continue
        first: dict[tuple, tuple[str, dict]] = {}
        for name in config[paper]["experiments"]:
            for run in planner.experiment_runs(config, name):
                other, spec = first.setdefault(run.key, (name, run.spec))
                if spec != run.spec:
                    differ = sorted(k for k in {*spec, *run.spec} if spec.get(k) != run.spec.get(k))
                    errors.append(
                        f"config keys '{paper}.experiments.{other}' and '{paper}.experiments.{name}': both plan "
                        f"the run {'/'.join(run.key)} (one results folder) with different {differ}; give both "
                        "the same values, or plan another pool, alpha, clients, public or iterations"
                    )
    return list(dict.fromkeys(errors))


def merge_configs(base: dict, override: dict) -> dict:
    """`override` merged into `base` key by key, as Snakemake merges a second config file."""
    merged = dict(base)
    for key, value in override.items():
        both_maps = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = merge_configs(merged[key], value) if both_maps else value
    return merged


def main(argv: list[str]) -> int:
    """`python -m fedrepro.config config.yaml configs/paper.yaml`: the files Snakemake would merge,
    read strictly (a malformed file or a key given twice names the file and line; Snakemake's own
    reader of `--configfile` names neither) and validated as the Snakefile validates them."""
    schema_dir = Path(__file__).resolve().parents[2] / "workflow" / "schemas"
    try:
        config: dict = {}
        for path in argv or ["config.yaml"]:
            config = merge_configs(config, load_yaml(path) or {})
        check_config(config, schema_dir)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"{', '.join(argv or ['config.yaml'])}: valid")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
