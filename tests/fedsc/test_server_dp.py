"""Server bookkeeping (Algorithm 1, lines 14-20), DP-CalR sensitivity (proof of Prop. 6.6) and the
noise moment E||N||_F^2 = H^2 sigma^2 of Theorem 6.10."""

import math

import numpy as np
import pytest
import torch

from fedrepro.algorithms.fedsc.server import CorrelationServer, client_leave_one_out
from fedrepro.privacy.fedsc import clipped_correlation, dp_calr


def _mats(j, h=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(h, h, generator=g) for _ in range(j)]


@pytest.mark.parametrize("q", [[0.25] * 4, [0.1, 0.2, 0.3, 0.4]])
def test_incremental_update_equals_direct_sum_under_partial_participation(q):
    server = CorrelationServer(q)
    for j, m in enumerate(_mats(4)):
        server.receive(j, m)
    rng = np.random.default_rng(0)
    for _ in range(30):
        for j in rng.choice(4, size=2, replace=False):
            server.receive(int(j), torch.randn(4, 4))
        assert torch.allclose(server.aggregate, server.direct_sum(), atol=1e-10)
    latest = server.latest
    expected = sum(q[j] * latest[j] for j in range(4))
    assert torch.allclose(server.broadcast().double(), expected, atol=1e-6)


def test_stale_matrices_are_kept():
    server = CorrelationServer([0.5, 0.5])
    a, b = _mats(2)
    server.receive(0, a)
    server.receive(1, b)
    server.receive(0, a * 2)
    assert torch.equal(server.latest[1], b.double())


def test_leave_one_out_is_mean_of_others_for_uniform_q():
    mats = _mats(5)
    server = CorrelationServer([0.2] * 5)
    for j, m in enumerate(mats):
        server.receive(j, m)
    for j in range(5):
        loo = client_leave_one_out(server.broadcast(), mats[j], 0.2)
        others = torch.stack([m for k, m in enumerate(mats) if k != j]).mean(0)
        assert torch.allclose(loo, others, atol=1e-6)


def test_weighted_leave_one_out():
    q = [0.1, 0.2, 0.7]
    mats = _mats(3)
    server = CorrelationServer(q)
    for j, m in enumerate(mats):
        server.receive(j, m)
    loo = client_leave_one_out(server.broadcast(), mats[2], q[2])
    assert torch.allclose(loo, (0.1 * mats[0] + 0.2 * mats[1]) / 0.3, atol=1e-6)


def test_broadcast_requires_every_client_first():
    server = CorrelationServer([0.5, 0.5])
    server.receive(0, torch.eye(2))
    with pytest.raises(RuntimeError, match="first sharing round"):
        server.broadcast()
    with pytest.raises(ValueError, match="sum to 1"):
        CorrelationServer([0.5, 0.6])


def _identity_view(x):
    return x


def test_dpcalr_sensitivity_replace_one():
    """||R(D) - R(D')||_F <= sqrt(2) mu/|D| for neighbouring datasets of equal size, mu/|D| vs a zero row."""
    g = torch.Generator().manual_seed(0)
    mu, n = 2.0, 20
    data = torch.randn(n, 6, generator=g) * 3
    worst = 0.0
    for _ in range(50):
        other = data.clone()
        other[0] = torch.randn(6, generator=g) * 3
        diff = clipped_correlation(_identity_view, data, _identity_view, mu, 1, 1) - clipped_correlation(
            _identity_view, other, _identity_view, mu, 1, 1
        )
        worst = max(worst, float(diff.norm()))
    assert worst <= math.sqrt(2) * mu / n + 1e-9
    # orthogonal clipped rows reach the sqrt(2) bound, so mu/|D| alone is not enough
    a = torch.zeros(n, 6)
    b = a.clone()
    a[0, 0], b[0, 1] = 10.0, 10.0
    diff = clipped_correlation(_identity_view, a, _identity_view, mu, 1, 1) - clipped_correlation(
        _identity_view, b, _identity_view, mu, 1, 1
    )
    assert float(diff.norm()) == pytest.approx(math.sqrt(2) * mu / n)
    zero = torch.zeros(n, 6)
    diff = clipped_correlation(_identity_view, a, _identity_view, mu, 1, 1) - clipped_correlation(
        _identity_view, zero, _identity_view, mu, 1, 1
    )
    assert float(diff.norm()) == pytest.approx(mu / n)


def test_dpcalr_views_and_normalisation():
    calls = []

    def view(x):
        calls.append(x.shape[0])
        return x

    data = torch.ones(10, 3)
    r = clipped_correlation(_identity_view, data, view, mu=None, passes=5, views_per_pass=2, batch_size=4)
    assert sum(calls) == 10 * 10  # every sample seen in 5 x 2 views
    assert torch.allclose(r, torch.ones(3, 3))


def test_dpcalr_noise_moment_and_seed():
    data = torch.zeros(8, 16)
    sigma = 0.5
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([dp_calr(_identity_view, data, _identity_view, 1.0, sigma, g, 1, 1) for _ in range(200)])
    mean_sq = float((draws**2).sum(dim=(1, 2)).mean())
    assert mean_sq == pytest.approx(16 * 16 * sigma**2, rel=0.05)  # E||N||_F^2 = H^2 sigma^2
    assert not torch.allclose(draws[0], draws[0].T)  # not symmetrised (as the paper)
    # leave-one-out over J-1 = 4 uniform clients: per-entry variance sigma^2/(J-1)
    loo = draws[:150].view(30, 5, 16, 16)[:, 1:].mean(1)
    assert float(loo.var()) == pytest.approx(sigma**2 / 4, rel=0.1)
    a = dp_calr(_identity_view, data, _identity_view, 1.0, sigma, torch.Generator().manual_seed(7), 1, 1)
    b = dp_calr(_identity_view, data, _identity_view, 1.0, sigma, torch.Generator().manual_seed(7), 1, 1)
    assert torch.equal(a, b)
    sym = dp_calr(_identity_view, data, _identity_view, 1.0, sigma, g, 1, 1, symmetrize_noise=True)
    assert torch.allclose(sym, sym.T)
