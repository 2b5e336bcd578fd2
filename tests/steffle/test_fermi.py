"""The min-max FERMI objective (Theorem 3.2, Appendix D): its maximum over W is D_R (eqs. 5, 6),
its gradients match autograd, and Danskin's theorem (Lemma C.3) holds."""

import itertools

import pytest
import torch

from fedrepro.algorithms.steffle import fermi

DT = torch.float64


def _toy(n=40, k=2, l=2, seed=0, strata=1):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, l, generator=g, dtype=DT)
    F = torch.softmax(logits, -1)
    s = torch.cat([torch.arange(k), torch.randint(k, (n - k,), generator=g)])
    y = torch.cat([torch.arange(l).repeat_interleave(k), torch.randint(l, (n - k * l,), generator=g)])
    s = torch.cat([torch.arange(k).repeat(l), s[k * l :]]) if strata > 1 else s
    z = y if strata > 1 else torch.zeros(n, dtype=torch.long)
    return F, s, y, z


def _chi2_eq5(F, s, k):
    """Eq. (5) written out with explicit loops (independent of fermi.chi2)."""
    n, l = F.shape
    total = 0.0
    for j in range(l):
        for r in range(k):
            p_joint = sum(F[i, j] for i in range(n) if s[i] == r) / n
            p_y = F[:, j].mean()
            p_s = (s == r).double().mean()
            total += p_joint**2 / (p_y * p_s)
    return total - 1.0


@pytest.mark.parametrize("k,l", [(2, 2), (3, 2), (2, 3)])
def test_min_max_identity_dp(k, l):
    F, s, _, z = _toy(k=k, l=l)
    S, Zs = fermi.onehot(s, k, F.dtype), fermi.onehot(z, 1, F.dtype)
    ip = fermi.strata_inv_sqrt_p(s, z, k, 1)
    W = fermi.w_star(F, S, Zs, ip).requires_grad_(True)
    value = fermi.psi(F, S, Zs, W, ip).mean()
    (grad,) = torch.autograd.grad(value, W)
    assert grad.abs().max() < 1e-12  # W* is stationary
    assert value.item() == pytest.approx(float(_chi2_eq5(F, s, k)), abs=1e-10)
    assert fermi.chi2(F, S, Zs).item() == pytest.approx(value.item(), abs=1e-10)
    # projected gradient ascent from W = 0 (large ball) reaches the same maximum
    Wt = torch.zeros(1, k, l, dtype=DT)
    step = 1.0 / (2 * F.mean(0).max())  # 1 / smoothness
    for _ in range(300):
        Wt = fermi.project_frobenius(Wt + step * fermi.grad_w_sum(F, S, Zs, Wt, ip) / len(s), 100.0)
    assert fermi.psi(F, S, Zs, Wt, ip).mean().item() == pytest.approx(value.item(), abs=1e-8)


def test_eo_identity_equals_eq6_and_weighted_dp():
    k, l = 2, 2
    F, s, y, z = _toy(n=60, strata=2)
    S, Zs = fermi.onehot(s, k, F.dtype), fermi.onehot(z, l, F.dtype)
    ip = fermi.strata_inv_sqrt_p(s, z, k, l)
    W = fermi.w_star(F, S, Zs, ip)
    value = fermi.psi(F, S, Zs, W, ip).mean().item()
    # eq. (6) written out: sum_y p(y) sum_{j,r} p(j,r|y)^2 / (p(j|y) p(r|y)) - 1
    eq6 = -1.0
    for label in range(l):
        m = y == label
        eq6 += m.double().mean() * (_chi2_eq5(F[m], s[m], k) + 1.0)
    assert value == pytest.approx(float(eq6), abs=1e-10)
    assert fermi.chi2(F, S, Zs).item() == pytest.approx(value, abs=1e-10)
    Wg = W.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(fermi.psi(F, S, Zs, Wg, ip).mean(), Wg)
    assert grad.abs().max() < 1e-12


def test_chi2_properties():
    k = 2
    F, s, _, z = _toy(n=80)
    S, Zs = fermi.onehot(s, k, F.dtype), fermi.onehot(z, 1, F.dtype)
    assert fermi.chi2(F, S, Zs) >= 0
    same = torch.tensor([[0.3, 0.7]], dtype=DT).expand(80, 2)  # F independent of x
    assert fermi.chi2(same, S, Zs).abs() < 1e-12
    base = torch.full((80, 2), 0.5, dtype=DT)
    shifted = base.clone()
    shifted[s == 1] = torch.tensor([0.2, 0.8], dtype=DT)
    more = base.clone()
    more[s == 1] = torch.tensor([0.05, 0.95], dtype=DT)
    assert 0 < fermi.chi2(shifted, S, Zs) < fermi.chi2(more, S, Zs)


def test_strong_concavity_hessian():
    k, l = 2, 3
    F, s, _, z = _toy(k=k, l=l)
    S, Zs = fermi.onehot(s, k, F.dtype), fermi.onehot(z, 1, F.dtype)
    ip = fermi.strata_inv_sqrt_p(s, z, k, 1)

    def f(w):
        return fermi.psi(F, S, Zs, w.view(1, k, l), ip).mean()

    H = torch.autograd.functional.hessian(f, torch.randn(k * l, dtype=DT))
    pbar = F.mean(0)
    expected = -2.0 * torch.kron(torch.eye(k, dtype=DT), torch.diag(pbar))
    assert torch.allclose(H, expected, atol=1e-12)
    assert torch.linalg.eigvalsh(H).max().item() == pytest.approx(-2.0 * pbar.min().item(), abs=1e-12)


