"""The round loop every method shares, with checkpoint and exact resume."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pandas as pd
import torch
from tqdm.auto import tqdm

from fedrepro.fl import seeding

log = logging.getLogger(__name__)


class FederatedAlgorithm(Protocol):
    """What `run_rounds` drives. `summary()` is optional."""

    def round(self, t: int) -> dict: ...

    def evaluate(self, t: int) -> dict: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class Checkpoint:
    """A file holding the algorithm, every RNG state and the metric rows so far."""

    path: Path
    every: int = 1

    def due(self, rounds_done: int, num_rounds: int) -> bool:
        return rounds_done % self.every == 0 or rounds_done == num_rounds

    def save(self, algorithm: FederatedAlgorithm, rounds_done: int, rows: list[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        state = {"rounds_done": rounds_done, "rows": rows, "rng": seeding.rng_state(),
                 "algorithm": algorithm.state_dict()}
        tmp = self.path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)  # atomic: a kill mid-save leaves the previous checkpoint

    def restore(self, algorithm: FederatedAlgorithm) -> tuple[int, list[dict]]:
        """Load the checkpoint if there is one; returns (rounds done, metric rows)."""
        if not self.path.exists():
            return 0, []
        state = torch.load(self.path, weights_only=False)
        algorithm.load_state_dict(state["algorithm"])
        seeding.set_rng_state(state["rng"])
        log.info("resumed %s after round %d", self.path, state["rounds_done"])
        return state["rounds_done"], state["rows"]


def run_rounds(algorithm: FederatedAlgorithm, num_rounds: int, checkpoint: Checkpoint | None = None,
               eval_every: int = 1, desc: str = "rounds") -> pd.DataFrame:
    """Run rounds 1..num_rounds (resuming if a checkpoint exists); one metrics row per round."""
    done, rows = checkpoint.restore(algorithm) if checkpoint else (0, [])
    for t in tqdm(range(done + 1, num_rounds + 1), initial=done, total=num_rounds, desc=desc,
                  mininterval=5, dynamic_ncols=False):
        row = {"round": t, **algorithm.round(t)}
        if t % eval_every == 0 or t == num_rounds:
            row.update(algorithm.evaluate(t))
        rows.append(row)
        if checkpoint and checkpoint.due(t, num_rounds):
            checkpoint.save(algorithm, t, rows)
    return pd.DataFrame(rows)
