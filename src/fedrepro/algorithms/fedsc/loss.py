"""The spectral contrastive (SC) objective and FedSC's local loss (Sections 3 and 5, App. A and C).

Views are passed as one tensor `views` of shape (2V, B, H): view v and view v+V
of sample b form a positive pair. Everything is a pure function of the
representations so that the paper's identities (Eqs. 1, 4 and 6) can be checked exactly.
The representations reach these functions already NormClipped
(`fedrepro.privacy.mechanisms.normclip`: the authors' code clips in the training loss too).

* `correlations(views)`: (R+^, R^) of Section 5.2, R+^ = 1/(2BV) sum_v (Z_v^T Z_{v+V} + Z_{v+V}^T Z_v),
  R^ = 1/(2BV) sum_v Z_v^T Z_v.
* `sc_loss_matrix` / `sc_loss_pairwise`: Eq. 1 in matrix and pairwise form.
* `local_loss(views, alpha, r_minus, scale)`: Eq. 80 (Eq. 5 with q_j -> alpha),
  `scale * (-Tr R+ + alpha/2 ||R||^2 + (1-alpha) Tr(R r_minus))`; r_minus is a
  constant. `scale=2` is the authors' code's form, for which its learning rates
  are tuned.
* `decomposed_global_loss` (Eq. 4) and `fedavg_gap` (Eq. 3 made quantitative:
  sum_j q_j L(D_j) - L(D) = 1/2 sum_j q_j ||R_j - R_bar||^2).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _check_views(views: Tensor) -> tuple[int, int, int]:
    if views.dim() != 3 or views.shape[0] % 2:
        raise ValueError(f"views must have shape (2V, B, H) with an even first axis, got {tuple(views.shape)}")
    two_v, batch, dim = views.shape
    return two_v // 2, batch, dim


def correlations(views: Tensor) -> tuple[Tensor, Tensor]:
    """(R+^, R^) of Section 5.2 from views of shape (2V, B, H)."""
    v, b, _ = _check_views(views)
    first, second = views[:v].flatten(0, 1), views[v:].flatten(0, 1)
    cross = first.T @ second
    r_plus = (cross + cross.T) / (2 * b * v)
    flat = views.flatten(0, 1)
    r = flat.T @ flat / (2 * b * v)
    return r_plus, r


def positive_trace(views: Tensor) -> Tensor:
    """Tr R+^ = (1/(BV)) sum_b sum_{v<=V} z_{b,v} . z_{b,v+V} (no H x H matrix needed)."""
    v, b, _ = _check_views(views)
    return (views[:v] * views[v:]).sum() / (b * v)


def sc_loss_matrix(views: Tensor) -> Tensor:
    """Eq. 1: -Tr R+ + 1/2 ||R||_F^2 on a fixed set of views."""
    r_plus, r = correlations(views)
    return -torch.trace(r_plus) + 0.5 * (r * r).sum()


def sc_loss_pairwise(views: Tensor) -> Tensor:
    """The original pairwise form: 1/2 mean_{a,b} (z_a . z_b)^2 - E[z . z+].

    Negative pairs run over every ordered pair of the 2BV views (self pairs
    included), the empirical version of independent draws from A(.|D).
    """
    flat = views.flatten(0, 1)
    gram = flat @ flat.T
    return 0.5 * (gram**2).mean() - positive_trace(views)


class AlphaTerms:
    """Eq. 80's two weights, alpha/2 and 1 - alpha, as 0-dim device tensors set in place each round (`set`), so
    that a step captured in one round (a CUDA graph, a torch.compile graph) reads the next round's alpha.
    Both are computed on the host in Python floats, as `local_loss` does with a float alpha: the same float32s."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.half, self.rest = torch.zeros((), device=device), torch.zeros((), device=device)

    def set(self, alpha: float) -> AlphaTerms:
        check_alpha(alpha)
        self.half.fill_(0.5 * alpha)
        self.rest.fill_(1.0 - alpha)
        return self


def check_alpha(alpha: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")


def local_loss(
    views: Tensor, alpha: float | AlphaTerms = 1.0, r_minus: Tensor | None = None, scale: float = 2.0
) -> Tensor:
    """FedSC's local batch loss (Eq. 80; Eq. 5 when alpha = q_j), times `scale`; alpha a float or its weights
    as device tensors (`AlphaTerms`, the training step's).

    Without `r_minus` (no correlation matrix received yet, or FedAvg+SC) this is
    local SC: `scale * (-Tr R+ + 1/2 ||R||^2)`, whatever alpha is.
    """
    r_plus_trace = positive_trace(views)
    flat = views.flatten(0, 1)
    r = flat.T @ flat / flat.shape[0]
    if r_minus is None:
        return scale * (-r_plus_trace + 0.5 * (r * r).sum())
    if isinstance(alpha, AlphaTerms):
        half, rest = alpha.half, alpha.rest
    else:
        check_alpha(alpha)
        half, rest = 0.5 * alpha, 1.0 - alpha
    inter = (r * r_minus.detach()).sum()  # Tr(R R_-j) with R symmetric
    return scale * (-r_plus_trace + half * (r * r).sum() + rest * inter)


def leave_one_out(mats: list[Tensor], q: list[float] | Tensor, j: int) -> Tensor:
    """R_-j = (1/(1-q_j)) sum_{j' != j} q_j' R_j'."""
    q = torch.as_tensor(q, dtype=mats[0].dtype)
    if len(mats) < 2 or float(q[j]) >= 1.0:
        raise ValueError("leave-one-out needs at least two clients with q_j < 1")
    total = sum(q[k] * m for k, m in enumerate(mats) if k != j)
    return total / (1.0 - q[j])


def decomposed_global_loss(client_views: list[Tensor], q: list[float]) -> Tensor:
    """Right-hand side of Eq. 4: sum_j q_j(-Tr R_j+ + q_j/2 ||R_j||^2 + (1-q_j)/2 Tr(R_j R_-j))."""
    mats = [correlations(v) for v in client_views]
    rs = [r for _, r in mats]
    total = 0.0
    for j, (r_plus, r) in enumerate(mats):
        term = -torch.trace(r_plus) + 0.5 * q[j] * (r * r).sum()
        if len(rs) > 1:
            term = term + 0.5 * (1 - q[j]) * (r * leave_one_out(rs, q, j)).sum()
        total = total + q[j] * term
    return total


def fedavg_gap(client_views: list[Tensor], q: list[float]) -> Tensor:
    """1/2 sum_j q_j ||R_j - R_bar||_F^2, which equals sum_j q_j L(D_j) - L(D) (Eq. 3 made quantitative)."""
    rs = [correlations(v)[1] for v in client_views]
    r_bar = sum(qj * r for qj, r in zip(q, rs))
    return 0.5 * sum(qj * ((r - r_bar) ** 2).sum() for qj, r in zip(q, rs))


def alpha_schedule(t: int, num_rounds: int, start: float = 1.0, end: float = 0.2) -> float:
    """Linear decay alpha_t = start - (start - end) (t-1)/T for t = 1..T (App. C; code: 1 -> 0.204)."""
    if not 1 <= t <= num_rounds:
        raise ValueError(f"round t must lie in 1..{num_rounds}, got {t}")
    return start - (start - end) * (t - 1) / num_rounds
