"""Each FedSC-paper method's defining mechanism, measured on what the real code does.

Every test here was checked against a deliberate break of the mechanism it names
(a dropped term, a removed noise or clip, the global target instead of the
leave-one-out one, a client that keeps the global model, ...): it fails then.
Expected values come from independent float64 computations of the papers' formulas.
"""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fedrepro.algorithms.fedsc import byol as byol_mod
from fedrepro.algorithms.fedsc import fedca as fedca_mod
from fedrepro.algorithms.fedsc import fedsc as sc_mod
from fedrepro.algorithms.fedsc import fedx as fedx_mod
from fedrepro.algorithms.fedsc.augment import augment
from fedrepro.algorithms.fedsc.byol import FedBYOL, FedEMA, FedU
from fedrepro.algorithms.fedsc.fedca import FedCA
from fedrepro.algorithms.fedsc.fedsc import FedSC
from fedrepro.algorithms.fedsc.fedx import FedX
from fedrepro.algorithms.fedsc.loss import AlphaTerms, alpha_schedule
from fedrepro.privacy.fedsc import clipped_correlation
from tests.fedsc.helpers import method_classes, tiny_spec

torch.set_num_threads(1)

CLASSES = method_classes()


def _spec(method, **over):
    spec = tiny_spec(**over)
    if method == "fedsc":
        spec.setdefault("sharing", None)
        if spec["sharing"] is None:
            spec["sharing"] = {"after": 0.0, "every": 1}
    return spec


def _clone(payload):
    if isinstance(payload, torch.Tensor):
        return payload.detach().clone()
    if isinstance(payload, dict):
        return {k: _clone(v) for k, v in payload.items()}
    return payload


def spy(algo) -> list[tuple]:
    """Record (round, sender, receiver, kind, payload) of every message the algorithm sends."""
    log, send = [], algo.wire.send

    def recording_send(sender, receiver, kind, payload):
        out = send(sender, receiver, kind, payload)
        log.append((algo.wire.round, sender, receiver, kind, _clone(out)))
        return out

    algo.wire.send = recording_send
    return log


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().double().cpu().numpy()


# ----------------------------------------------------------------------------- FedAvg step of every method


@pytest.mark.parametrize("method", ["fedsc", "fedavg_sc"])
def test_first_round_trains_every_client_as_the_authors_code(method, tiny_digits):
    """first_round all (the code's com == 0 branch): every client uploads trained weights in round 1 under
    partial participation, |J^t| clients from round 2; `sampled` (Algorithm 1) trains J^1 only."""

    def uploads(first_round, t):
        algo = CLASSES[method](_spec(method, rounds=2, participation=3, first_round=first_round), tiny_digits, 0)
        log = spy(algo)
        for r in range(1, t + 1):
            algo.round(r)
        return {m[1] for m in log if m[0] == t and m[3] == "weights" and m[2] == "server"}

    clients = len(tiny_digits.clients)
    assert clients > 3
    assert len(uploads("all", 1)) == clients and len(uploads("all", 2)) == 3
    assert len(uploads("sampled", 1)) == 3
    with pytest.raises(ValueError, match="first_round 'x' unknown; allowed: all, sampled"):
        CLASSES[method](_spec(method, participation=3, first_round="x"), tiny_digits, 0).round(1)


@pytest.mark.parametrize("method", sorted(CLASSES))
def test_server_averages_every_participant_and_every_participant_trained(method, tiny_digits):
    """theta^t = mean of the |J^t| uploads (Algorithm 1, line 24), each upload differing from what it got."""
    torch.manual_seed(0)
    spec = _spec(method, rounds=2, participation=3, first_round="sampled")  # SC family: round 1 trains J^1
    algo = CLASSES[method](spec, tiny_digits, seed=0)
    log = spy(algo)
    algo.round(1)
    downs = {m[2]: m[4] for m in log if m[3] == "weights" and m[1] == "server"}
    ups = {m[1]: m[4] for m in log if m[3] == "weights" and m[2] == "server"}
    assert len(ups) == 3 and set(ups) <= set(downs)  # FedSC syncs every client on its first sharing round
    new = algo.net.state_dict()
    for key, value in new.items():
        if not value.is_floating_point():
            continue
        expected = sum(_np(u[key]) for u in ups.values()) / len(ups)
        np.testing.assert_allclose(_np(value), expected, rtol=1e-5, atol=1e-6, err_msg=key)
    for client, state in ups.items():
        moved = [k for k in state if "weight" in k and not torch.equal(state[k], downs[client][k])]
        assert moved, f"{client} returned the weights it was sent"


