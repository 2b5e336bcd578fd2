"""The SC objective's identities on fixed views: Eq. 1 (App. A), Eqs. 4 and 6, the FedAvg gap (Eq. 3),
the reductions alpha = 1 and J = 1, and the mini-batch estimators of Section 5.2."""

import pytest
import torch

from fedrepro.algorithms.fedsc import loss as L
from fedrepro.privacy.mechanisms import normclip

pytestmark = pytest.mark.usefixtures("float64")


def _toy(n_per_client=(7, 4, 9), dim_in=5, hidden=4, two_v=4, seed=0):
    """A tanh encoder and fixed augmented inputs for 3 non-i.i.d. clients (a toy model small enough for exact checks)."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(hidden, dim_in, generator=g, dtype=torch.float64, requires_grad=True)
    inputs = [
        torch.randn(two_v, n, dim_in, generator=g, dtype=torch.float64) + 2.0 * j for j, n in enumerate(n_per_client)
    ]
    return weight, inputs


def _encode(weight, x):
    return torch.tanh(x @ weight.T)


def test_matrix_form_equals_pairwise_form():
    _, inputs = _toy()
    weight = torch.randn(4, 5, dtype=torch.float64)
    views = _encode(weight, inputs[0])
    assert torch.allclose(L.sc_loss_matrix(views), L.sc_loss_pairwise(views), atol=1e-12)
    r_plus, _ = L.correlations(views)
    assert torch.allclose(torch.trace(r_plus), L.positive_trace(views), atol=1e-12)


def test_decomposition_eq4_is_exact():
    weight, inputs = _toy()
    client_views = [_encode(weight, x) for x in inputs]
    n = [v.shape[1] for v in client_views]
    q = [k / sum(n) for k in n]
    union = torch.cat(client_views, dim=1)
    assert torch.allclose(L.sc_loss_matrix(union), L.decomposed_global_loss(client_views, q), atol=1e-12)


def _aligned_gradient(weight, inputs, alpha_of, keep_half=False):
    """sum_j q_j grad L_j(theta; R_-j(theta).detach()) with the given alpha_j."""
    views = [_encode(weight, x) for x in inputs]
    n = [v.shape[1] for v in views]
    q = [k / sum(n) for k in n]
    rs = [L.correlations(v)[1].detach() for v in views]
    total = 0.0
    for j, v in enumerate(views):
        r_minus = L.leave_one_out(rs, q, j)
        alpha = alpha_of(q[j])
        local = L.local_loss(v, alpha=alpha, r_minus=r_minus, scale=1.0)
        if keep_half:  # the variant without removing the 1/2 of Eq. 4's third term
            r = L.correlations(v)[1]
            local = local - 0.5 * (1 - alpha) * (r * r_minus).sum()
        total = total + q[j] * local
    return torch.autograd.grad(total, weight)[0]


def test_gradient_alignment_eq6_holds_only_with_alpha_q():
    weight, inputs = _toy()
    union = torch.cat([_encode(weight, x) for x in inputs], dim=1)
    global_grad = torch.autograd.grad(L.sc_loss_matrix(union), weight)[0]
    assert torch.allclose(_aligned_gradient(weight, inputs, lambda q: q), global_grad, atol=1e-10)
    assert not torch.allclose(_aligned_gradient(weight, inputs, lambda q: q, keep_half=True), global_grad, atol=1e-4)
    assert not torch.allclose(_aligned_gradient(weight, inputs, lambda q: 0.5), global_grad, atol=1e-4)


def test_gradient_alignment_with_finite_differences():
    weight, inputs = _toy()

    def global_loss(w):
        return L.sc_loss_matrix(torch.cat([_encode(w, x) for x in inputs], dim=1))

    grad = _aligned_gradient(weight, inputs, lambda q: q)
    eps = 1e-6
    direction = torch.randn_like(weight)
    fd = (global_loss(weight + eps * direction) - global_loss(weight - eps * direction)) / (2 * eps)
    assert abs(float((grad * direction).sum()) - float(fd.detach())) < 1e-7


def test_fedavg_gap_identity_and_misaligned_gradient():
    weight, inputs = _toy()
    views = [_encode(weight, x) for x in inputs]
    n = [v.shape[1] for v in views]
    q = [k / sum(n) for k in n]
    local_sum = sum(qj * L.sc_loss_matrix(v) for qj, v in zip(q, views))
    gap = L.fedavg_gap(views, q)
    global_loss = L.sc_loss_matrix(torch.cat(views, dim=1))
    assert torch.allclose(local_sum - global_loss, gap, atol=1e-12)
    assert gap > 1e-3
    g_fedavg = torch.autograd.grad(local_sum, weight, retain_graph=True)[0]
    g_global = torch.autograd.grad(global_loss, weight)[0]
    assert (g_fedavg - g_global).norm() > 1e-3


def test_fedavg_gap_vanishes_for_identical_clients():
    weight, inputs = _toy(n_per_client=(6,))
    v = _encode(weight, inputs[0])
    views = [v, v.clone(), v.clone()]
    assert float(L.fedavg_gap(views, [1 / 3] * 3).detach()) == pytest.approx(0.0, abs=1e-14)


def test_alpha_one_is_local_sc_and_ignores_r_minus():
    _, inputs = _toy()
    views = _encode(torch.randn(4, 5, dtype=torch.float64), inputs[0])
    r_minus = torch.randn(4, 4, dtype=torch.float64)
    plain = L.local_loss(views, scale=1.0)
    assert torch.allclose(L.local_loss(views, alpha=1.0, r_minus=r_minus, scale=1.0), plain)
    assert torch.allclose(plain, L.sc_loss_matrix(views))


def test_code_form_is_twice_eq5():
    """The official code's loss: -(2/B) sum z1.z0 + a||R||^2 + 2(1-a) Tr(R R_-j), two views."""
    g = torch.Generator().manual_seed(3)
    z0, z1 = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    r_minus = torch.randn(4, 4, generator=g)
    r_minus = r_minus @ r_minus.T
    alpha = 0.3
    big_z = torch.cat([z1, z0])
    r = big_z.T @ big_z / 12
    code = -(2 / 6) * (z1 * z0).sum() + alpha * (r * r).sum() + 2 * (1 - alpha) * torch.trace(r @ r_minus)
    ours = L.local_loss(torch.stack([z0, z1]), alpha=alpha, r_minus=r_minus, scale=2.0)
    assert torch.allclose(code, ours, atol=1e-12)


