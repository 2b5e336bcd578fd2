"""The FERMI (chi-squared / ERMI) fairness regulariser and its min-max form.

SteFFLe Section 3: eqs. (4)-(6), Theorem 3.2 and Appendix D (after Lowy et al.'s FERMI).
Pure torch; every function broadcasts over leading (batch-of-models) dimensions, so one
call serves seeds x lambdas x eps x silos.

Samples are described by one-hot tensors that broadcast against F:
F (..., n, l) class probabilities, S (..., n, k) one-hot sensitive attribute,
Zs (..., n, Z) one-hot *stratum*:

* demographic parity (DP): Z = 1, every sample in stratum 0, eq. (5);
* equalized odds (EO): Z = l and stratum = label, one W^{(y)} per label value with
  the class-conditional P_{S|Y=y} (eq. 6: D_R conditioned on the label).

A zero row of S/Zs (a padded batch slot) contributes nothing. W has shape
(..., Z, k, l) and `inv_sqrt_p` (Z, k) holds p(r | stratum)^{-1/2}. The per-sample
term is (Appendix D, in scalar form; E[y s^T | x, s] taken l x k, the paper's "k x l"
being a transposition typo)

    psi_i(theta, W) = - sum_{r,u} W[z_i]_{ru}^2 F_u(x_i)
                      + 2 sum_u W[z_i]_{s_i u} F_u(x_i) / sqrt(p(s_i | z_i)) - 1.

Its batch mean is strongly concave in W and its maximum equals the chi-squared
divergence D_R of eqs. (5)/(6). `compat_refcode` (the authors' code) keeps only W entry
[r=0, u=1]: the authors' 1 x 1 W on sigma(z) and sensitive group 0 is exactly
this masked form (`w_mask`).
"""

from __future__ import annotations

import torch
from torch.nn.functional import one_hot


def onehot(idx: torch.Tensor, size: int, dtype=torch.float32) -> torch.Tensor:
    return one_hot(idx.long(), size).to(dtype)


def strata_inv_sqrt_p(s: torch.Tensor, z: torch.Tensor, k: int, num_strata: int) -> torch.Tensor:
    """P_{S|stratum}^{-1/2} as a (Z, k) float64 tensor from the (public) attribute frequencies.

    Raises if a group is empty in some stratum (the paper assumes p >= rho > 0).
    """
    counts = onehot(z, num_strata, torch.float64).T @ onehot(s, k, torch.float64)
    if (counts == 0).any():
        raise ValueError(
            f"every sensitive group must occur in every stratum; counts (stratum x group) = {counts.tolist()}"
        )
    return (counts / counts.sum(dim=1, keepdim=True)).rsqrt()


def w_mask(k: int, l: int, compat_refcode: bool, dtype=torch.float32) -> torch.Tensor:
    """(k, l) mask of the trainable entries of each W^{(z)}: all (paper) or only [0, 1] (ref-code)."""
    if not compat_refcode:
        return torch.ones(k, l, dtype=dtype)
    if l < 2:
        raise ValueError("compat_refcode needs l >= 2 classes (it uses F_1 = sigma(z))")
    mask = torch.zeros(k, l, dtype=dtype)
    mask[0, 1] = 1.0
    return mask


