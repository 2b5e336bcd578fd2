"""SteFFLe's release sensitivities are written once (`privacy.steffle.steffle_sensitivities`): the
realised epsilon's composition, the per-release W mechanism and the audit's joint multiplier all read
them there, so changing that one function moves all three together."""

import math

import pytest

from fedrepro.privacy import steffle


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
