"""Distillation terms of FedAL (paper eqs. (2)-(6), (11)-(12)).

Pure functions on logits. KL is written teacher first, KL(teacher || student),
as in the paper (confirmed by its gradient (68)); every loss is the mean over
the batch of the per-sample KL summed over classes (`batchmean`), which is the
paper's (1/|P^{t,i}|) sum_x. Logits (B, K) give one value; the KL terms, the split gradient
and `cross_entropy` also take logits stacked over clients (G, B, K) and give one value per
client (G,), which the batched clients of fedal.py use.

Choices where the paper is silent or contradicts itself:
- the KD target is the leave-one-out average of LOGITS, eq. (5); the
  server sends the all-client average (Algorithm 1 line 21) and the client
  removes its own share, `leave_one_out(mean, own, N)`.
- every term has weight 1 (none is given); no E^2 scaling of the KL.
- the less-forgetting terms and the local cross-entropy use temperature 1
  (not given; the `temperature` argument of `less_forgetting` defaults to 1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def tempered_softmax(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """psi(f, E): softmax(f / E) over the last axis (eq. (2))."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return torch.softmax(logits / temperature, dim=-1)


def kl_to_probs(teacher_probs: torch.Tensor, student_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Batch mean of KL(teacher || softmax(student / E)); gradient flows to the student only."""
    log_student = torch.log_softmax(student_logits / temperature, dim=-1)
    teacher = teacher_probs.detach().expand_as(log_student)  # one teacher batch for a stack of students
    return F.kl_div(log_student, teacher, reduction="none").sum(-1).mean(-1)


def kl_to_logits(teacher_logits: torch.Tensor, student_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Batch mean of KL(softmax(teacher / E) || softmax(student / E)) (eq. (4) with (6))."""
    return kl_to_probs(tempered_softmax(teacher_logits.detach(), temperature), student_logits, temperature)


def leave_one_out(mean_logits: torch.Tensor, own_logits: torch.Tensor, num_clients: int) -> torch.Tensor:
    """f_bar_{-n} = (N f_bar - f_n) / (N - 1), eq. (5) recovered from the all-client mean."""
    if num_clients < 2:
        raise ValueError(f"the leave-one-out average needs at least 2 clients, got {num_clients}")
    return (num_clients * mean_logits - own_logits) / (num_clients - 1)


def less_forgetting(
    anchor_logits: torch.Tensor, student_logits: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """r_loc / r_glo (eqs. (11)-(12)): KL(p(x, theta_anchor) || p(x, theta)).

    `anchor_logits` come from a frozen snapshot of the same client model, so the
    term and its gradient vanish while the model still equals its anchor.
    """
    return kl_to_logits(anchor_logits, student_logits, temperature)


def non_target_kl(
    teacher_logits: torch.Tensor, student_logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """FCCL+'s non-target distillation as its authors' code computes it (`_train_net` of FCCL+):
    the softmax at `temperature` over ALL classes, then the target class dropped WITHOUT
    renormalising the rest, sum_{c != y} p_c (log p_c - log q_c), batch mean."""
    keep = ~F.one_hot(labels, teacher_logits.shape[-1]).bool()
    log_p = torch.log_softmax(teacher_logits.detach() / temperature, dim=-1)
    log_q = torch.log_softmax(student_logits / temperature, dim=-1)
    terms = torch.where(keep, log_p.exp() * (log_p - log_q), torch.zeros_like(log_p))
    return terms.sum(dim=-1).mean()


def surrogate_from_grad(logits: torch.Tensor, grad_wrt_logits: torch.Tensor) -> torch.Tensor:
    """Split ("chain-rule") gradient (19): a scalar whose theta-gradient is (1/B) sum_x J^T g(x).

    `grad_wrt_logits` (B, K) is dU_n/df_n per sample, computed by the server; the
    client never needs the discriminator to apply it.
    """
    if logits.shape != grad_wrt_logits.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and gradient {tuple(grad_wrt_logits.shape)} must have the same shape"
        )
    return (logits * grad_wrt_logits.detach()).sum(-1).mean(-1)


def cross_correlation_loss(
    own_logits: torch.Tensor, target_logits: torch.Tensor, off_diagonal_weight: float = 0.0051
) -> torch.Tensor:
    """FCCL's collaborative loss (Huang et al., CVPR 2022, eq. (3)) between batch-standardised logits.

    M = Z_own^T Z_target / B, columns standardised over the batch (unbiased std, as in the
    authors' code); loss = sum_u (1 - M_uu)^2 + lambda sum_{u != v} (1 + M_uv)^2, lambda = 0.0051:
    the off-diagonal term is FCCL's (1 + M)^2, which pushes different classes' logits apart
    (Barlow Twins' M^2 would only decorrelate them).
    """

    def standardise(z: torch.Tensor) -> torch.Tensor:
        return (z - z.mean(0)) / (z.std(0) + 1e-8)

    batch = own_logits.shape[0]
    corr = standardise(own_logits).T @ standardise(target_logits.detach()) / batch
    on_diag = ((1 - torch.diagonal(corr)) ** 2).sum()
    off_diag = ((1 + off_diagonal(corr).reshape(-1)) ** 2).sum()
    return on_diag + off_diagonal_weight * off_diag


def similarity_logits(features: torch.Tensor, temperature: float = 0.02) -> torch.Tensor:
    """FCCL+'s instance similarity (Huang et al., TPAMI 2023, federated instance similarity
    learning): cosine similarities of the L2-normalised features divided by the temperature,
    each row without its diagonal (self-similarity) entry; (B, B - 1) logits."""
    z = F.normalize(features, dim=-1)
    return off_diagonal(z @ z.T / temperature)


def off_diagonal(m: torch.Tensor) -> torch.Tensor:
    """The off-diagonal entries of a square (n, n) matrix, row by row, as (n, n - 1): `m[~eye]` by slicing
    (static shapes, so a vmapped loss compiles in one graph; a boolean mask's size is data-dependent)."""
    n = m.shape[0]
    return m.flatten()[1:].view(n - 1, n + 1)[:, :-1].reshape(n, n - 1)
