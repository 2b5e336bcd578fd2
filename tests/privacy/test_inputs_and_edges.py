"""Edges of the privacy maths: which argument an error names, boundaries of the
accountants' branches, and the audit's statistics at their corners.

Expected values are closed forms or the dp_accounting library called directly.
"""

import math
import warnings

import numpy as np
import pytest
import torch

from fedrepro.privacy import accountant, audit, dpzv, fedsc, mechanisms, steffle

# (call with one bad argument, the name its error must give): a message naming the wrong
# parameter sends the user to fix the wrong setting
NAMED_ERRORS = [
    (lambda: dpzv.sigma_dp(0.0, 10, 100, 1.0), "clip C"),
    (lambda: dpzv.sigma_dp(1.0, 0, 100, 1.0), "rounds T"),
    (lambda: dpzv.sigma_dp(1.0, 10, 0, 1.0), "num_samples D"),
    (lambda: dpzv.sigma_dp(1.0, 10, 100, 0.0), "GDP mu"),
    (lambda: dpzv.noise_multiplier(1.0, 1.0, 0), "batch_size B"),
    (lambda: dpzv.noise_multiplier(1.0, 0.0, 8), "clip C"),
    (lambda: dpzv.sigma_embedding(0.0, 8, 10, 100, 1.0), "clip C_h"),
    (lambda: dpzv.sigma_embedding(1.0, 8, 10, 100, 0.0), "GDP mu"),
    (lambda: dpzv.sigma_embedding(1.0, 0, 10, 100, 1.0), "batch_size B"),
    (lambda: dpzv.sigma_embedding(1.0, 8, 10, 0, 1.0), "num_samples D"),
    (lambda: dpzv.sigma_embedding(1.0, 8, 0, 100, 1.0), "releases T_rel"),
    (lambda: dpzv.total_rounds(0, 2, 100, 10), "epochs"),
    (lambda: dpzv.total_rounds(1, 0, 100, 10), "num_clients"),
    (lambda: dpzv.total_rounds(1, 2, 0, 10), "num_samples"),
    (lambda: dpzv.total_rounds(1, 2, 100, 0), "batch_size"),
    (lambda: mechanisms.clip_by_norm(torch.ones(3), -1.0), "clip norm c"),
    (lambda: mechanisms.clip_scalar(torch.ones(3), -1.0), "clip threshold c"),
    (lambda: mechanisms.gaussian_noise((2,), -1.0, torch.Generator()), "sigma"),
    (lambda: steffle.delta_for_n(0), "num_samples n"),
    (lambda: steffle.num_iterations(0, 100, 10), "epochs"),
    (lambda: steffle.num_iterations(1, 0, 10), "local_size n~"),
    (lambda: steffle.num_iterations(1, 100, 0), "batch_size m"),
    (lambda: steffle.sigma_w(0.0, 1e-5, 10, 100, 0.1), "eps"),
    (lambda: steffle.sigma_w(1.0, 1e-5, 0, 100, 0.1), "iterations T"),
    (lambda: steffle.sigma_w(1.0, 1e-5, 10, 0, 0.1), "local_size n~"),
    (lambda: steffle.sigma_w(1.0, 1e-5, 10, 100, 0.0), "rho"),
    (lambda: steffle.sigma_theta(1.0, 1e-5, 10, 100, 0.1, 0.0, 1.0), "lipschitz L"),
    (lambda: steffle.sigma_theta(1.0, 1e-5, 10, 100, 0.1, 1.0, 0.0), "radius D"),
    (lambda: steffle.min_iterations(1.0, 0, 10), "local_size n~"),
    (lambda: steffle.min_iterations(1.0, 100, 0), "batch_size m"),
    (lambda: fedsc.sensitivity(1.0, 10, 0.0), "sens_factor"),
    (lambda: fedsc.sensitivity(0.0, 10), "mu"),
    (lambda: fedsc.sensitivity(1.0, 0), "n (|D_j|)"),
    (lambda: fedsc.epsilon(-1, 1.0, 1.0, 10, 1e-5), "steps T"),
    (lambda: fedsc.epsilon(1, 1.0, -1.0, 10, 1e-5), "sigma"),
    (lambda: fedsc.sigma_for_epsilon(0.0, 1, 1.0, 10, 1e-5), "eps"),
    (lambda: fedsc.sigma_for_epsilon(1.0, 0, 1.0, 10, 1e-5), "steps T"),
    (lambda: fedsc.partial_participation_sigma(-1.0, 0.5), "sigma_full"),
]


