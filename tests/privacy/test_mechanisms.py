import math

import pytest
import torch

from fedrepro.privacy.mechanisms import (
    GaussianMechanism,
    clip_by_norm,
    clip_scalar,
    gaussian_noise,
    normclip_rows,
)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_clip_by_norm_bounds_rows_and_keeps_small_rows():
    x = torch.randn(200, 16, generator=_gen(1)) * 3
    x[0] = 0.0
    x[1] = x[1] / x[1].norm() * 0.5  # already inside the ball
    c = 2.0
    y = clip_by_norm(x, c, dim=1)
    norms = y.norm(dim=1)
    assert torch.all(norms <= c * (1 + 1e-6))
    assert torch.equal(y[0], x[0])
    assert torch.allclose(y[1], x[1])
    big = x.norm(dim=1) > c
    assert torch.allclose(norms[big], torch.full_like(norms[big], c), atol=1e-5)
    # direction preserved
    cos = torch.nn.functional.cosine_similarity(x[big], y[big], dim=1)
    assert torch.allclose(cos, torch.ones_like(cos), atol=1e-5)


def test_normclip_rows_matches_fedsc_bound_and_rejects_3d():
    mu = 4.0
    z = torch.randn(50, 8, generator=_gen(2)) * 5
    zc = normclip_rows(z, math.sqrt(mu))
    assert torch.all((zc**2).sum(1) <= mu * (1 + 1e-5))
    outer = torch.einsum("ni,nj->nij", zc, zc)
    # ||z z^T||_F = ||z||^2 <= mu (FedSC spec §5 item 8)
    assert torch.allclose(outer.flatten(1).norm(dim=1), (zc**2).sum(1), rtol=1e-5)
    with pytest.raises(ValueError, match="normclip_rows"):
        normclip_rows(torch.zeros(2, 3, 4), 1.0)


def test_clip_by_norm_inf_and_bad_c():
    x = torch.randn(4, 3, generator=_gen(3)) * 100
    assert torch.equal(clip_by_norm(x, math.inf), x)
    with pytest.raises(ValueError, match="clip norm"):
        clip_by_norm(x, -1.0)


def test_clip_scalar_two_sided_and_one_sided():
    x = torch.tensor([-50.0, -3.0, 0.5, 7.0, 20.0])
    assert torch.equal(clip_scalar(x, 5.0), torch.tensor([-5.0, -3.0, 0.5, 5.0, 5.0]))
    one = clip_scalar(x, 5.0, two_sided=False)
    assert torch.equal(one, torch.tensor([-50.0, -3.0, 0.5, 5.0, 5.0]))


def test_scalar_mean_sensitivity_is_2c_over_b():
    # DPZV spec §5 item 7: replace one sample, the clipped batch mean moves <= 2C/B
    c, b = 10.0, 16
    g = _gen(4)
    for _ in range(50):
        d = torch.randn(b, generator=g) * 30
        d2 = d.clone()
        d2[3] = torch.randn((), generator=g) * 30
        diff = (clip_scalar(d, c).mean() - clip_scalar(d2, c).mean()).abs()
        assert diff <= 2 * c / b + 1e-6
    worst = clip_scalar(torch.tensor([1e6]), c) - clip_scalar(torch.tensor([-1e6]), c)
    assert worst.item() == pytest.approx(2 * c)
    # one-sided clipping does not bound it
    one = clip_scalar(torch.tensor([1e6]), c, False) - clip_scalar(torch.tensor([-1e6]), c, False)
    assert one.item() > 2 * c


def test_gaussian_noise_is_reproducible_and_has_right_scale():
    a = gaussian_noise((64, 64), 0.5, _gen(7))
    b = gaussian_noise((64, 64), 0.5, _gen(7))
    c = gaussian_noise((64, 64), 0.5, _gen(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # E||N||_F^2 = H^2 sigma^2 (FedSC spec §5 item 10)
    assert (a**2).sum().item() == pytest.approx(64 * 64 * 0.25, rel=0.05)
    assert abs(a.mean().item()) < 0.03


def test_gaussian_noise_zero_sigma_and_errors():
    g = _gen(9)
    state = g.get_state()
    z = gaussian_noise((3, 2), 0.0, g, dtype=torch.float64)
    assert torch.equal(z, torch.zeros(3, 2, dtype=torch.float64))
    assert torch.equal(g.get_state(), state)  # no random numbers consumed
    with pytest.raises(TypeError, match="Generator"):
        gaussian_noise((2,), 1.0, None)
    with pytest.raises(ValueError, match="sigma"):
        gaussian_noise((2,), -1.0, g)


def test_gaussian_mechanism_scalar_records_dpzv_quantities():
    mech = GaussianMechanism(clip=10.0, sigma=0.7, divisor=64, scalar=True)
    assert mech.sensitivity == pytest.approx(2 * 10 / 64)
    assert mech.noise_multiplier == pytest.approx(0.7 * 64 / 20)
    deltas = torch.linspace(-40, 40, 64)
    out1 = mech.release(deltas, _gen(11))
    out2 = mech.release(deltas, _gen(11))
    assert out1.shape == ()
    assert torch.equal(out1, out2)
    expected = clip_scalar(deltas, 10.0).sum() / 64 + gaussian_noise((), 0.7, _gen(11))
    assert torch.allclose(out1, expected)
    rec = mech.record()
    assert rec["releases"] == 2 and rec["sigma"] == 0.7


def test_gaussian_mechanism_vectors_noiseless_and_add_remove():
    mech = GaussianMechanism(clip=1.0, sigma=0.0, divisor=4, replace_one=False)
    grads = torch.randn(4, 3, 2, generator=_gen(12)) * 10
    out = mech.release(grads, _gen(0))
    expected = clip_by_norm(grads.reshape(4, -1), 1.0, dim=1).reshape(4, 3, 2).sum(0) / 4
    assert torch.allclose(out, expected)
    assert mech.sensitivity == pytest.approx(0.25)
    assert mech.noise_multiplier == 0.0
    assert GaussianMechanism(clip=0.0, sigma=1.0).noise_multiplier == math.inf
    with pytest.raises(ValueError, match="divisor"):
        GaussianMechanism(clip=1.0, sigma=1.0, divisor=0)
