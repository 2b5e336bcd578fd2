import math

import pytest
import torch

from fedrepro.fl.transport import Wire
from fedrepro.privacy.mechanisms import clip_by_norm, clip_scalar, gaussian_noise


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


def test_clipped_rows_bound_the_fedsc_outer_product():
    mu = 4.0
    z = torch.randn(50, 8, generator=_gen(2)) * 5
    zc = clip_by_norm(z, math.sqrt(mu), dim=1)
    assert torch.all((zc**2).sum(1) <= mu * (1 + 1e-5))
    outer = torch.einsum("ni,nj->nij", zc, zc)
    # ||z z^T||_F = ||z||^2 <= mu: one sample moves FedSC's correlation matrix by <= mu / |D_j|
    assert torch.allclose(outer.flatten(1).norm(dim=1), (zc**2).sum(1), rtol=1e-5)
    # against an independent float64 computation of z min(1, c / ||z||)
    z64 = z.double()
    ref = z64 * torch.clamp(math.sqrt(mu) / z64.norm(dim=1, keepdim=True), max=1.0)
    assert torch.allclose(zc.double(), ref, atol=1e-5)


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
    # DPZV's sensitivity: replace one sample, the clipped batch mean moves <= 2C/B
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
    # E||N||_F^2 = H^2 sigma^2 (FedSC's noise term H^2 sigma^2 in Theorem 6.10)
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


# ---------------------------------------------------------------- what crosses the wire
# A DP-SGD style client (per-sample clipping, mean over a fixed batch size, one Gaussian draw per
# round) built from the shared mechanisms, sending through fl.transport.Wire. The tests look only at
# what the server received and what the wire logged.

CLIP, SIGMA, BATCH, DIM = 1.0, 0.3, 16, 32


def _client_round(wire, grads, gen, round_):
    wire.round = round_
    update = clip_by_norm(grads, CLIP, dim=1).sum(0) / BATCH + gaussian_noise((DIM,), SIGMA, gen)
    return wire.send("client0", "server", "update", {"update": update})


def _run(rounds=400):
    data, noise = _gen(20), _gen(21)
    wire, received, clean = Wire(), [], []
    for t in range(rounds):
        grads = torch.randn(BATCH, DIM, generator=data, dtype=torch.float64).float() * 3
        received.append(_client_round(wire, grads, noise, t)["update"])
        # independent float64 reference of the noiseless release
        g = grads.double()
        clean.append((g * torch.clamp(CLIP / g.norm(dim=1, keepdim=True), max=1.0)).sum(0) / BATCH)
    return wire, torch.stack(received).double(), torch.stack(clean)


def test_noise_that_crosses_the_wire_has_the_configured_std_and_is_fresh_every_round():
    _, received, clean = _run()
    noise = received - clean
    assert noise.std().item() == pytest.approx(SIGMA, rel=0.03)  # no noise, or the wrong scale, fails
    assert abs(noise.mean().item()) < 4 * SIGMA / math.sqrt(noise.numel())
    # fresh draw every round: consecutive rounds are uncorrelated and never equal
    corr = torch.corrcoef(torch.stack([noise[:-1].flatten(), noise[1:].flatten()]))[0, 1].item()
    assert abs(corr) < 0.05
    assert len({tuple(n.tolist()) for n in noise}) == len(noise)


def test_what_leaves_the_client_is_clipped():
    _, received, clean = _run(50)
    # the noiseless part of every release is the clipped mean: its norm is at most CLIP
    assert torch.all(clean.norm(dim=1) <= CLIP + 1e-9)
    # and the server saw exactly that plus noise: without clipping (grads of norm ~17) the
    # residual would be far above the noise's scale
    assert ((received - clean).norm(dim=1) < SIGMA * (math.sqrt(DIM) + 6)).all()


def test_wire_logs_every_tensor_and_hands_over_a_detached_copy():
    wire, received, _ = _run(5)
    ups = [m for m in wire.messages if m.receiver == "server"]
    assert [m.round for m in ups] == list(range(5)) and {m.kind for m in ups} == {"update"}
    assert all(m.numel == DIM and m.nbytes == 4 * DIM for m in ups)  # nothing else left the client
    # an extra tensor under the allowed message kind shows in the log
    extra = Wire()
    extra.send("client0", "server", "update", {"update": torch.zeros(DIM), "labels": torch.zeros(3, dtype=torch.long)})
    assert extra.messages[0].numel == DIM + 3 and extra.messages[0].nbytes == 4 * DIM + 8 * 3
    nested = Wire()
    nested.send("client0", "server", "update", {"update": [torch.zeros(DIM), {"more": torch.zeros(2, 2)}]})
    assert nested.messages[0].numel == DIM + 4
    assert extra.bytes_by_direction == {"up": 4 * DIM + 24, "down": 0}
    # the receiver gets a copy without the client's graph: changing it changes nothing at the client
    mine = torch.ones(DIM, requires_grad=True) * 2
    got = Wire().send("client0", "server", "update", mine)
    assert not got.requires_grad
    got.add_(1.0)
    assert torch.equal(mine.detach(), torch.full((DIM,), 2.0))
    # anything that is not a tensor or a number cannot cross
    with pytest.raises(TypeError, match="cannot send"):
        Wire().send("client0", "server", "update", {"update": _gen(0)})
