"""Lazy name -> object lookup shared by the model and algorithm registries.

Entries are "module:attribute" strings so that looking a name up imports only
the module that defines it (and torch only when that module needs it).
"""

from __future__ import annotations

import importlib
from typing import Any


def resolve(target: str) -> Any:
    """Import "package.module:attribute" and return the attribute."""
    module_name, _, attribute = target.partition(":")
    if not attribute:
        raise ValueError(f"registry target {target!r} must look like 'package.module:attribute'")
    return getattr(importlib.import_module(module_name), attribute)


def lookup(registry: dict[str, str], name: str, kind: str) -> Any:
    """Resolve `name` in `registry`, or fail with the list of allowed names."""
    if name not in registry:
        allowed = ", ".join(sorted(registry))
        raise KeyError(f"unknown {kind} {name!r}; allowed values: {allowed}")
    return resolve(registry[name])