def _per_sample_w(Zs: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """W[z_i] for every sample, shape (..., n, k, l)."""
    return torch.einsum("...nz,...zkl->...nkl", Zs, W)


def _inv_sqrt_p_i(S: torch.Tensor, Zs: torch.Tensor, inv_sqrt_p: torch.Tensor) -> torch.Tensor:
    """p(s_i | z_i)^{-1/2} per sample, shape (..., n) (0 for padded slots)."""
    return torch.einsum("...nz,...nk,zk->...n", Zs, S, inv_sqrt_p.to(S.dtype))


def psi(F, S, Zs, W, inv_sqrt_p) -> torch.Tensor:
    """Per-sample psi_i(theta, W), shape (..., n)."""
    Wi = _per_sample_w(Zs, W)
    quad = (Wi.square() * F.unsqueeze(-2)).sum(dim=(-2, -1))
    lin = torch.einsum("...nk,...nkl,...nl->...n", S, Wi, F) * _inv_sqrt_p_i(S, Zs, inv_sqrt_p)
    return -quad + 2.0 * lin - 1.0


def coef_a(S, Zs, W, inv_sqrt_p) -> torch.Tensor:
    """a_{iu} = -sum_r W[z_i]_{ru}^2 + 2 W[z_i]_{s_i u} / sqrt(p(s_i|z_i)), shape (..., n, l).

    grad_theta psi_i = sum_u a_{iu} grad_theta F_u(x_i) (chain rule on the scalar form): this is
    what the sensitive division computes from the (F, grad F) messages it receives.
    """
    Wi = _per_sample_w(Zs, W)
    Ws = torch.einsum("...nk,...nkl->...nl", S, Wi)
    return -Wi.square().sum(-2) + 2.0 * Ws * _inv_sqrt_p_i(S, Zs, inv_sqrt_p).unsqueeze(-1)


def grad_w_sum(F, S, Zs, W, inv_sqrt_p) -> torch.Tensor:
    """sum_i d psi_i / dW over the samples, shape (..., Z, k, l). Divide by the batch size for the mean.

    d psi_i / dW[z]_{ru} = 1{z_i = z} (-2 W[z]_{ru} F_u + 2 1{r = s_i} F_u / sqrt(p(s_i|z))).
    """
    Fsum = torch.einsum("...nz,...nl->...zl", Zs, F)
    cross = torch.einsum("...nz,...nk,...nl->...zkl", Zs, S * _inv_sqrt_p_i(S, Zs, inv_sqrt_p).unsqueeze(-1), F)
    return -2.0 * W * Fsum.unsqueeze(-2) + 2.0 * cross


def logistic_probs(logits: torch.Tensor) -> torch.Tensor:
    """F(x, theta) = (1 - sigma, sigma) for binary logistic regression, shape (..., 2)."""
    p1 = torch.sigmoid(logits)
    return torch.stack([1.0 - p1, p1], dim=-1)


def logistic_psi_coef(logits: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """c_i with grad_theta psi_i = c_i x_tilde_i (logistic regression): sigma(1-sigma)(a_i1 - a_i0)."""
    p1 = torch.sigmoid(logits)
    return p1 * (1.0 - p1) * (a[..., 1] - a[..., 0])


def chi2(F, S, Zs) -> torch.Tensor:
    """Empirical D_R with soft predictions: eq. (5) for one stratum, eq. (6) for label strata.

    sum_z p(z) [ sum_{u,r} q_z(u,r)^2 / (pbar_z(u) p_z(r)) ] - 1 with all probabilities
    conditional on the stratum; shape (...).
    """
    n_z = Zs.sum(-2)  # (..., Z)
    pbar = torch.einsum("...nz,...nl->...zl", Zs, F) / n_z.unsqueeze(-1)
    p_s = torch.einsum("...nz,...nk->...zk", Zs, S) / n_z.unsqueeze(-1)
    q = torch.einsum("...nz,...nk,...nl->...zlk", Zs, S, F) / n_z[..., None, None]
    inner = (q.square() / (pbar.unsqueeze(-1) * p_s.unsqueeze(-2))).sum(dim=(-2, -1))
    return (n_z / n_z.sum(-1, keepdim=True) * inner).sum(-1) - 1.0


def w_star(F, S, Zs, inv_sqrt_p) -> torch.Tensor:
    """Closed-form maximiser W*[z]_{ru} = q_z(u, r) / (sqrt(p(r|z)) pbar_z(u)), shape (..., Z, k, l)."""
    pbar = torch.einsum("...nz,...nl->...zl", Zs, F)
    q = torch.einsum("...nz,...nk,...nl->...zkl", Zs, S, F)
    return q * inv_sqrt_p.to(F.dtype).unsqueeze(-1) / pbar.unsqueeze(-2)


def project_frobenius(W: torch.Tensor, radius: float) -> torch.Tensor:
    """Pi_W: each W^{(z)} (last two dims) onto the Frobenius ball of `radius` (the set W of
    Algorithm 1 line 11; the paper names no norm, the Frobenius ball is the natural reading)."""
    norm = torch.linalg.matrix_norm(W, ord="fro")[..., None, None]
    return W * (radius / norm.clamp_min(1e-30)).clamp(max=1.0)


# -- group form: a_{iu} and the W-gradient depend on a sample only through its
# (stratum, group) cell, which makes the vectorised trainer cheap --------------


def coef_table(W: torch.Tensor, inv_sqrt_p: torch.Tensor) -> torch.Tensor:
    """a_u for a sample in cell (z, r), shape (..., Z, k, l); coef_a_i = table[z_i, s_i]."""
    return -W.square().sum(-2, keepdim=True) + 2.0 * W * inv_sqrt_p.to(W.dtype).unsqueeze(-1)


def grad_w_from_cells(W: torch.Tensor, Fcell: torch.Tensor, inv_sqrt_p: torch.Tensor) -> torch.Tensor:
    """sum_i d psi_i / dW from the cell sums Fcell[z, r, u] = sum_{i: z_i = z, s_i = r} F_u(x_i)."""
    ip = inv_sqrt_p.to(W.dtype).unsqueeze(-1)
    return -2.0 * W * Fcell.sum(-2, keepdim=True) + 2.0 * Fcell * ip