@pytest.mark.parametrize("strata", [1, 2])
def test_analytic_gradients_match_autograd(strata):
    k, l, n, d = 2, 2, 30, 5
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, d, generator=g, dtype=DT)
    theta = torch.randn(d, generator=g, dtype=DT, requires_grad=True)
    _, s, y, z = _toy(n=n, strata=strata)
    S, Zs = fermi.onehot(s, k, x.dtype), fermi.onehot(z, strata, x.dtype)
    ip = fermi.strata_inv_sqrt_p(s, z, k, strata)
    W = torch.randn(strata, k, l, generator=g, dtype=DT, requires_grad=True)
    logits = x @ theta
    per_sample = fermi.psi(fermi.logistic_probs(logits), S, Zs, W, ip)
    for i in (0, 7, 29):
        gt, gw = torch.autograd.grad(per_sample[i], (theta, W), retain_graph=True)
        a = fermi.coef_a(S[i : i + 1], Zs[i : i + 1], W.detach(), ip)
        c = fermi.logistic_psi_coef(logits[i : i + 1].detach(), a)
        assert torch.allclose(c * x[i], gt, atol=1e-12)
        F_i = fermi.logistic_probs(logits[i : i + 1].detach())
        assert torch.allclose(fermi.grad_w_sum(F_i, S[i : i + 1], Zs[i : i + 1], W.detach(), ip), gw, atol=1e-12)
        # chain rule from the division message (F, grad F): sum_u a_iu grad F_u = autograd
        p1 = torch.sigmoid(logits[i]).detach()
        gradF = torch.stack([-p1 * (1 - p1) * x[i], p1 * (1 - p1) * x[i]])
        assert torch.allclose(a[0] @ gradF, gt, atol=1e-12)


def test_danskin_gradient_of_chi2():
    k, n, d = 2, 50, 4
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, d, generator=g, dtype=DT)
    theta = torch.randn(d, generator=g, dtype=DT, requires_grad=True)
    _, s, _, z = _toy(n=n)
    S, Zs = fermi.onehot(s, k, x.dtype), fermi.onehot(z, 1, x.dtype)
    ip = fermi.strata_inv_sqrt_p(s, z, k, 1)
    F = fermi.logistic_probs(x @ theta)
    (g_closed,) = torch.autograd.grad(fermi.chi2(F, S, Zs), theta, retain_graph=True)
    W_star = fermi.w_star(F.detach(), S, Zs, ip)
    (g_danskin,) = torch.autograd.grad(fermi.psi(F, S, Zs, W_star, ip).mean(), theta)
    assert torch.allclose(g_closed, g_danskin, atol=1e-10)


def test_projection_and_compat_mask():
    W = torch.randn(5, 2, 2, 2, dtype=DT) * 10
    P = fermi.project_frobenius(W, 1.5)
    assert (torch.linalg.matrix_norm(P) <= 1.5 + 1e-12).all()
    small = torch.full((2, 2), 0.1, dtype=DT).view(1, 2, 2)
    assert torch.equal(fermi.project_frobenius(small, 1.5), small)
    mask = fermi.w_mask(2, 2, compat_refcode=True)
    assert mask.sum() == 1 and mask[0, 1] == 1
    # the masked k x l form is the ref-code's 1 x 1 regulariser -w^2 F1 + 2 w F1 1{s=0}/sqrt(p0) - 1
    F, s, _, z = _toy()
    S, Zs = fermi.onehot(s, 2, F.dtype), fermi.onehot(z, 1, F.dtype)
    ip = fermi.strata_inv_sqrt_p(s, z, 2, 1)
    w = 0.7
    Wm = torch.zeros(1, 2, 2, dtype=DT)
    Wm[0, 0, 1] = w
    ref = -(w**2) * F[:, 1] + 2 * w * F[:, 1] * (s == 0) * ip[0, 0] - 1
    assert torch.allclose(fermi.psi(F, S, Zs, Wm, ip), ref, atol=1e-12)


def test_empty_group_raises():
    with pytest.raises(ValueError, match="every sensitive group"):
        fermi.strata_inv_sqrt_p(torch.zeros(5, dtype=torch.long), torch.zeros(5, dtype=torch.long), 2, 1)


def test_lemma_c4_exact():
    """E||mean of a uniform m-subset||^2 = (n-m)/((n-1)m) (1/n) sum ||a_l||^2 when sum a_l = 0."""
    g = torch.Generator().manual_seed(1)
    n = 7
    a = torch.randn(n, 3, generator=g, dtype=DT)
    a = a - a.mean(0)
    for m in range(1, n + 1):
        subsets = list(itertools.combinations(range(n), m))
        lhs = sum(a[list(c)].mean(0).square().sum() for c in subsets) / len(subsets)
        rhs = (n - m) / ((n - 1) * m) * a.square().sum() / n
        assert lhs.item() == pytest.approx(rhs.item(), abs=1e-12)
        assert lhs.item() <= (m < n) / (m * n) * a.square().sum().item() + 1e-12
