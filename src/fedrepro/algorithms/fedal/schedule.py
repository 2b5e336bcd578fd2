"""A FedAL-paper run's schedule from its job spec alone: rounds and local steps (pure Python, no torch).

The planner, the reports and the jobs read it, so the work a table compares is the work the runs do
(each run's summary reports its measured private steps, `base.Federation.summary`).

- An iteration is one global-transfer step (`iteration_unit: step`, base.Federation): a run of I
  iterations at tau steps per stage has ceil(I / tau) rounds; with `round` the budget counts rounds.
- Each round every client takes `local_steps_per_round` steps on its private data: tau (Algorithm 1
  lines 6-9), or FCCL's and FCCL+'s `local_steps` (their local updating, fccl.py).
- Before round 1 it takes `pretrain_iters` steps (0 for every method but FCCL, whose clients pretrain
  their intra-domain teacher, fccl.py).
"""

from __future__ import annotations

import math

UNITS = ("step", "round")


def rounds_for(iterations: int, tau: int, unit: str = "step") -> int:
    """Rounds that spend `iterations` (the paper's budgets, Tables IV-IX): with unit `step` a round
    spends tau iterations; with `round` the budget counts rounds."""
    if unit not in UNITS:
        raise ValueError(f"train.iteration_unit {unit!r} is not one of {', '.join(UNITS)}")
    if unit == "round":
        return iterations
    if iterations < tau:
        raise ValueError(f"iterations={iterations} is smaller than tau={tau}: not even one round")
    return math.ceil(iterations / tau)


def local_steps_per_round(spec: dict) -> int:
    """Private-data steps per client and round: `local_steps` where the method has it, else tau."""
    return int(spec.get("local_steps") or spec["tau"])


def local_work(spec: dict) -> dict[str, int]:
    """Per client: rounds, private steps per round, steps before round 1, and all private steps."""
    rounds = rounds_for(int(spec["iterations"]), int(spec["tau"]), spec.get("iteration_unit", "step"))
    per_round, pretrain = local_steps_per_round(spec), int(spec.get("pretrain_iters", 0))
    return {
        "rounds": rounds,
        "local_steps_per_round": per_round,
        "pretrain_steps": pretrain,
        "local_steps_total": pretrain + rounds * per_round,
    }
