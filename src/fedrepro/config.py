"""Config validation: fail before any job runs, with a message that names the key.

The schema is `workflow/schemas/config.schema.yaml` (top level) plus one
`workflow/schemas/<paper>.schema.yaml` per paper section. Checks that a JSON
schema cannot express (more clients than samples, ...) come from the papers'
planners: `fedrepro.experiments.<paper>.check(config) -> list[str]`.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import jsonschema
import yaml

PAPER_SECTIONS = ("fedavg", "fedsc", "dpzv", "fedal", "steffle")


class ConfigError(ValueError):
    """A config that must not start a run; the message names every offending key."""


def load_schema(schema_dir: str | Path, papers: list[str]) -> dict:
    """The top-level schema with the section schemas of `papers` plugged in (and required)."""
    schema_dir = Path(schema_dir)
    from fedrepro.data.catalog import DATASETS

    schema = yaml.safe_load((schema_dir / "config.schema.yaml").read_text())
    schema["$defs"]["dataset"]["enum"] = sorted(DATASETS)
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


def schema_errors(config: dict, schema: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    return [f"config key '{key_path(e)}': {e.message}{_allowed(e)}" for e in errors]


def _allowed(error: jsonschema.ValidationError) -> str:
    """For 'not valid under any of the given schemas', say what is valid."""
    description = error.schema.get("description") if isinstance(error.schema, dict) else None
    return f" (allowed: {description})" if error.validator in ("oneOf", "anyOf") and description else ""


def dataset_option_errors(config: dict) -> list[str]:
    """Preparation options are checked here too, so a typo fails before any job runs."""
    from fedrepro.data.prepare import resolve_options

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


def enabled_papers(config: dict) -> list[str]:
    papers = config.get("papers", [])
    unknown = [p for p in papers if p not in PAPER_SECTIONS]
    if unknown:
        raise ConfigError(f"config key 'papers': unknown paper(s) {unknown}; allowed values: {list(PAPER_SECTIONS)}")
    return list(papers)


def check_config(config: dict, schema_dir: str | Path) -> None:
    """Raise ConfigError listing every problem; return silently for a good config."""
    papers = enabled_papers(config)
    sections = sorted(set(papers) | {p for p in PAPER_SECTIONS if p in config})
    errors = schema_errors(config, load_schema(schema_dir, sections))
    if not errors:
        errors = dataset_option_errors(config) + planner_errors(config, papers)
    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(errors))


def dataset_size_errors(key: str, dataset: str, clients: int) -> list[str]:
    """'more clients than samples' for one partition setting."""
    from fedrepro.data.catalog import DATASETS

    n_train = DATASETS[dataset].n_train
    if clients > n_train:
        return [f"config key '{key}': {clients} clients but data set {dataset!r} has only {n_train} training samples"]
    return []