# ----------------------------------------------------------------------------- FedSC


def _alpha_of(alpha) -> float:
    """Eq. 80's alpha as the step reads it: a float, or 1 - the second of its device weights (`AlphaTerms`), after
    checking that the first is alpha / 2."""
    if not isinstance(alpha, AlphaTerms):
        return alpha
    value = 1.0 - alpha.rest.item()
    assert alpha.half.item() == pytest.approx(0.5 * value)
    return value


def _fedsc_capture(algo, monkeypatch):
    """Record, per client, the (views, alpha, r_minus) of its first training batch."""
    seen, current = {}, {}
    original_loss, original_update = sc_mod.local_loss, algo.client_update

    def loss(views, alpha=1.0, r_minus=None, scale=2.0):
        seen.setdefault(
            (algo.wire.round, current["j"]),
            (views.detach().clone(), _alpha_of(alpha), None if r_minus is None else r_minus.clone()),
        )
        return original_loss(views, alpha, r_minus, scale)

    def update(j, weights, t, lr):
        current["j"] = j
        return original_update(j, weights, t, lr)

    monkeypatch.setattr(sc_mod, "local_loss", loss)
    algo.client_update = update
    return seen


def test_fedsc_trains_against_the_leave_one_out_mean_of_the_released_matrices(tiny_digits, monkeypatch):
    """Client j's target is R~_-j = mean of the OTHER clients' uploaded (noisy) matrices (Alg. 1 line 20),
    weighted by alpha_t's complement (Eq. 80), never the global matrix with its own included."""
    spec = _spec("fedsc", rounds=3, privacy={"eps": 3, "delta": 1e-2, "sigma": 0.02, "deltas": [1e-2]})
    algo = FedSC(spec, tiny_digits, seed=0)
    log = spy(algo)
    seen = _fedsc_capture(algo, monkeypatch)
    algo.round(1)
    algo.round(2)
    uploads = {int(m[1].removeprefix("client")): _np(m[4]) for m in log if m[3] == "corr_matrix" and m[0] == 2}
    assert sorted(uploads) == list(range(5))
    for j in range(5):
        views, alpha, r_minus = seen[(2, j)]
        expected = np.mean([uploads[k] for k in range(5) if k != j], axis=0)
        np.testing.assert_allclose(_np(r_minus), expected, atol=1e-6)
        assert alpha == pytest.approx(alpha_schedule(2, 3))
        assert not np.allclose(_np(r_minus), np.mean(list(uploads.values()), axis=0), atol=1e-4)


def test_fedsc_training_loss_sees_normclipped_representations(tiny_digits, monkeypatch):
    """NormClip(z, sqrt(mu)) sits inside the training loss (as the authors' code): every row fed to the loss has
    ||z||^2 <= mu, and the fixture's raw representations are longer than that."""
    mu = 0.01
    algo = FedSC(_spec("fedavg_sc", rounds=1, mu=mu), tiny_digits, seed=0)
    with torch.no_grad():
        raw = algo.net(algo.data.x_train.float() / 255.0)
    assert float(raw.norm(dim=1).max()) > 2 * math.sqrt(mu)  # clipping has work to do
    seen = _fedsc_capture(algo, monkeypatch)
    algo.round(1)
    norms = torch.cat([views.norm(dim=-1).flatten() for views, _, _ in seen.values()])
    assert float(norms.max()) <= math.sqrt(mu) * (1 + 1e-5)
    assert float(norms.max()) == pytest.approx(math.sqrt(mu), rel=1e-4)


