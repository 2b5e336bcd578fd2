"""Server-side bookkeeping of shared correlation matrices (Algorithm 1, lines 4-17).

The server keeps the latest matrix every client has uploaded (stale ones are
retained under partial participation, line 17) and the global aggregate
R~ = sum_j q_j R~_j, updated incrementally (line 14):
R~^t = R~^{t-1} - q_j R~_j^{t-1} + q_j R~_j^t. Clients compute their
leave-one-out estimate from the broadcast aggregate and their own upload
(line 20): R~_-j = (R~ - q_j R~_j)/(1 - q_j); see `client_leave_one_out`.

The aggregate is kept in float64 so that many incremental updates do not drift
away from the direct sum.
"""

from __future__ import annotations

import torch
from torch import Tensor


class CorrelationServer:
    """Holds {j: R~_j} and R~; `q` are the aggregation weights (sum to 1)."""

    def __init__(self, q: list[float]):
        if not q or abs(sum(q) - 1.0) > 1e-6 or min(q) < 0:
            raise ValueError(f"client weights q must be non-negative and sum to 1, got {q}")
        self.q = [float(x) for x in q]
        self.latest: dict[int, Tensor] = {}
        self.aggregate: Tensor | None = None

    @property
    def complete(self) -> bool:
        """True once every client has uploaded at least once (Algorithm 1, t = 1)."""
        return len(self.latest) == len(self.q)

    def receive(self, j: int, matrix: Tensor) -> None:
        """Line 14: replace client j's contribution in the aggregate by its new matrix."""
        new = matrix.detach().to(torch.float64)
        if self.aggregate is None:
            self.aggregate = torch.zeros_like(new)
        old = self.latest.get(j)
        if old is not None:
            self.aggregate -= self.q[j] * old
        self.aggregate += self.q[j] * new
        self.latest[j] = new

    def broadcast(self) -> Tensor:
        """The global matrix R~ sent to every client (lines 9 and 16)."""
        if not self.complete:
            raise RuntimeError(
                f"only {len(self.latest)} of {len(self.q)} clients have uploaded; "
                "the first sharing round must collect every client (Algorithm 1, t = 1)"
            )
        return self.aggregate.to(torch.float32)

    def direct_sum(self) -> Tensor:
        """sum_j q_j R~_j recomputed from scratch (for checks)."""
        return sum(self.q[j] * m for j, m in self.latest.items())

    def state_dict(self) -> dict:
        return {"latest": dict(self.latest), "aggregate": self.aggregate}

    def load_state_dict(self, state: dict) -> None:
        self.latest = {int(k): v for k, v in state["latest"].items()}
        self.aggregate = state["aggregate"]


def client_leave_one_out(global_matrix: Tensor, own: Tensor, q_j: float) -> Tensor:
    """Line 20: R~_-j = (R~ - q_j R~_j)/(1 - q_j), computed by client j."""
    if q_j >= 1.0:
        raise ValueError("leave-one-out is undefined for a single client (q_j = 1)")
    return (global_matrix - q_j * own.to(global_matrix.dtype)) / (1.0 - q_j)
