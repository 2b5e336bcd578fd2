"""What every paper's audit shares: one mechanism's scores (`Audited`) and the scores of releases in clear."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Audited:
    """One mechanism's audit scores and the epsilons they are compared with."""

    mechanism: str
    variant: str
    adversary: str  # who the attacker is and what it sees
    out: np.ndarray  # scores of the runs without the canary
    inn: np.ndarray  # with it
    delta: float
    eps_claimed: float  # the label the run carries
    claimed_for: str  # the adversary that label assumes
    eps_adversary: float  # against this audit's adversary (inf: no finite bound holds)
    eps_reference: float  # for a leaking mechanism: what the leak-free variant reaches against the same adversary
    mu_attained: float  # GDP mu of the canary as mounted (noiseless replay, root mean square over runs)
    sigma: float
    note: str
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)
    unit: str = ""  # the privacy unit the canary is (the mechanism's threat model)


def _rms(values) -> float:
    return float(np.sqrt(np.mean(np.square(values))))


def _exact_scores(observed: list, clean: list, world_of_run: list) -> tuple[dict, float]:
    """Scores of noise-free releases: per run, (|o - c_out|^2 - |o - c_in|^2) / (2 tau^2) with c_out, c_in the
    attacker's replays of that run in both worlds (`clean`: one {"out", "in"} per run) and tau the measured
    residual of the observed releases around their own world's replay (float rounding; at least 1e-12). The
    attacker's test is then exact: the lower bound reaches the most the runs can show (Clopper-Pearson)."""
    residual = [float(((o - c[w]) ** 2).mean()) for o, c, w in zip(observed, clean, world_of_run)]
    tau = max(math.sqrt(float(np.mean(residual))), 1e-12)
    scores = {"out": [], "in": []}
    for o, c, w in zip(observed, clean, world_of_run):
        scores[w].append(float(((o - c["out"]) ** 2).sum() - ((o - c["in"]) ** 2).sum()) / (2 * tau**2))
    return {w: np.asarray(v) for w, v in scores.items()}, tau
