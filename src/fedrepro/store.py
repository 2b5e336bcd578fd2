"""The one store of finished work: what a job reuses instead of training it again.

Three kinds of finished work are kept beside the results and reused by later jobs: a seed of a
run (`fedrepro.fl.runner`: adding a seed to a paper's list runs only that seed), a privacy variant
of a DPZV job and an (eps, lambda) cell of a SteFFLe grid (adding a variant or a lambda trains only
the new one). Each is an entry `<root>/<slot>/<key>/`:

* `slot` names what the entry holds in words (`seed3`, `eps1-C10/s0_1`), so one slot holds the
  entry of one piece of work;
* `key` is a hash of the entry's state: the part of the job's spec its numbers depend on, its seeds
  and every input file (`fedrepro.pipeline.fingerprint`: data and partitions by size and time, the
  code fingerprints by content, i.e. the hash of the source of every module the job imports,
  which `fedrepro.pipeline.stale_code` has checked against the code this process runs). Work
  done under other settings, inputs or code has another key and is never served.

An entry's files are written atomically and its state (`state.json`) last, so a half-written entry
never counts as finished. Saving an entry drops the other keys of its slot (work of older settings
or code). An entry that cannot be read back is named in the log, removed and recomputed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from fedrepro.atomic import atomic_write, atomic_write_text
from fedrepro.pipeline import Job, fingerprint

STATE = "state.json"
log = logging.getLogger(__name__)
T = TypeVar("T")


def state_of(job: Job, spec: dict, seeds: list[int]) -> str:
    """What one entry's numbers depend on: `spec` (the part of the job's spec that changes them),
    `seeds` and every input file of `job` (code fingerprints included)."""
    return fingerprint(Job(spec=spec, output={}, input=job.input, seeds=list(seeds)))


class Store:
    """Entries `<root>/<slot>/<key>/` of finished work (see the module's docstring)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def entry(self, slot: str, state: str) -> Path:
        return self.root / slot / hashlib.sha256(state.encode()).hexdigest()[:24]

    def load(self, slot: str, state: str, read: Callable[[Path], T]) -> T | None:
        """`read(entry folder)` of the finished entry of `slot` written under `state`, else None.
        An entry that `read` cannot read back is named in the log and removed."""
        folder = self.entry(slot, state)
        try:
            if (folder / STATE).read_text() != state:
                return None
        except (OSError, UnicodeDecodeError):
            return None
        try:
            return read(folder)
        except Exception as error:  # noqa: BLE001 (any unreadable file: the work is done again)
            log.warning("unreadable entry %s (%s: %s): removed, recomputing it", folder, type(error).__name__, error)
            shutil.rmtree(folder, ignore_errors=True)
            return None

    def save(self, slot: str, state: str, files: Mapping[str, Callable[[Path], Any] | Path]) -> Path:
        """Write the entry of `slot` under `state`: each file by its writer (`write(tmp)`, as
        `fedrepro.atomic.atomic_write` takes it) or, for a Path, linked to that file (copied where
        links fail; a missing file is skipped); the state last. Drops the slot's other keys."""
        folder = self.entry(slot, state)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / STATE).unlink(missing_ok=True)
        for name, source in files.items():
            if isinstance(source, Path):
                share(source, folder / name)
            else:
                atomic_write(folder / name, source)
        atomic_write_text(folder / STATE, state)
        for other in (self.root / slot).iterdir():
            if other != folder and other.is_dir():
                shutil.rmtree(other, ignore_errors=True)
        return folder


def share(source: Path, target: Path) -> None:
    """Place `source` at `target` (a hard link, or an atomic copy where links fail); nothing if
    `source` is missing or is `target`."""
    if not source.exists() or source.resolve() == target.resolve():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        atomic_write(target, lambda tmp: shutil.copyfile(source, tmp))