@pytest.mark.parametrize("call,name", NAMED_ERRORS, ids=[name for _, name in NAMED_ERRORS])
def test_a_rejected_argument_is_named_in_the_error(call, name):
    with pytest.raises(ValueError) as caught:
        call()
    assert str(caught.value).startswith(f"{name} must be")


# ------------------------------------------------------------------------------ accountant branches


def _library_epsilon(noise_multiplier, steps, rate, delta):
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    event = dp_accounting.GaussianDpEvent(noise_multiplier)
    if rate < 1:
        event = dp_accounting.PoissonSampledDpEvent(rate, event)
    acc = RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    return acc.get_epsilon(delta)


def test_combined_epsilon_skips_a_release_free_mechanism_and_counts_the_rest():
    idle = accountant.GaussianComposition(1.0, 0, 1.0, "no releases")
    real = accountant.GaussianComposition(2.0, 5, 0.5, "five releases")
    expected = _library_epsilon(2.0, 5, 0.5, 1e-5)
    assert accountant.combined_epsilon([idle, real], 1e-5) == pytest.approx(expected, rel=1e-12)
    assert accountant.combined_epsilon([real, idle], 1e-5) == pytest.approx(expected, rel=1e-12)


def test_epsilon_rejects_a_delta_of_one_or_more():
    for delta in (1.0, 1.5):
        with pytest.raises(ValueError, match="delta"):
            accountant.epsilon(1.0, 3, delta)


def test_rdp_curve_refuses_a_single_noiseless_release():
    with pytest.raises(ValueError, match="noise_multiplier > 0"):
        accountant.rdp_curve(0.0, 1)
    orders, rdp = accountant.rdp_curve(0.0, 0)  # no release: zero RDP at every order
    assert (rdp == 0).all() and len(orders) == len(rdp)


@pytest.mark.parametrize("sens_factor,mu,local_size", [(-1.0, 1.0, 10), (1.0, -1.0, 10), (1.0, 1.0, 0)])
def test_fedsc_mechanism_rejects_each_non_positive_factor(sens_factor, mu, local_size):
    with pytest.raises(ValueError, match="sens_factor, mu and local_size"):
        fedsc.fedsc_mechanism(1.0, mu, local_size, 3, sens_factor=sens_factor)


def test_steffle_mechanisms_cap_the_sampling_rate_at_one_for_batches_larger_than_the_silo():
    # m > n~: every sample is in every batch, q = 1 (not m/n~ > 1)
    w = steffle.steffle_w_mechanism(1.0, batch_size=64, local_size=32, iterations=4, rho=0.25)
    theta = steffle.steffle_theta_mechanism(1.0, 1.0, batch_size=64, local_size=32, iterations=4)
    assert w.sampling_rate == 1.0 and theta.sampling_rate == 1.0
    assert w.noise_multiplier == pytest.approx(64 / (2 * math.sqrt(2 / 0.25)), rel=1e-15)
    assert w.epsilon(1e-5) == pytest.approx(_library_epsilon(w.noise_multiplier, 4, 1.0, 1e-5), rel=1e-12)


# ------------------------------------------------------------------------------ FedSC and SteFFLe closed forms


def test_fedsc_epsilon_numeric_without_releases_is_zero_and_matches_the_closed_minimum():
    assert fedsc.epsilon_numeric(0, 1.0, 1.0, 10, 1e-5) == 0.0
    # min over alpha of alpha r/2 + L/(alpha - 1) = r/2 + sqrt(2 r L) at alpha = 1 + sqrt(2L/r)
    steps, mu, sigma, n, delta = 20, 1.0, 0.05, 100, 1e-5
    rate = steps * (fedsc.sensitivity(mu, n) / sigma) ** 2
    closed = rate / 2 + math.sqrt(2 * rate * math.log(1 / delta))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an option the optimiser does not know would only warn
        numeric = fedsc.epsilon_numeric(steps, mu, sigma, n, delta)
    assert numeric == pytest.approx(closed, rel=1e-9)


def test_theorem_3_3_iteration_bound_holds_with_equality():
    # (n~ sqrt(eps) / (2 m))^2 = (20 * 1 / 10)^2 = 4 exactly: T = 4 meets it, T = 3 does not
    assert steffle.min_iterations(1.0, 20, 5) == 4.0
    assert steffle.check_preconditions(1.0, 1e-5, 4, 20, 5).iterations_bound
    assert not steffle.check_preconditions(1.0, 1e-5, 3, 20, 5).iterations_bound


# ------------------------------------------------------------------------------ mechanisms


