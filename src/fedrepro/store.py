"""The one store of finished work: what a job reuses instead of training it again.

Three kinds of finished work are kept beside the results and reused by later jobs: a seed of a
run (`fedrepro.fl.runner`: adding a seed to a paper's list runs only that seed), a privacy variant
of a DPZV job and an (eps, lambda) cell of a SteFFLe grid (adding a variant or a lambda trains only
the new one). Each is an entry `<root>/<slot>/<key>/`:

* `slot` names what the entry holds in words (`seed3`, `eps1-C10/s0_1`), so one slot holds the
  entry of one piece of work;
* `key` is a hash of the entry's state: the part of the job's spec its numbers depend on, its seeds
  and every input file, named relative to the results folder (`fedrepro.pipeline.fingerprint`: data and
  partitions by size and time, the code fingerprints by content as the job started, `Job.code`: the hash of
  the code of every module the job may run, which `fedrepro.pipeline.stale_code` checked against the code
  this process runs). Work done under other settings, inputs or code has another key and is never served;
  a parse of the workflow with other code while the job runs changes no key of the job's. This module is
  not part of any fingerprint (`fedrepro.codedeps.BOOKKEEPING`): it decides what is reused, not what is
  computed.

An entry's files are written atomically and its state (`state.json`) last, so a half-written entry
never counts as finished; a job's store (`Store(root, job)`) writes an entry only while every module the
job imported is still the code it started with (`fedrepro.pipeline.require_code`). A slot keeps the entries
of other keys (other settings, or another checkout's code sharing the folder), the most recently used
first, while they take at most KEEP_OTHERS times the size of the entry just written. An entry that cannot
be read back is named in the log, removed and recomputed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from fedrepro.atomic import atomic_write, atomic_write_text
from fedrepro.pipeline import Job, fingerprint, require_code

STATE = "state.json"
# The entries of other keys a slot keeps: at most this many times the size of the entry just written (two
# checkouts alternating on one folder keep each other's work; old settings' work goes, oldest first).
KEEP_OTHERS = 3
log = logging.getLogger(__name__)
T = TypeVar("T")


def state_of(job: Job, spec: dict, seeds: list[int]) -> str:
    """What one entry's numbers depend on: `spec` (the part of the job's spec that changes them),
    `seeds` and every input file of `job` (code fingerprints included)."""
    return fingerprint(dataclasses.replace(job, spec=spec, output={}, seeds=list(seeds)))


class Store:
    """Entries `<root>/<slot>/<key>/` of finished work (see the module's docstring); with `job`, the store
    of that job, which saves only while the job's code is what it started with."""

    def __init__(self, root: str | os.PathLike, job: Job | None = None):
        self.root = Path(root)
        self.job = job

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
            found = read(folder)
        except Exception as error:  # noqa: BLE001 (any unreadable file: the work is done again)
            log.warning("unreadable entry %s (%s: %s): removed, recomputing it", folder, type(error).__name__, error)
            shutil.rmtree(folder, ignore_errors=True)
            return None
        _used(folder)
        return found

    def save(self, slot: str, state: str, files: Mapping[str, Callable[[Path], Any] | Path]) -> Path:
        """Write the entry of `slot` under `state`: each file by its writer (`write(tmp)`, as
        `fedrepro.atomic.atomic_write` takes it) or, for a Path, linked to that file (copied where
        links fail; a missing file is skipped); the state last. Then drops the slot's least recently used
        entries of other keys beyond KEEP_OTHERS times this entry's size."""
        if self.job is not None:
            require_code(self.job, fingerprints=False)
        folder = self.entry(slot, state)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / STATE).unlink(missing_ok=True)
        for name, source in files.items():
            if isinstance(source, Path):
                share(source, folder / name)
            else:
                atomic_write(folder / name, source)
        atomic_write_text(folder / STATE, state)
        _drop_beyond(folder, KEEP_OTHERS * _size(folder))
        return folder


def _drop_beyond(kept: Path, budget: int) -> None:
    """Remove the entries beside `kept` (its slot's other keys) once the more recently used ones fill `budget`
    bytes."""
    others = [other for other in kept.parent.iterdir() if other != kept and other.is_dir()]
    for other in sorted(others, key=_last_used, reverse=True):
        budget -= _size(other)
        if budget < 0:
            shutil.rmtree(other, ignore_errors=True)


def _size(folder: Path) -> int:
    """Bytes in `folder` (0 for an entry another process removes meanwhile)."""
    try:
        return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
    except OSError:
        return 0


def _last_used(folder: Path) -> int:
    """When the entry was last written or served (an entry being written counts by its folder's time)."""
    times = []
    for path in (folder, folder / STATE):
        try:
            times.append(path.stat().st_mtime_ns)
        except OSError:
            continue
    return max(times, default=0)


def _used(folder: Path) -> None:
    try:
        os.utime(folder / STATE)
    except OSError:  # a read-only folder serves all the same
        pass


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
