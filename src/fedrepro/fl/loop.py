"""The round loop every method shares, with checkpoint and exact resume.

A round is one call of `algorithm.round(t)` and one row of the job's metrics: a communication
round for FedSC, FedAL and FedAvg, an evaluation period for DPZV (a fraction of an epoch), an
epoch for SteFFLe. The top-level config key `checkpoint_every` counts these rounds, for every
paper; it reaches the job's process as an environment variable (`fedrepro.options.EVERY_ENV`),
never in a job's spec, and `Checkpoint` reads it here and nowhere else.

Checkpoint policy (docs/architecture.md, "Checkpoints"): a checkpoint is due after every
`every`-th round (`checkpoint_every`), but when `minutes` is set (`checkpoint_minutes`,
paper scale: 10) a due round is only written once at least that much wall time has passed since
the last write; the last round is always written. A file holds exactly what exact resume needs:
rounds done, the metric rows so far, every global RNG state and the algorithm's `state_dict()`.
It is written with `fedrepro.atomic.atomic_write` (a temporary file in the same folder, renamed
over the old one), so a kill at any moment leaves either the previous or the new checkpoint, never
a torn one; under the wall-time policy the file and the rename are also fsynced, so a node crash
cannot leave a torn file either (about 20 ms per write: skipped at quick scale, which writes every
round). A file that cannot be read all the same (a disk fault) is named in the log, removed, and
the run starts from round 1. It is read back onto the CPU (`map_location="cpu"`), so a run
checkpointed on a GPU node resumes on a CPU-only node and back: `nn.Module.load_state_dict` and
the optimisers copy into the algorithm's own tensors on its own device, and RNG states must be
CPU tensors anyway.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from fedrepro.atomic import atomic_write, remove_stray_temporaries
from fedrepro.options import EVERY_ENV, MINUTES_ENV

log = logging.getLogger(__name__)

# Checkpoint policy of a job: the top-level config keys `checkpoint_every` and `checkpoint_minutes` (null
# at quick scale, 10 at paper scale), handed to the job's process by
# `fedrepro.pipeline.hand_over_process_settings` in the environment variables EVERY_ENV and MINUTES_ENV.
# They are deliberately not part of any job's params.spec: how often a run is checkpointed does not
# change its numbers, so changing them must neither re-run jobs nor empty their scratch folders
# (`fedrepro.pipeline.claim_scratch`) nor the seed store.


def parse_every(value) -> int:
    """`checkpoint_every` as a whole number of rounds >= 1 (1 when unset)."""
    if value is None or value == "":
        return 1
    try:
        every = int(str(value))
    except ValueError:
        every = 0
    if isinstance(value, bool) or every < 1:
        raise ValueError(f"checkpoint_every must be a whole number of rounds >= 1, got {value!r}")
    return every


def parse_minutes(value) -> float | None:
    """`checkpoint_minutes` as a number of minutes, or None (by rounds only) for null, "" or 0."""
    if value is None or value == "" or str(value).lower() in ("none", "null"):
        return None
    try:
        minutes = float(value)
    except (TypeError, ValueError):
        minutes = -1.0
    if isinstance(value, bool) or not minutes >= 0:
        raise ValueError(f"checkpoint_minutes must be a number >= 0 or null, got {value!r}")
    return minutes or None


class FederatedAlgorithm(Protocol):
    """What `run_rounds` drives. `summary()` is optional."""

    def round(self, t: int) -> dict: ...

    def evaluate(self, t: int) -> dict: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def _default_minutes() -> float | None:
    return parse_minutes(os.environ.get(MINUTES_ENV))


def _default_every() -> int:
    return parse_every(os.environ.get(EVERY_ENV))


# Rounds after which a run also keeps its state in a file of its own (`Checkpoint.kept`), for shorter runs of
# the same setting that end there (fedrepro.algorithms.fedal.budget): set by the job that asks for them.
KEEP_ENV = "FEDREPRO_KEEP_ROUNDS"


def _default_keep() -> tuple[int, ...]:
    return tuple(int(t) for t in os.environ.get(KEEP_ENV, "").split(",") if t.strip())


@dataclass
class Checkpoint:
    """A file holding the algorithm, every RNG state and the metric rows so far.

    `every`: rounds between checkpoints (default: the job's `checkpoint_every`, see EVERY_ENV);
    `minutes`: at most one checkpoint per that much wall time (default: the job's
    `checkpoint_minutes`, see MINUTES_ENV; None or 0: by rounds only).
    `clock` is injectable for tests. `bytes_written` / `saves` count what this object wrote.
    """

    path: Path
    every: int = field(default_factory=_default_every)
    minutes: float | None = field(default_factory=_default_minutes)
    clock: Callable[[], float] = time.monotonic
    keep: tuple[int, ...] = field(default_factory=_default_keep)
    bytes_written: int = 0
    saves: int = 0
    _last: float | None = field(default=None, repr=False)

    def start(self) -> None:
        """Start the wall-time clock (the run starts or resumes now)."""
        self._last = self.clock()

    def due(self, rounds_done: int, num_rounds: int) -> bool:
        if rounds_done == num_rounds:
            return True
        if rounds_done % max(1, int(self.every)):
            return False
        if not self.minutes:
            return True
        if self._last is None:
            self.start()
        return self.clock() - self._last >= 60.0 * self.minutes

    def save(self, algorithm: FederatedAlgorithm, rounds_done: int, rows: list[dict]) -> None:
        state = _state(algorithm, rounds_done, rows)
        durable = bool(self.minutes)  # paper scale: rare, large writes, worth surviving a node crash
        written = atomic_write(self.path, lambda tmp: _write_state(tmp, state, durable))
        if durable:
            _fsync_folder(written.parent)  # make the rename itself durable
        self.bytes_written += written.stat().st_size
        self.saves += 1
        self._last = self.clock()

    def kept(self, rounds_done: int) -> Path:
        """The file holding the state after round `rounds_done` (`keep`)."""
        return self.path.with_name(f"{self.path.stem}.r{rounds_done}{self.path.suffix}")

    def keep_state(self, algorithm: FederatedAlgorithm, rounds_done: int, rows: list[dict]) -> None:
        atomic_write(self.kept(rounds_done), lambda tmp: _write_state(tmp, _state(algorithm, rounds_done, rows), False))

    def restore(self, algorithm: FederatedAlgorithm) -> tuple[int, list[dict]]:
        """Load the checkpoint if there is one; returns (rounds done, metric rows). Temporary files of
        a save that was killed mid-write are deleted (this job is the checkpoint's only writer)."""
        for stray in remove_stray_temporaries(self.path):
            log.info("removed %s, left by a save that was interrupted", stray)
        if not self.path.exists():
            return 0, []
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=False)
        except Exception as error:  # noqa: BLE001 (any unreadable file: start over, never crash)
            log.warning(
                "checkpoint %s is unreadable (%s: %s); running from round 1", self.path, type(error).__name__, error
            )
            self.path.unlink()
            return 0, []
        algorithm.load_state_dict(state["algorithm"])
        set_rng_state(state["rng"])
        log.info("resumed %s after round %d", self.path, state["rounds_done"])
        return state["rounds_done"], state["rows"]


def rng_state() -> dict:
    """Every global generator state, for a checkpoint."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what `rng_state` saved."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _state(algorithm: FederatedAlgorithm, rounds_done: int, rows: list[dict]) -> dict:
    """What a checkpoint holds: rounds done, the metric rows so far, every global RNG state, the algorithm."""
    return {"rounds_done": rounds_done, "rows": rows, "rng": rng_state(), "algorithm": algorithm.state_dict()}


def start_from(path: Path, state: dict) -> bool:
    """Make `state`, a checkpoint of another run whose rounds this run repeats (a shared prefix, e.g.
    fedrepro.algorithms.fedsc.prefix), this run's checkpoint at `path`, so `run_rounds` resumes from it; a
    run with a checkpoint of its own keeps it (a killed run resumes from its later rounds). Returns
    whether it was written."""
    if Path(path).exists():
        return False
    atomic_write(path, lambda tmp: _write_state(tmp, state, False))
    return True


def _write_state(tmp: Path, state: dict, durable: bool) -> None:
    with open(tmp, "wb") as stream:
        torch.save(state, stream)
        if durable:
            stream.flush()
            os.fsync(stream.fileno())


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open a folder; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def run_rounds(
    algorithm: FederatedAlgorithm,
    num_rounds: int,
    checkpoint: Checkpoint | None = None,
    eval_every: int = 1,
    desc: str = "rounds",
) -> pd.DataFrame:
    """Run rounds 1..num_rounds (resuming if a checkpoint exists); one metrics row per round."""
    done, rows = checkpoint.restore(algorithm) if checkpoint else (0, [])
    if checkpoint:
        checkpoint.start()
    start = time.perf_counter()
    for t in tqdm(
        range(done + 1, num_rounds + 1), initial=done, total=num_rounds, desc=desc, mininterval=5, dynamic_ncols=False
    ):
        row = {"round": t, **algorithm.round(t)}
        if t % eval_every == 0 or t == num_rounds:
            row.update(algorithm.evaluate(t))
        rows.append(row)
        if checkpoint and t in checkpoint.keep:
            checkpoint.keep_state(algorithm, t, list(rows))
        if checkpoint and checkpoint.due(t, num_rounds):
            checkpoint.save(algorithm, t, rows)
    if num_rounds > done:  # read by benchmarks/checkpoint_bytes.py (seconds per round, checkpoints included)
        log.info(
            "rounds %d-%d: %.3f s per round", done + 1, num_rounds, (time.perf_counter() - start) / (num_rounds - done)
        )
    if checkpoint and checkpoint.saves:
        log.info(
            "%s: %d checkpoint(s), %.1f MB written",
            checkpoint.path.name,
            checkpoint.saves,
            checkpoint.bytes_written / 1e6,
        )
    return pd.DataFrame(rows)
