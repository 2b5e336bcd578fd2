"""Each paper's release sensitivities are written once: SteFFLe's in `privacy.steffle.steffle_sensitivities`
(the realised epsilon's composition, the per-release W mechanism and the audit's joint multiplier), DPZV's in
`privacy.dpzv.dpzv_sensitivities` (the calibrated noise, the records, the accountant adapter and the audit) and
FedSC's in `privacy.fedsc.sensitivity` (Prop. 6.6, the accountant, the class's sigma and the audit) and the fair
baselines' in `privacy.steffle.fair_baseline_sensitivities` (Tran's trainer and audit), so changing that one function
moves all of them together."""

import math

import pytest

from fedrepro.privacy import dpzv, fedsc, steffle


def _doubled_w(monkeypatch):
    original = steffle.steffle_sensitivities
    monkeypatch.setattr(
        steffle, "steffle_sensitivities", lambda c, r, m: (original(c, r, m)[0], 2 * original(c, r, m)[1])
    )


def test_the_constants_are_the_replace_one_bounds():
    assert steffle.steffle_sensitivities(1.5, 0.25, 10) == pytest.approx((0.3, 2 * math.sqrt(8) / 10))
    with pytest.raises(ValueError, match="rho"):
        steffle.steffle_sensitivities(1.0, 0.0, 10)


def test_changing_the_w_sensitivity_in_one_place_moves_the_accountant_and_the_w_mechanism(monkeypatch):
    sig_t, sig_w, clip, rho, m = 0.02, 0.5, 1.0, 0.3, 16
    before = steffle.steffle_composition(sig_t, sig_w, clip, rho, m, 200, 50).noise_multiplier
    w_before = steffle.steffle_w_mechanism(sig_w, m, 200, 50, rho).noise_multiplier
    _doubled_w(monkeypatch)
    after = steffle.steffle_composition(sig_t, sig_w, clip, rho, m, 200, 50).noise_multiplier
    assert after == pytest.approx(steffle.joint_multiplier([sig_t, sig_w], [2 * clip / m, 4 * math.sqrt(2 / rho) / m]))
    assert after < before
    assert steffle.steffle_w_mechanism(sig_w, m, 200, 50, rho).noise_multiplier == pytest.approx(w_before / 2)


def test_the_audit_reads_the_same_sensitivities(monkeypatch):
    import torch

    from fedrepro.audit.steffle import steffle_scores

    from .test_audit import STEFFLE_WORLD

    torch.set_num_threads(1)
    before = steffle_scores(STEFFLE_WORLD, 2, seed=0).extra["joint_multiplier"]
    _doubled_w(monkeypatch)
    after = steffle_scores(STEFFLE_WORLD, 2, seed=0).extra["joint_multiplier"]
    assert after < before * (1 - 1e-3)


# ------------------------------------------------------------------------------ DPZV and FedSC


def _doubled(monkeypatch, module, name):
    original = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: tuple(2 * v for v in original(*a, **k)))


def test_dpzvs_sensitivities_are_the_replace_one_bounds_of_its_clipped_releases():
    assert dpzv.dpzv_sensitivities(0.05, 1.5) == (0.1, 3.0)
    # Theorem 6.1 and the record: sigma_dp = 2C sqrt(T)/(D mu); noise over 2C/B; dp_head: the head's multiplier s/2
    assert dpzv.sigma_dp(0.05, 16, 32, 1.0) == pytest.approx(0.1 * 4 / 32)
    assert dpzv.noise_multiplier(0.3, 0.05, 8) == pytest.approx(0.3 / (0.1 / 8))
    assert dpzv.dp_head_multipliers(2.0) == pytest.approx((1.0, 2.0 / math.sqrt(5)))


def test_changing_dpzvs_constant_in_one_place_moves_every_mechanism_and_accountant(monkeypatch):
    sigma, clip, batch, samples, rounds = 0.3, 0.05, 8, 32, 16

    def released():
        return (
            dpzv.noise_multiplier(sigma, clip, batch),
            dpzv.dpzv_mechanism(sigma, clip, batch, samples, rounds).noise_multiplier,
            dpzv.dp_head_multipliers(1.0)[0],
            dpzv.embedding_noise(1.0, 1e-3, 0.5, rounds, samples, batch, 2),
            dpzv.dpzv_noise(1.0, 1e-3, clip, rounds, samples, batch),
            dpzv.secret_subsample_noise(1.0, 1e-3, clip, batch, 0.5, (8, 4), "none"),
        )

    before = released()
    _doubled(monkeypatch, dpzv, "dpzv_sensitivities")
    after = released()
    # at a given sigma each accountant sees half the multiplier
    assert after[:3] == pytest.approx((before[0] / 2, before[1] / 2, before[2] / 2))
    # the calibrated noise of each mechanism doubles and the multiplier its record gives stays
    for new, old in zip(after[3:], before[3:]):
        assert (new["sigma"], new["noise_multiplier"]) == pytest.approx((2 * old["sigma"], old["noise_multiplier"]))


