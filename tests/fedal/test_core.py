"""The checkable properties of FedAL's building blocks: eqs. (2)-(12), (19), Sec. V and its proofs (Sec. VIII)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from fedrepro.algorithms.fedal.discriminator import Discriminator, discriminator_loss, payoff_grads, payoffs
from fedrepro.algorithms.fedal.kd import (
    kl_to_logits,
    kl_to_probs,
    leave_one_out,
    less_forgetting,
    non_target_kl,
    surrogate_from_grad,
    tempered_softmax,
)

pytestmark = pytest.mark.usefixtures("float64")


def test_tempered_softmax_rows_sum_to_one_and_flatten_with_temperature():
    f = torch.randn(6, 10, generator=torch.Generator().manual_seed(0)) * 3
    p1 = tempered_softmax(f, 1.0)
    torch.testing.assert_close(p1, torch.softmax(f, -1))
    torch.testing.assert_close(p1.sum(-1), torch.ones(6))
    entropy = lambda p: -(p * p.log()).sum(-1)  # noqa: E731
    h1, h2, h8 = (entropy(tempered_softmax(f, e)) for e in (1.0, 2.0, 8.0))
    assert (h2 > h1).all() and (h8 > h2).all()
    with pytest.raises(ValueError, match="temperature"):
        tempered_softmax(f, 0.0)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_kd_gradient_is_softmax_minus_target_over_temperature(temperature):
    gen = torch.Generator().manual_seed(1)
    f = torch.randn(5, 7, generator=gen, requires_grad=True)
    target = torch.softmax(torch.randn(5, 7, generator=gen), -1)
    kl_to_probs(target, f, temperature).backward()
    expected = (torch.softmax(f.detach() / temperature, -1) - target) / temperature / 5  # batchmean
    torch.testing.assert_close(f.grad, expected)


def test_kl_is_teacher_first_and_zero_for_identical_inputs():
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(4, 5, generator=gen), torch.randn(4, 5, generator=gen)
    pa, pb = torch.softmax(a, -1), torch.softmax(b, -1)
    manual = (pa * (pa.log() - pb.log())).sum(-1).mean()
    torch.testing.assert_close(kl_to_logits(a, b), manual)
    assert float(kl_to_logits(a, a)) == pytest.approx(0.0, abs=1e-12)


def test_leave_one_out_recovers_mean_of_others():
    logits = torch.randn(5, 3, 4, generator=torch.Generator().manual_seed(3))
    mean = logits.mean(0)
    for n in range(5):
        others = torch.cat([logits[:n], logits[n + 1 :]]).mean(0)
        torch.testing.assert_close(leave_one_out(mean, logits[n], 5), others)
    with pytest.raises(ValueError, match="at least 2"):
        leave_one_out(mean, logits[0], 1)


def _tiny_net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))


def test_less_forgetting_is_zero_with_zero_gradient_at_its_anchor_and_positive_after_a_step():
    net = _tiny_net(0)
    anchor = _tiny_net(0)
    anchor.load_state_dict(net.state_dict())
    x = torch.randn(16, 6, generator=torch.Generator().manual_seed(4))
    y = torch.randint(0, 4, (16,), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = anchor(x)
    r = less_forgetting(ref, net(x))
    grads = torch.autograd.grad(r, list(net.parameters()))
    assert abs(float(r.detach())) < 1e-12
    assert max(float(g.abs().max()) for g in grads) < 1e-7
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
    assert float(less_forgetting(ref, net(x)).detach()) > 1e-6


def test_split_gradient_equals_end_to_end_autograd():
    """(19): J^T dU_n/df_n from the server equals autograd through D o softmax o f_n."""
    gen = torch.Generator().manual_seed(6)
    k, n_players, batch = 5, 3, 7
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 9), nn.Tanh(), nn.Linear(9, k))
    disc = Discriminator(k, n_players)
    x = torch.randn(batch, 4, generator=gen)
    others = torch.randn(n_players, batch, k, generator=gen)
    me, temperature = 1, 2.0

    f = model(x)
    stacked = others.clone()
    stacked[me] = f.detach()
    grads, _ = payoff_grads(disc, stacked, temperature)  # the server's side
    split = torch.autograd.grad(surrogate_from_grad(f, grads[me]), list(model.parameters()))

    f2 = model(x)
    probs = torch.softmax(torch.cat([others[:me], f2[None], others[me + 1 :]]) / temperature, -1)
    u_me = payoffs(disc, probs)[me].mean()
    direct = torch.autograd.grad(u_me, list(model.parameters()))
    for a, b in zip(split, direct):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


class _Table(nn.Module):
    """A discriminator that reads a one-hot symbol and returns that symbol's row of a free table:
    the tabular discriminator of Lemma IV.2, plugged into the project's `payoffs`."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = nn.Parameter(table.clone())

    def forward(self, onehot: torch.Tensor) -> torch.Tensor:
        return onehot @ self.table