def _dpcalr_run(tiny_digits, monkeypatch, sigma, mu=2.0, rounds=2, out=32):
    """FedSC with the clean (noise-free) correlation recomputed beside every DP-CalR call."""
    spec = _spec(
        "fedsc",
        rounds=rounds,
        mu=mu,
        projector={"hidden": 16, "out": out},
        privacy={"eps": 3 if sigma else "inf", "delta": 1e-2, "sigma": sigma, "deltas": [1e-2]},
    )
    if not sigma:
        spec["privacy"] = {"eps": "inf", "deltas": []}
    algo = FedSC(spec, tiny_digits, seed=0)
    clean, original = [], sc_mod.dp_calr

    def recording(encode, x, view, mu_, sigma_, gen, passes, views_per_pass, batch_size, symmetrize):
        state = gen.get_state()
        released = original(encode, x, view, mu_, sigma_, gen, passes, views_per_pass, batch_size, symmetrize)
        after = gen.get_state()
        gen.set_state(state)
        clean.append(clipped_correlation(encode, x, view, mu_, passes, views_per_pass, batch_size))
        gen.set_state(after)
        return released

    monkeypatch.setattr(sc_mod, "dp_calr", recording)
    log = spy(algo)
    for t in range(1, rounds + 1):
        algo.round(t)
    released = [m[4] for m in log if m[3] == "corr_matrix"]
    assert len(released) == len(clean) == 5 * rounds
    return algo, released, clean


def test_dpcalr_noise_on_the_wire_has_std_sigma_and_is_fresh_every_release(tiny_digits, monkeypatch):
    sigma = 0.05
    algo, released, clean = _dpcalr_run(tiny_digits, monkeypatch, sigma)
    assert algo.sigma == sigma  # full participation: no partial scaling
    noise = np.stack([_np(r - c) for r, c in zip(released, clean)])  # (10, 32, 32): 10240 draws
    assert noise.std() == pytest.approx(sigma, rel=0.05)
    assert abs(noise.mean()) < 4 * sigma / math.sqrt(noise.size)
    flat = noise.reshape(len(noise), -1)
    corr = np.corrcoef(flat)[np.triu_indices(len(flat), 1)]
    assert np.abs(corr).max() < 0.15  # no draw is reused
    assert not np.allclose(noise[0], noise[0].T)  # i.i.d. per entry (not symmetrised)


def test_dpcalr_at_eps_inf_releases_the_clean_clipped_correlation(tiny_digits, monkeypatch):
    mu = 0.05
    _, released, clean = _dpcalr_run(tiny_digits, monkeypatch, 0.0, mu=mu, rounds=1)
    for r, c in zip(released, clean):
        np.testing.assert_allclose(_np(r), _np(c), atol=1e-7)
        # Tr R~_j = mean ||NormClip(z)||^2 <= mu; the fixture's raw norms exceed sqrt(mu), so it sits at mu
        assert float(torch.trace(r)) <= mu * (1 + 1e-5)
        assert float(torch.trace(r)) == pytest.approx(mu, rel=1e-3)
        assert float(torch.linalg.eigvalsh(r.double()).min()) > -1e-7  # PSD: a mean of z z^T


# ----------------------------------------------------------------------------- BYOL family


def _one_step_spec(**over):
    return tiny_spec(rounds=2, train={"local_epochs": 1, "batch_size": 64, "lr": 0.1, "grad_clip": None}, **over)


def test_byol_target_is_the_ema_of_the_online_network(tiny_digits):
    """After one step from a reset target: target = beta * online_before + (1 - beta) * online_after."""
    algo = FedBYOL(_one_step_spec(byol={"ema": 0.9}), tiny_digits, seed=0)
    weights = algo.global_state()
    before = {k: v.clone() for k, v in weights.items() if not k.startswith("predictor.")}
    after, _ = algo.client_update(0, weights, 1, 0.1)  # 24 images, batch 64: exactly one step
    target = dict(algo.target.named_parameters())
    for name, value in target.items():
        expected = 0.9 * _np(before[name]) + 0.1 * _np(after[name])
        np.testing.assert_allclose(_np(value), expected, atol=1e-6, err_msg=name)
    moved = [n for n in target if not torch.allclose(after[n], before[n])]
    assert moved and all(p.grad is None for p in algo.target.parameters())