def test_gaussian_noise_keeps_the_requested_dtype_and_device():
    gen = torch.Generator().manual_seed(0)
    noise = mechanisms.gaussian_noise((4,), 0.5, gen, dtype=torch.float64)
    assert noise.dtype == torch.float64
    expected = 0.5 * torch.randn(4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.equal(noise, expected)
    # sigma = 0 on an explicit device: zeros there (the meta device holds no data and needs none)
    zeros = mechanisms.gaussian_noise((4,), 0.0, gen, dtype=torch.float64, device="meta")
    assert zeros.device.type == "meta" and zeros.dtype == torch.float64


# ------------------------------------------------------------------------------ audit statistics


def test_epsilon_at_threshold_takes_the_larger_of_the_two_tests():
    # 10 out-runs, 10 in-runs; threshold 0.5: FP = 0 of 10, FN = 5 of 10. At empirical rates
    # (0 -> 0.5/n): log((1 - 0.5)/0.05) from the first inequality, log((1 - 0.05)/0.5) from the second.
    out = np.zeros(10)
    inn = np.r_[np.zeros(5), np.ones(5)]
    eps, fpr, fnr = audit.epsilon_at_threshold(out, inn, 0.5, 0.0)
    assert (fpr, fnr) == (0.05, 0.5)
    assert eps == pytest.approx(math.log(0.5 / 0.05), rel=1e-15)
    # mirrored (FN = 0, FP = 5): only the second inequality gives the bound
    eps_m, fpr_m, fnr_m = audit.epsilon_at_threshold(-inn + 1, np.ones(10), 0.5, 0.0)
    assert (fpr_m, fnr_m) == (0.5, 0.05)
    assert eps_m == pytest.approx(math.log(0.5 / 0.05), rel=1e-15)


def test_fedsc_release_scores_reject_zero_runs_and_accept_one_share():
    with pytest.raises(ValueError, match="runs >= 1"):
        audit.fedsc_release_scores(0, 0.1, 1.0, 4, 1)
    out, inn = audit.fedsc_release_scores(2, 0.1, 1.0, 4, 1, hidden=2)
    assert out.shape == inn.shape == (2,)


def test_tiny_vfl_data_draws_fresh_pixel_noise_for_every_sample_and_pixel():
    from fedrepro.audit import dpzv as audit_dpzv

    data = audit_dpzv.tiny_vfl_data(num_train=64, num_test=16, num_classes=3, clients=2, seed=0)
    train = torch.cat([x.reshape(len(x), -1) for x in data.train], dim=1)
    labels = data.y_train
    same_class = train[labels == labels[0]]
    # prototypes plus per-sample noise: two samples of one class differ, and so do the pixels of a sample
    assert not torch.equal(same_class[0], same_class[1])
    residual = same_class[0] - same_class[1]
    assert len(torch.unique(residual)) > 8
    # uint8 quantisation: 256 grey levels, so the pixel values take few distinct steps
    levels = torch.unique(train)
    steps = torch.diff(levels)
    assert steps.min() > 0 and torch.allclose(steps / steps.min(), torch.round(steps / steps.min()), atol=1e-4)


def test_scalar_tap_passes_other_wire_attributes_through():
    from types import SimpleNamespace

    from fedrepro.audit import dpzv as audit_dpzv

    logged = []
    wire = SimpleNamespace(bytes_sent=123, log=lambda *args: logged.append(args), carry=lambda payload: payload)
    tap = audit_dpzv._ScalarTap(wire)
    assert tap.bytes_sent == 123
    tap.log("server", "client0", "answer", 0.5)  # a round's reply, logged after the round
    assert tap.send("server", "client0", "answer", 0.25) == 0.25 and tap.received == [0.5, 0.25]
    assert [args[3] for args in logged] == [0.5, 0.25]


def test_each_mechanism_note_names_its_sensitivity_sampling_and_steps():
    # the privacy tables print these notes as the record of what the accountant assumed
    scalar = dpzv.dpzv_mechanism(1.0, 1.0, 8, 100, 10).note
    assert "DPZV: scalar Gaussian, sensitivity 2C/B, Poisson q = B/D" in scalar
    assert "steps = T server rounds (one client each)" in scalar
    theta = steffle.steffle_theta_mechanism(1.0, 1.0, 8, 100, 10).note
    assert "sensitivity 2C/m (replace_one)" in theta and "Poisson q = m/n~ per silo, steps = T" in theta
    w = steffle.steffle_w_mechanism(1.0, 8, 100, 10, 0.25).note
    assert "sensitivity 2 sqrt(2/rho)/m" in w and "Poisson q = m/n~ per silo, steps = T" in w
    assert "q = 1, steps = T_j shares" in fedsc.fedsc_mechanism(1.0, 1.0, 10, 3).note