def _dpzv_audit():
    import torch
    import yaml

    from fedrepro.audit.dpzv import dpzv_audits

    from .test_audit import ROOT

    torch.set_num_threads(1)
    cfg = {**yaml.safe_load((ROOT / "config.yaml").read_text())["audit"]["dpzv"], "variants": ["frozen_head"]}
    return dpzv_audits(cfg, 2, seed=0)[0]


def test_dpzvs_class_record_and_audit_read_the_same_constant(monkeypatch):
    before = _dpzv_audit()
    _doubled(monkeypatch, dpzv, "dpzv_sensitivities")
    after = _dpzv_audit()
    # the class draws twice the noise for the same eps, and the run's record and the audit's accountant, both
    # reading the doubled constant, still give that eps (a copy of 2C/B in either would halve its multiplier)
    assert after.sigma == pytest.approx(2 * before.sigma)
    assert after.extra["eps_poisson_pld"] == pytest.approx(before.extra["eps_poisson_pld"], rel=1e-6)
    assert f"2C/B = {0.2 / 8:.3g}" in after.note and f"2C/B = {0.1 / 8:.3g}" in before.note
    # what the attacker measures (frozen head: the canary's rounds alone) is the real clip against twice the noise
    assert after.mu_attained == pytest.approx(before.mu_attained / 2, rel=1e-3)


def test_changing_fedscs_sensitivity_in_one_place_moves_the_accountant_the_noise_and_the_audit(monkeypatch):
    import torch

    from fedrepro.algorithms.fedsc.fedsc import noise_sigma
    from fedrepro.audit.fedsc import fedsc_scores

    from .test_audit import FEDSC_WORLD

    torch.set_num_threads(1)
    spec = {"rounds": 3, "mu": 1e-3, "sharing": {"after": 0.0, "every": 1}, "privacy": {"eps": 2.0, "delta": 1e-2}}
    sigma = 0.01

    def measured():
        return (
            fedsc.epsilon(3, 1e-3, sigma, 4, 1e-2),
            fedsc.fedsc_mechanism(sigma, 1e-3, 4, 3).noise_multiplier,
            noise_sigma(spec, [4, 4, 4], 3),
            fedsc_scores({**FEDSC_WORLD, "eps": 2.0}, 2, seed=0),
        )

    eps, z, noise, audit = measured()
    original = fedsc.sensitivity
    monkeypatch.setattr(fedsc, "sensitivity", lambda *a, **k: 2 * original(*a, **k))
    eps2, z2, noise2, audit2 = measured()
    # at a given sigma: the realised epsilon rises and the accountant's multiplier halves; the class's
    # calibrated noise doubles, and the audit's epsilon for it (which reads the same function) stays
    assert eps2 > eps and z2 == pytest.approx(z / 2) and noise2 == pytest.approx(2 * noise)
    assert audit2.sigma == pytest.approx(2 * audit.sigma)
    assert audit2.eps_adversary == pytest.approx(audit.eps_adversary, rel=1e-6)


def _tran_noise_and_audit(runs: int = 4):
    """(residual std of the Tran trainer's primal steps, its dual noise std, the audit's primal sigma)."""
    import torch

    from fedrepro.audit import steffle as audit_steffle

    from .test_audit import STEFFLE_WORLD

    torch.set_num_threads(1)
    cfg = {k: STEFFLE_WORLD[k] for k in ("eps", "lam", "num_train", "batch", "epochs", "eta_theta", "canary_scale")}
    cfg["clip"] = 1.0
    data = {w: d.centralised() for w, d in audit_steffle.steffle_world({**cfg, "silos": 1}, 0).items()}
    real, shadow, _ = audit_steffle._tran_runs(data, cfg, runs, 0)
    primal, dual = audit_steffle._run_tran_world(real["out"], shadow, (1.0, 1.0))
    residual = torch.cat([(obs - clean).flatten() for step in primal for obs, clean, _, _ in step])
    dual_noise = torch.cat([(obs - clean).flatten() for step in dual for obs, clean, _, _ in step])
    return float(residual.std()), float(dual_noise.std()), audit_steffle.tran_scores(cfg, runs, seed=0).sigma


def test_the_fair_baselines_trainer_and_audit_read_one_sensitivity(monkeypatch):
    assert steffle.fair_baseline_sensitivities(1.5) == pytest.approx((3.0, math.sqrt(2)))
    before = _tran_noise_and_audit()
    _doubled(monkeypatch, steffle, "fair_baseline_sensitivities")
    after = _tran_noise_and_audit()
    # the trainer's primal and dual noise and the sigma the audit replays them with all double
    assert after == pytest.approx(tuple(2 * v for v in before), rel=0.1)
    assert after[2] == pytest.approx(2 * before[2])