def test_byol_loss_is_symmetric_with_stop_gradient_on_the_target(tiny_digits, monkeypatch):
    algo = FedBYOL(_one_step_spec(), tiny_digits, seed=0)
    captured = {}
    monkeypatch.setattr(
        byol_mod,
        "local_sgd",
        lambda net, x, batch_loss, *a, draw, **k: captured.setdefault("f", lambda b: batch_loss(draw(b))) and 0.0,
    )
    algo.client_update(0, algo.global_state(), 1, 0.1)
    with torch.no_grad():  # make the target differ from the online network
        for p in algo.target.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    batch = algo.data.client_x(0)[:8]
    algo.work.train()
    algo.target.train()
    state = algo.gen.get_state()
    loss = captured["f"](batch)
    algo.gen.set_state(state)
    x = torch.cat([augment(batch, algo.aug_cfg, algo.gen) for _ in range(2)])
    with torch.no_grad():
        p = _np(algo.work.predictor(algo.work(x))).reshape(2, 8, -1)
        z = _np(algo.target(x)).reshape(2, 8, -1)

    def term(a, b):  # mean over the batch of 2 - 2 cos(a, b)
        return np.mean(2 - 2 * (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))

    assert float(loss.detach()) == pytest.approx(term(p[0], z[1]) + term(p[1], z[0]), rel=1e-5)
    loss.backward()
    assert all(q.grad is None for q in algo.target.parameters())
    assert algo.work.predictor[0].weight.grad is not None


