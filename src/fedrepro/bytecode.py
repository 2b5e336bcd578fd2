"""Compiled byte code kept for every process of the pipeline, whatever the environment says.

Every job is a fresh Python process that imports torch, pandas, scipy and the package: about 4.9 CPU-s
when Python compiles those modules afresh, 2.3 when it reads them compiled (docs/benchmarks.md, "Run
cost"). `make install` leaves compiling to first use (pip --no-compile), and where
PYTHONDONTWRITEBYTECODE is set (CI images, containers, this project's development machine) Python never
writes what it compiled, so every job compiled everything again. `cache_byte_code` makes the processes
started from the calling one read and write their byte code in one folder outside the source trees
(PYTHONPYCACHEPREFIX, by default `<venv>/pycache`), which also keeps source folders free of
`__pycache__`, the usual reason to set PYTHONDONTWRITEBYTECODE. Python checks each cached file against
its source's time and size, so an edited module is compiled again; where the folder cannot be written,
Python compiles in memory as before.

The Snakefile calls it (its jobs inherit the environment, on a cluster through the Snakemake inside
each job), as do the Makefile (for every command it runs) and tests/conftest.py (the suite's
subprocesses).
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

PREFIX_ENV = "PYTHONPYCACHEPREFIX"
NO_WRITE_ENV = "PYTHONDONTWRITEBYTECODE"


def default_folder() -> Path:
    """`<venv>/pycache`: beside the installed packages whose byte code it mostly holds (Makefile: the same)."""
    return Path(sys.prefix) / "pycache"


def cache_byte_code(environ: MutableMapping[str, str] | None = None) -> str:
    """Set `environ` (default: this process's, inherited by the processes it starts) to cache byte code
    under PYTHONPYCACHEPREFIX (kept when set, else `default_folder()`), writing it even where
    PYTHONDONTWRITEBYTECODE says not to; this process's own later imports follow. Returns the folder."""
    own = environ is None
    environ = os.environ if own else environ
    folder = environ.get(PREFIX_ENV) or str(default_folder())
    environ[PREFIX_ENV] = folder
    environ.pop(NO_WRITE_ENV, None)
    if own:
        sys.pycache_prefix, sys.dont_write_bytecode = folder, False
    return folder