def _all_symbols(n_players: int, k: int) -> torch.Tensor:
    """(N, K, K): every player emits every one-hot symbol once (weights are applied outside)."""
    return torch.eye(k).expand(n_players, k, k)


def test_payoff_gradient_wrt_discriminator_logits_is_onehot_minus_softmax():
    """(74)-(75): dU_n/dh = e_n - softmax(h), through the project's `payoffs`."""
    n_players, k = 4, 3
    h = torch.randn(k, n_players, generator=torch.Generator().manual_seed(7))
    disc = _Table(h)
    u = payoffs(disc, _all_symbols(n_players, k))  # (N, K): U_n on symbol k
    n = 2
    (grad,) = torch.autograd.grad(u[n].sum(), disc.table)  # row k of the table is h(e_k)
    expected = torch.nn.functional.one_hot(torch.tensor([n] * k), n_players) - torch.softmax(h, -1)
    torch.testing.assert_close(grad, expected.to(h.dtype))


def test_proposition_viii_1_weighted_log_maximiser_is_normalised_weights():
    """max_z sum_n a_n log softmax(z)_n = a / sum(a): reached by the project's KL and Adam."""
    from fedrepro.fl.optim import Adam

    a = torch.tensor([0.5, 2.0, 1.0, 0.25])
    z = torch.zeros(1, 4, requires_grad=True)
    opt = Adam([z], lr=0.05)
    for _ in range(3000):
        opt.zero_grad()
        kl_to_probs((a / a.sum())[None], z).backward()  # = -(sum a log softmax z)/sum a + const
        opt.step()
    torch.testing.assert_close(torch.softmax(z, -1)[0].detach(), a / a.sum(), atol=1e-3, rtol=0)


def test_tabular_discriminator_best_response_is_p_n_over_sum_p():
    """Lemma IV.2 on a discrete input space, the server's objective (8) through `payoffs`."""
    gen = torch.Generator().manual_seed(8)
    n_players, k = 3, 5
    p = torch.softmax(torch.randn(n_players, k, generator=gen), -1)  # client n emits k w.p. p_n(k)
    disc = _Table(torch.zeros(k, n_players))
    opt = torch.optim.Adam(disc.parameters(), lr=0.05)
    symbols = _all_symbols(n_players, k)
    for _ in range(3000):
        opt.zero_grad()
        (-(p * payoffs(disc, symbols)).sum() / n_players).backward()  # expected over x ~ p_n
        opt.step()
    best = (p / p.sum(0, keepdim=True)).T
    torch.testing.assert_close(torch.softmax(disc.table, -1).detach(), best, atol=2e-3, rtol=0)


