"""Which clients take part in a round."""

from __future__ import annotations

import numpy as np


def sample_clients(rng: np.random.Generator, num_clients: int, per_round: int) -> np.ndarray:
    """`per_round` distinct clients, sorted; all of them when per_round >= num_clients."""
    if per_round <= 0:
        raise ValueError(f"clients per round must be positive, got {per_round}")
    if per_round >= num_clients:
        return np.arange(num_clients)
    return np.sort(rng.choice(num_clients, size=per_round, replace=False))


def clients_per_round(num_clients: int, fraction: float, minimum: int = 1) -> int:
    """Clients sampled per round for a participation fraction C in (0, 1]: FedAvg's
    m = max(C K, 1) (McMahan et al. 2017, Algorithm 1), with C K rounded to the nearest integer
    (Python's `round`: halves go to the even neighbour, 2.5 -> 2), then held in [minimum, K].

    The rule for every method that samples a fraction of its clients. FedSC keeps its own rule
    (`fedrepro.algorithms.fedsc.participation.clients_per_round`: its authors' max(int(C K), 2),
    the 2/5, 2/10 and 4/20 columns of FedSC's Tables 2-5), which differs: 1 here, 2 there for
    C = 0.2 and K = 5.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"participation fraction must be in (0, 1], got {fraction}")
    return min(num_clients, max(minimum, int(round(fraction * num_clients))))
