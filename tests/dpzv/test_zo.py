"""Zeroth-order estimator and in-place perturbation: the direction sampler, Lemma A.6 on known functions,
the MeZO in-place sequence and regenerated directions (eq. 9 reuses the client's u)."""

import math

import pytest
import torch

from fedrepro.algorithms.dpzv.zo import Direction, ZOUpdater, fd_divisor, sample_sphere, two_point_estimate


def gen(seed=0):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def test_sphere_sampler_moments():
    d, n = 5, 400_000
    u = sample_sphere(n, d, gen())
    assert torch.allclose((u * u).sum(1), torch.full((n,), float(d), dtype=u.dtype))  # ||u||^2 = d exactly
    assert u.mean(0).abs().max() < 0.01
    cov = u.T @ u / n
    assert torch.allclose(cov, torch.eye(d, dtype=u.dtype), atol=0.01)
    fourth = (u**4).mean(0)
    assert torch.allclose(fourth, torch.full((d,), 3 * d / (d + 2), dtype=u.dtype), atol=0.02)


def test_quadratic_directional_derivative_is_exact_and_eq7_doubles_it():
    g = gen(1)
    d = 6
    a = torch.randn(d, d, generator=g, dtype=torch.float64)
    a = a @ a.T
    b = torch.randn(d, generator=g, dtype=torch.float64)
    w = torch.randn(d, generator=g, dtype=torch.float64)
    f = lambda x: 0.5 * ((x @ a) * x).sum(-1) + x @ b  # noqa: E731
    grad = a @ w + b
    u = sample_sphere(50, d, g)
    est = two_point_estimate(f, w, u, 0.3, "2lambda")
    assert torch.allclose(est, (u @ grad).unsqueeze(1) * u, atol=1e-9)
    est7 = two_point_estimate(f, w, u, 0.3, "lambda")
    assert torch.allclose(est7, 2 * est, atol=1e-9)
    # E ||g||^2 = d ||grad f||^2 for a quadratic
    many = two_point_estimate(f, w, sample_sphere(200_000, d, g), 0.3, "2lambda")
    assert (many**2).sum(1).mean().item() == pytest.approx(d * grad.square().sum().item(), rel=0.02)
    assert torch.allclose(many.mean(0), grad, atol=0.05 * grad.abs().max().item())


def test_cubic_estimator_is_biased_as_lemma_a6_predicts():
    d, lam = 5, 0.3
    w = torch.tensor([0.5, -1.0, 0.2, 1.5, -0.3], dtype=torch.float64)
    f = lambda x: (x**3).sum(-1)  # noqa: E731
    est = two_point_estimate(f, w, sample_sphere(400_000, d, gen(2)), lam, "2lambda").mean(0)
    expected = 3 * w**2 + 3 * lam**2 * d / (d + 2)
    assert torch.allclose(est, expected, atol=0.02)
    assert not torch.allclose(est, 3 * w**2, atol=0.02)  # the smoothing bias is visible


def test_fd_divisor_rejects_bad_values():
    assert fd_divisor(1e-3, "lambda") == 1e-3
    assert fd_divisor(1e-3, "2lambda") == 2e-3
    with pytest.raises(ValueError, match="fd_denominator"):
        fd_divisor(1e-3, "3lambda")


def small_params(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    return model, list(model.parameters())


@pytest.mark.parametrize("kind", ["sphere", "gaussian"])
def test_direction_regenerates_bit_identically_and_sphere_has_norm_sqrt_d(kind):
    _, params = small_params()
    a, b = Direction(params, 1234, kind), Direction(params, 1234, kind)
    for x, y in zip(a.tensors(), b.tensors()):
        assert torch.equal(x, y)
    norm2 = sum(float((t.double() ** 2).sum()) for t in a.tensors())
    if kind == "sphere":
        assert norm2 == pytest.approx(a.dim, rel=1e-5)
    assert not all(torch.equal(x, y) for x, y in zip(a.tensors(), Direction(params, 99, kind).tensors()))


def test_in_place_perturbation_restores_parameters():
    _, params = small_params()
    before = [p.detach().clone() for p in params]
    u = Direction(params, 7)
    u.add_(1e-3)
    assert not torch.equal(params[0], before[0])
    u.add_(-2e-3)
    u.add_(1e-3)
    for p, q in zip(params, before):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-8)


def assert_zo_updater_is_torch_sgd(params, twin_params):
    """Three ZOUpdater steps along seeded directions equal torch.optim.SGD (momentum 0.9) given the
    gradient coeff * u on an identical copy of the parameters."""
    sgd = torch.optim.SGD(twin_params, lr=0.1, momentum=0.9)
    updater = ZOUpdater(params, lr=0.1, momentum=0.9)
    for step, coeff in enumerate([0.5, -1.2, 2.0]):
        u = Direction(params, step)
        updater.step(u, coeff)
        for p, t in zip(twin_params, u.tensors()):
            p.grad = coeff * t
        sgd.step()
    for p, q in zip(params, twin_params):
        assert torch.allclose(p, q, atol=1e-6)


def test_zo_updater_matches_torch_sgd_with_gradient_coeff_times_u():
    assert_zo_updater_is_torch_sgd(small_params()[1], small_params()[1])


def test_zo_updater_without_momentum_keeps_no_buffer():
    _, params = small_params()
    updater = ZOUpdater(params, lr=0.1, momentum=0.0)
    updater.step(Direction(params, 3), 1.0)
    assert updater.buffers is None
    with pytest.raises(ValueError, match="zo_momentum"):
        ZOUpdater(params, lr=0.1, momentum=1.0)


def test_noise_part_of_update_has_second_moment_sigma2_d():
    # Lemma A.10: E||z u||^2 = sigma^2 d for scalar z ~ N(0, sigma^2), ||u||^2 = d
    d, sigma = 8, 0.7
    g = gen(5)
    u = sample_sphere(100_000, d, g)
    z = sigma * torch.randn(100_000, 1, generator=g, dtype=torch.float64)
    assert ((z * u) ** 2).sum(1).mean().item() == pytest.approx(sigma**2 * d, rel=0.02)
    assert math.isfinite(sigma)