def test_mlp_discriminator_at_equilibrium_reaches_log_n_and_uniform_posterior():
    """Theorem IV.4: identical client outputs -> CE = log N, posterior 1/N."""
    torch.manual_seed(0)
    n_players, k, batch = 4, 6, 64
    disc = Discriminator(k, n_players)
    opt = torch.optim.Adam(disc.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(9)
    for _ in range(300):
        p = torch.softmax(torch.randn(batch, k, generator=gen), -1)
        probs = p.expand(n_players, batch, k)
        loss = discriminator_loss(disc, probs)
        opt.zero_grad()
        loss.backward()
        opt.step()
    p = torch.softmax(torch.randn(256, k, generator=gen), -1)
    final = float(discriminator_loss(disc, p.expand(n_players, 256, k)).detach())
    assert final == pytest.approx(math.log(n_players), abs=1e-2)
    post = torch.softmax(disc(p), -1)
    torch.testing.assert_close(post, torch.full_like(post, 1 / n_players), atol=3e-2, rtol=0)


def test_identity_43_optimal_discriminator_value():
    """(43): sum_n E_{p_n} log D*_n = sum_n KL(p_n || mean p) - N log N, with D* in `payoffs`."""
    gen = torch.Generator().manual_seed(10)
    n_players, k = 5, 7
    p = torch.softmax(torch.randn(n_players, k, generator=gen) * 2, -1)
    d_star = p / p.sum(0, keepdim=True)
    u = payoffs(_Table(d_star.T.log()), _all_symbols(n_players, k))  # log D*_n(k)
    lhs = (p * u).sum()
    mix = p.mean(0)
    rhs = sum(kl_to_probs(p[n][None], mix.log()[None]) for n in range(n_players)) - n_players * math.log(n_players)
    torch.testing.assert_close(lhs, rhs)
    same = mix.expand(n_players, k)
    at_eq = (same * payoffs(_Table((same / same.sum(0, keepdim=True)).T.log()), _all_symbols(n_players, k))).sum()
    assert float(at_eq.detach()) == pytest.approx(-n_players * math.log(n_players))


def test_client_best_response_is_the_mean_of_the_others():
    """Lemma IV.3: with p_n = mean of the others, d/dz_n sum_m KL(p_m || p_tilde) = 0; and the
    client's KD term toward the project's leave-one-out target is stationary exactly there."""
    gen = torch.Generator().manual_seed(11)
    n_players, k = 4, 6
    others = torch.softmax(torch.randn(n_players - 1, k, generator=gen), -1)
    z = others.mean(0).log().clone().requires_grad_(True)

    def value(z):
        p = torch.cat([others, torch.softmax(z, -1)[None]])
        mix = p.mean(0)
        return sum(kl_to_probs(p[m][None], mix.log()[None]) for m in range(n_players))

    (g,) = torch.autograd.grad(value(z), z)
    assert float(g.abs().max()) < 1e-10
    z_off = (z.detach() + torch.randn(k, generator=gen)).requires_grad_(True)
    assert float(value(z_off).detach()) > float(value(z).detach()) + 1e-6
    # the same best response through the client's loss: KD toward leave_one_out(mean, own, N)
    logits = torch.randn(n_players - 1, 2, k, generator=gen)
    upload = torch.randn(2, k, generator=gen)  # what client n sent this iteration
    target = leave_one_out(torch.cat([logits, upload[None]]).mean(0), upload, n_players)
    best = logits.mean(0).clone().requires_grad_(True)
    (g,) = torch.autograd.grad(kl_to_logits(target, best), best)
    assert float(g.abs().max()) < 1e-12
    elsewhere = upload.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(kl_to_logits(target, elsewhere), elsewhere)
    assert float(g.abs().max()) > 1e-3


def test_pinsker_inequality_standard_form():
    """||p - q||_1 <= sqrt(2 KL(p || q)) with the project's KL (the paper's bound between KL and L1)."""
    gen = torch.Generator().manual_seed(12)
    for _ in range(50):
        a, b = torch.randn(1, 8, generator=gen) * 3, torch.randn(1, 8, generator=gen) * 3
        kl = kl_to_logits(a, b)
        p, q = torch.softmax(a, -1), torch.softmax(b, -1)
        assert float((p - q).abs().sum()) <= math.sqrt(2 * float(kl)) + 1e-12


def test_non_target_kl_sums_only_the_non_target_terms_of_the_full_softmax():
    gen = torch.Generator().manual_seed(13)
    t, s = torch.randn(5, 4, generator=gen), torch.randn(5, 4, generator=gen)
    y = torch.tensor([0, 1, 2, 3, 0])
    p, q = torch.softmax(t / 2.0, -1), torch.softmax(s / 2.0, -1)
    by_hand = sum(float(p[i, c] * (p[i, c].log() - q[i, c].log())) for i in range(5) for c in range(4) if c != y[i]) / 5
    assert float(non_target_kl(t, s, y, 2.0)) == pytest.approx(by_hand, rel=1e-6)
    assert float(non_target_kl(t, t, y)) == pytest.approx(0.0, abs=1e-12)


def test_dirichlet_partition_properties():
    """Sec. VI-A's Dirichlet split (q_n ~ Dir(alpha)) with a public set held out, on the shared partitioner
    (scheme `dirichlet`, option `public`)."""
    from fedrepro.data.partition import dirichlet_partition

    labels = np.repeat(np.arange(10), 300)
    a = dirichlet_partition(labels, alpha=1.0, clients=10, public=200, seed=3)
    b = dirichlet_partition(labels, alpha=1.0, clients=10, public=200, seed=3)
    for x, y in zip(a.clients, b.clients):
        np.testing.assert_array_equal(x, y)
    everything = np.concatenate(a.clients + [a.public])
    assert len(np.unique(everything)) == len(everything)  # each sample at most once
    assert len(a.public) == 200

    def mean_entropy(part):
        ent = []
        for idx in part.clients:
            h = np.bincount(labels[idx], minlength=10) / len(idx)
            ent.append(-(h[h > 0] * np.log(h[h > 0])).sum())
        return float(np.mean(ent))

    flat = dirichlet_partition(labels, alpha=1e6, clients=10, public=0, seed=3)
    skewed = dirichlet_partition(labels, alpha=0.1, clients=10, public=0, seed=3)
    assert mean_entropy(flat) > math.log(10) - 0.05
    assert mean_entropy(skewed) < mean_entropy(flat) - 0.5


def test_plain_adam_matches_torch_adam():
    from fedrepro.fl.optim import Adam

    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    b = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    b.load_state_dict(a.state_dict())
    ours, theirs = Adam(a.parameters(), lr=1e-2), torch.optim.Adam(b.parameters(), lr=1e-2)
    x = torch.randn(20, 5, generator=torch.Generator().manual_seed(1))
    for _ in range(30):
        for model, opt in ((a, ours), (b, theirs)):
            opt.zero_grad()
            (model(x) ** 2).mean().backward()
            opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-12)
    state = ours.state_dict()
    again = Adam(a.parameters(), lr=1e-2)
    again.load_state_dict(state)
    assert again.step_count == 30
