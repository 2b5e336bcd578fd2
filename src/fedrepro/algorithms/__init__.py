"""One registry of every federated method the pipeline can run.

Each paper is a subpackage whose `__init__` holds a `METHODS` dict mapping a
method name to the "module:function" that runs one job of it (the function
takes a `fedrepro.pipeline.Job`). The subpackage `__init__` imports nothing
heavy, so looking a method up stays cheap. Adding a method is one module and
one line in its paper's `METHODS`.
"""

from __future__ import annotations

import importlib

from fedrepro.registry import lookup

PAPERS: dict[str, str] = {
    "fedavg": "fedrepro.algorithms.baselines",
    "fedsc": "fedrepro.algorithms.fedsc",
    "dpzv": "fedrepro.algorithms.dpzv",
    "fedal": "fedrepro.algorithms.fedal",
    "steffle": "fedrepro.algorithms.steffle",
}


def methods(paper: str) -> dict[str, str]:
    """The method registry of one paper."""
    if paper not in PAPERS:
        raise KeyError(f"unknown paper {paper!r}; allowed values: {', '.join(sorted(PAPERS))}")
    return importlib.import_module(PAPERS[paper]).METHODS


def method_entry(paper: str, method: str):
    """The function that runs one job of `method` from `paper`."""
    return lookup(methods(paper), method, f"{paper} method")
