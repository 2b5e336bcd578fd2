"""One registry of every federated method the pipeline can run.

Each paper is a subpackage whose `__init__` holds its method table, `METHODS`: method name ->
`Method` (the "module:function" that runs one job of it, its label in tables and figures, its
traits and the keys of its config block), in the order the paper's tables list them. The
planner, the report and the jobs read the table; none repeats it. The subpackage `__init__`
imports nothing heavy, so looking a method up stays cheap. Adding a method is its module, one
line in its paper's table, its config block and its schema entry (README, "Add a method").
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from fedrepro.registry import lookup

PAPERS: dict[str, str] = {
    "fedavg": "fedrepro.algorithms.fedavg",
    "fedsc": "fedrepro.algorithms.fedsc",
    "dpzv": "fedrepro.algorithms.dpzv",
    "fedal": "fedrepro.algorithms.fedal",
    "steffle": "fedrepro.algorithms.steffle",
}


@dataclass(frozen=True)
class Method:
    """One row of a paper's method table."""

    entry: str  # "module:function" that runs one job (takes a pipeline Job)
    label: str  # the method's name in the paper's tables and figures
    traits: frozenset[str] = frozenset()  # paper-specific flags the planner and report select on
    config_keys: tuple[str, ...] = ()  # keys its config block may hold (tests check the config)


def method_table(paper: str) -> dict[str, Method]:
    """The method table of one paper, in report order."""
    if paper not in PAPERS:
        raise KeyError(f"unknown paper {paper!r}; allowed values: {', '.join(sorted(PAPERS))}")
    return importlib.import_module(PAPERS[paper]).METHODS


def methods(paper: str) -> dict[str, str]:
    """Method name -> the "module:function" that runs one job of it."""
    return {name: row.entry for name, row in method_table(paper).items()}


def method_entry(paper: str, method: str):
    """The function that runs one job of `method` from `paper`."""
    return lookup(methods(paper), method, f"{paper} method")