def test_estimators_symmetric_psd_and_unbiased():
    g = torch.Generator().manual_seed(1)
    population = torch.randn(2, 40, 3, generator=g)  # 2 views of 40 samples
    r_plus_pop, r_pop = L.correlations(population)
    assert torch.allclose(r_plus_pop, r_plus_pop.T)
    assert torch.linalg.eigvalsh(r_pop).min() > -1e-12
    mean_plus, mean_r, reps = 0.0, 0.0, 4000
    for _ in range(reps):
        idx = torch.randint(0, 40, (5,), generator=g)
        rp, r = L.correlations(population[:, idx])
        mean_plus, mean_r = mean_plus + rp / reps, mean_r + r / reps
    assert torch.allclose(mean_plus, r_plus_pop, atol=0.05)
    assert torch.allclose(mean_r, r_pop, atol=0.05)


def test_normclip_bounds():
    g = torch.Generator().manual_seed(2)
    z = torch.randn(100, 8, generator=g) * 3
    mu = 2.0
    clipped = normclip(z, mu)
    assert (clipped.norm(dim=1) ** 2 <= mu + 1e-9).all()
    inside = z.norm(dim=1) ** 2 < mu
    assert torch.equal(clipped[inside], z[inside])
    outer = torch.einsum("ni,nj->nij", clipped, clipped)
    assert (outer.flatten(1).norm(dim=1) <= mu + 1e-9).all()  # ||z z^T||_F = ||z||^2 <= mu
    _, r = L.correlations(clipped.view(2, 50, 8))
    assert float((r * r).sum()) <= mu**2 + 1e-9  # Lemma B.4 with A_0^2 = mu
    with pytest.raises(ValueError, match="mu"):
        normclip(z, 0.0)


def test_alpha_schedule_is_linear_from_one_to_point_two():
    assert L.alpha_schedule(1, 200) == 1.0
    assert L.alpha_schedule(200, 200) == pytest.approx(0.204)
    values = [L.alpha_schedule(t, 10) for t in range(1, 11)]
    steps = {round(a - b, 12) for a, b in zip(values, values[1:])}
    assert steps == {0.08}
    with pytest.raises(ValueError):
        L.alpha_schedule(0, 10)