def _perturbed(state: dict, prefixes: tuple[str, ...], scale: float, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {
        k: (v + scale * torch.randn(v.shape, generator=gen))
        if k.startswith(prefixes) and v.is_floating_point()
        else v.clone()
        for k, v in state.items()
    }


def _fake_local(algo, j, online: dict):
    target = {k: v + 1.0 for k, v in online.items() if not k.startswith("predictor.")}
    algo.local[j] = {"online": online, "target": target}
    return target


def _layer_mean_distance(a: dict, b: dict) -> float:
    """Mean over the backbone's conv layers of ||W_a - W_b||_2, in float64 (EasyFL `_calculate_divergence`)."""
    keys = [k for k, v in a.items() if k.startswith("backbone.") and v.dim() == 4]
    assert len(keys) >= 2
    return float(np.mean([np.linalg.norm(_np(a[k]) - _np(b[k])) for k in keys]))


@pytest.mark.parametrize("close", [True, False])
def test_fedu_dapu_takes_the_global_predictor_iff_the_encoder_divergence_of_its_last_round_is_below_mu(
    tiny_digits, close
):
    """FedU §3.3 as its authors' code measures it: after local training, d = mean over conv layers of
    ||W_start - W_trained|| of the online encoder; at the next download the online encoder <- global always,
    the predictor <- global iff d < mu, the target stays the client's own."""
    algo = FedU(_one_step_spec(fedu={"rule": "dapu", "threshold": 0.4}), tiny_digits, seed=0)
    start = algo.global_state()
    algo.client_update(2, start, 1, 0.1)  # first participation: starts from the global model
    trained, target = algo.local[2]["online"], algo.local[2]["target"]
    d = _layer_mean_distance(start, trained)
    assert d > 0 and algo.local[2]["divergence"] == pytest.approx(d, rel=1e-9)
    algo.threshold = 1.5 * d if close else 0.5 * d
    # the predictors' own distance points the other way: far when the encoder is close, ~0 when it is far
    glob = _perturbed(start, ("backbone.",), 0.1, 1)
    predictor = _perturbed(trained, ("predictor.",), 1.0 if close else 1e-6, 2)
    glob.update({k: v for k, v in predictor.items() if k.startswith("predictor.")})
    algo.stats, algo.divergences = [], []
    algo.start_local(2, glob)
    now = algo.work.state_dict()
    for k in glob:
        expected = trained[k] if (k.startswith("predictor.") and not close) else glob[k]
        assert torch.equal(now[k], expected), k
    for k, v in algo.target.state_dict().items():
        assert torch.equal(v, target[k])
    assert algo.after_training(0, [2]) == {"fedu_global": float(close), "fedu_global_returning": 1}
    assert algo.divergences == [[0, 2, pytest.approx(d), float(close)]]


def test_fedu_keep_or_replace_is_the_fedsc_codes_whole_model_rule(tiny_digits):
    algo = FedU(_one_step_spec(fedu={"rule": "keep_or_replace", "threshold": 0.2}), tiny_digits, seed=0)
    glob = algo.global_state()
    far = _perturbed(glob, ("backbone.",), 1.0, 0)  # d >= 1: 1 - min(1, d) = 0, not > 0.2: keep local
    own_target = _fake_local(algo, 1, far)
    algo.start_local(1, glob)
    assert all(torch.equal(v, far[k]) for k, v in algo.work.state_dict().items())
    assert all(torch.equal(v, own_target[k]) for k, v in algo.target.state_dict().items())  # and its own target
    near = _perturbed(glob, ("backbone.",), 1e-4, 0)  # d ~ 0: replace by global
    _fake_local(algo, 1, near)
    algo.start_local(1, glob)
    assert all(torch.equal(v, glob[k]) for k, v in algo.work.state_dict().items())
    assert algo.replaced == 1


def test_fedema_mixes_local_and_global_with_the_divergence_scaled_weight(tiny_digits):
    """FedEMA Eq. 4: W <- mu W_local + (1 - mu) W_global, mu = min(lambda ||W_g - W_l||, 1), on the online
    encoder and predictor, ||.|| the mean over conv layers of the per-layer distance (its authors' code);
    the autoscaler sets lambda = tau / divergence at the first update (mu = tau)."""
    tau = 0.6
    algo = FedEMA(_one_step_spec(fedema={"convention": "paper", "lambda": None, "tau": tau}), tiny_digits, seed=0)
    glob = algo.global_state()

    def mixed_with(local, mu):
        algo.start_local(3, glob)
        now = algo.work.state_dict()
        for k in glob:
            expected = mu * _np(local[k]) + (1 - mu) * _np(glob[k]) if k in algo.param_names else _np(local[k])
            np.testing.assert_allclose(_np(now[k]), expected, atol=1e-6, err_msg=k)

    first = _perturbed(glob, ("backbone.", "projector.", "predictor."), 0.01, 0)
    d1 = _layer_mean_distance(first, glob)
    _fake_local(algo, 3, first)
    mixed_with(first, tau)
    assert algo.lambdas[3] == pytest.approx(tau / d1)
    second = _perturbed(glob, ("backbone.", "projector.", "predictor."), 0.005, 1)  # closer: smaller mu
    d2 = _layer_mean_distance(second, glob)
    _fake_local(algo, 3, second)
    mixed_with(second, min(1.0, tau / d1 * d2))
    stats = algo.after_training(0, [3])
    assert stats == {"fedema_mu": pytest.approx((tau + min(1.0, tau / d1 * d2)) / 2), "fedema_mu_returning": 2}
    assert [r[2] for r in algo.divergences] == [pytest.approx(d1), pytest.approx(d2)]


def test_fedema_fedsc_code_convention_puts_one_minus_mu_on_the_local_model(tiny_digits):
    algo = FedEMA(_one_step_spec(fedema={"convention": "fedsc_code", "lambda": 0.2}), tiny_digits, seed=0)
    glob = algo.global_state()
    local = _perturbed(glob, ("backbone.",), 0.3, 0)
    d = byol_mod.conv_divergence(glob, local)
    assert algo.local_weight(0, d) == pytest.approx(1 - min(1.0, 0.2 * d))
    with pytest.raises(ValueError, match="fedema.convention"):
        FedEMA(_one_step_spec(fedema={"convention": "original"}), tiny_digits, seed=0)


def test_fedu_and_fedema_keep_local_models_and_report_per_round_statistics(tiny_digits):
    for cls, key, fresh in ((FedU, "fedu_global", 1.0), (FedEMA, "fedema_mu", 0.0)):
        algo = cls(tiny_spec(rounds=2), tiny_digits, seed=0)
        first, second = algo.round(1), algo.round(2)
        assert first[key] == fresh and first[f"{key}_returning"] == 0  # first participation: the global model
        assert 0.0 <= second[key] <= 1.0 and second[f"{key}_returning"] == 5
        assert sorted(algo.local) == list(range(5))
        assert algo.summary()[f"{key.split('_')[0]}_downloads"]["downloads"] == 5


# ----------------------------------------------------------------------------- contrastive baselines


def nt_xent_reference(a, b, tau, negatives=None):
    """SimCLR's NT-Xent in float64: -log softmax of the positive over the other 2B - 1 views (+ negatives)."""
    a, b = a / np.linalg.norm(a, axis=1, keepdims=True), b / np.linalg.norm(b, axis=1, keepdims=True)
    z, n = np.concatenate([a, b]), len(a)
    extra = None if negatives is None else negatives / np.linalg.norm(negatives, axis=1, keepdims=True)
    total = 0.0
    for i in range(2 * n):
        pos = (i + n) % (2 * n)
        logits = [z[i] @ z[k] / tau for k in range(2 * n) if k != i]
        if extra is not None:
            logits += list(extra @ z[i] / tau)
        total += -(z[i] @ z[pos] / tau) + np.log(np.sum(np.exp(logits)))
    return total / (2 * n)


def js_reference(x1, x2, anchor, tau, tau2):
    def unit(m):
        return m / np.linalg.norm(m, axis=1, keepdims=True)

    def softmax(m):
        e = np.exp(m - m.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    s1, s2 = unit(x1) @ unit(anchor).T, unit(x2) @ unit(anchor).T
    target = (softmax(s1 / tau2) + softmax(s2 / tau2)) / 2

    def kl(s):
        return np.mean(np.sum(target * (np.log(target) - np.log(softmax(s / tau))), axis=1))

    return (kl(s1) + kl(s2)) / 2


def test_nt_xent_and_js_match_float64_references():
    gen = torch.Generator().manual_seed(0)
    a, b, neg, anc = (torch.randn(s, generator=gen) for s in ((6, 5), (6, 5), (4, 5), (6, 5)))
    assert float(fedx_mod.nt_xent(a, b, 0.5)) == pytest.approx(nt_xent_reference(_np(a), _np(b), 0.5), rel=1e-5)
    assert float(fedx_mod.nt_xent(a, b, 0.5, neg)) == pytest.approx(
        nt_xent_reference(_np(a), _np(b), 0.5, _np(neg)), rel=1e-5
    )
    assert float(fedx_mod.js_loss(a, b, anc, 0.5, 0.2)) == pytest.approx(
        js_reference(_np(a), _np(b), _np(anc), 0.5, 0.2), rel=1e-4
    )


def test_fedx_relational_temperature_is_the_one_the_fedx_code_runs(tiny_digits):
    """FEDX's main.py passes --tt = --ts = 0.1 to both relational terms (over js_loss's own default 0.01)."""
    assert FedX(tiny_spec(), tiny_digits, seed=0).tau2 == 0.1
    config = yaml.safe_load((Path(__file__).parents[2] / "config.yaml").read_text())
    assert config["fedsc"]["methods"]["fedx"]["fedx"]["tau2"] == 0.1


def test_fedx_loss_has_the_local_and_the_global_terms(tiny_digits, monkeypatch):
    """FedX: NT-Xent(z_a, z_b) + NT-Xent(pred(z_a), g_b) + JS(pred | g_anchor) + JS(z | z_anchor), g from the
    frozen global model; recomputed term by term with float64 references."""
    algo = FedX(_one_step_spec(fedx={"tau": 0.5, "tau2": 0.2}), tiny_digits, seed=0)
    captured = {}
    monkeypatch.setattr(
        fedx_mod,
        "local_sgd",
        lambda net, x, batch_loss, *a, draw, **k: captured.setdefault("f", lambda b: batch_loss(draw(b))) and 0.0,
    )
    algo.client_update(1, algo.global_state(), 1, 0.1)
    with torch.no_grad():  # a global model that differs from the local one
        for p in algo.frozen.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
    x_local, batch = algo.data.client_x(1), algo.data.client_x(1)[:6]
    algo.work.train()
    state = algo.gen.get_state()
    loss = float(captured["f"](batch).detach())
    algo.gen.set_state(state)
    anchors = x_local[torch.randint(0, x_local.shape[0], (6,), generator=algo.gen)]
    x = torch.cat(
        [
            augment(batch, algo.aug_cfg, algo.gen),
            augment(batch, algo.aug_cfg, algo.gen),
            augment(anchors, algo.aug_cfg, algo.gen),
        ]
    )
    with torch.no_grad():
        proj = algo.work(x)
        pred, glob = algo.work.predictor(proj), algo.frozen(x)
    (p_a, p_b, p_r), (q_a, q_b, _), (_, g_b, g_r) = (np.split(_np(m), 3) for m in (proj, pred, glob))
    local_terms = nt_xent_reference(p_a, p_b, 0.5) + js_reference(p_a, p_b, p_r, 0.5, 0.2)
    global_terms = nt_xent_reference(q_a, g_b, 0.5) + js_reference(q_a, q_b, g_r, 0.5, 0.2)
    assert loss == pytest.approx(local_terms + global_terms, rel=1e-4)


def test_fedca_clients_contrast_against_the_other_clients_dictionaries(tiny_digits, monkeypatch):
    """FedCA: client j's extra negatives are the latest dictionaries of every OTHER client, as uploaded."""
    algo = FedCA(tiny_spec(rounds=2), tiny_digits, seed=0)
    log = spy(algo)
    used = []
    original = fedca_mod.nt_xent
    monkeypatch.setattr(fedca_mod, "nt_xent", lambda a, b, tau, neg=None: used.append(neg) or original(a, b, tau, neg))
    algo.round(1)
    assert all(n is None for n in used)  # nothing shared yet
    uploads = {int(m[1].removeprefix("client")): m[4] for m in log if m[3] == "dictionary" and m[2] == "server"}
    assert sorted(uploads) == list(range(5)) and all(u.shape[0] == 24 for u in uploads.values())
    for u in uploads.values():  # one unit vector per local sample
        np.testing.assert_allclose(_np(u.norm(dim=1)), 1.0, atol=1e-5)
    used.clear()
    algo.round(2)
    received = {int(m[2].removeprefix("client")): m[4] for m in log if m[3] == "dictionary" and m[1] == "server"}
    for j, negatives in received.items():
        assert torch.equal(negatives, torch.cat([uploads[k] for k in range(5) if k != j]))
    assert len(used) > 0 and all(n is not None and n.shape[0] == 4 * 24 for n in used)


# ----------------------------------------------------------------------------- theory (the paper's Section 6 and App. B)


def test_proof_constant_q_one_minus_q_squared_is_at_most_4_27():
    """Proof of Theorem 6.10: q_j (1 - q_j)^2 <= 4/27, attained at q_j = 1/3."""
    q = np.linspace(0, 1, 100001)
    assert (q * (1 - q) ** 2).max() == pytest.approx(4 / 27, rel=1e-9)
    assert q[np.argmax(q * (1 - q) ** 2)] == pytest.approx(1 / 3, abs=1e-4)


def test_fedsc_lowers_the_global_objective_below_fedavg_sc_on_a_pathological_split():
    """Spec item 12: on fixed per-client views (a linear encoder, J = 3 non-i.i.d. clients, full batch),
    rounds of local steps on Eq. 5 with R_-j from the other clients (alpha = q_j) reach a lower GLOBAL SC
    loss (Eq. 1 on the union) than the same rounds of FedAvg on local SC."""
    from fedrepro.algorithms.fedsc.loss import correlations, local_loss, sc_loss_matrix

    gen = torch.Generator().manual_seed(0)
    dim, hid = 6, 3
    centres = [torch.randn(dim, generator=gen) * 3 for _ in range(3)]
    clients = []
    for c in centres:
        base = c + torch.randn(20, dim, generator=gen)
        clients.append(
            torch.stack(
                [base + 0.1 * torch.randn(20, dim, generator=gen), base + 0.1 * torch.randn(20, dim, generator=gen)]
            ).double()
        )
    q = [1 / 3] * 3
    w0 = (0.1 * torch.randn(dim, hid, generator=gen)).double()

    def global_loss(w):
        return float(sc_loss_matrix(torch.cat([v @ w for v in clients], dim=1)))

    def train(share: bool):
        w = w0.clone()
        for _ in range(30):
            rs = [correlations(v @ w)[1].detach() for v in clients]
            new = []
            for j, views in enumerate(clients):
                wj = w.clone().requires_grad_(True)
                r_minus = sum(rs[k] for k in range(3) if k != j) / 2 if share else None
                for _ in range(5):
                    loss = local_loss(views @ wj, q[j] if share else 1.0, r_minus, scale=1.0)
                    (grad,) = torch.autograd.grad(loss, wj)
                    wj = (wj - 0.01 * grad).detach().requires_grad_(True)
                new.append(wj.detach())
            w = sum(new) / 3
        return global_loss(w)

    fedsc, fedavg = train(True), train(False)
    assert fedsc < fedavg - 0.02 * abs(fedavg)
