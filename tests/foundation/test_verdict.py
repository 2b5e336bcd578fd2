"""The one claims verdict (fedrepro.eval.verdict): paired over seeds, checked against scipy's own
one-sample t test on the differences and against hand-made cases."""

import math

import numpy as np
import pytest
from scipy import stats

from fedrepro.eval.health import Health
from fedrepro.eval.verdict import all_of, chance_under_dp, differences, paired


def test_interval_is_scipys_one_sample_t_interval_of_the_differences():
    a, b = [0.61, 0.64, 0.60, 0.66], [0.58, 0.60, 0.59, 0.61]
    v = paired(a, b)
    ci = stats.ttest_1samp(np.subtract(a, b), 0.0).confidence_interval(0.95)
    assert (v.low, v.high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert v.effect == pytest.approx(np.mean(np.subtract(a, b)))
    assert (v.label, v.seeds, v.wins) == ("holds", 4, 4)


def test_one_lucky_seed_does_not_decide():
    # the means differ in A's favour, but one seed of three goes the other way
    v = paired([0.90, 0.50, 0.52], [0.50, 0.51, 0.50])
    assert v.label == "inconclusive (3 seeds)"
    assert v.effect > 0 and v.low < 0 < v.high


def test_consistent_loss_does_not_hold_and_one_seed_is_inconclusive():
    assert paired([0.30, 0.33, 0.31], [0.35, 0.37, 0.36]).label == "does not hold"
    single = paired([0.9], [0.1])
    assert single.label == "inconclusive (1 seed)" and math.isnan(single.low)


def test_mappings_pair_by_seed_not_position():
    v = paired({0: 1.0, 1: 2.0, 2: 3.0}, {2: 2.9, 0: 0.9, 1: 1.9, 7: 100.0})
    assert v.seeds == 3 and v.effect == pytest.approx(0.1)


def test_margin_moves_the_threshold():
    d = [0.05, 0.06, 0.055]
    assert differences(d).label == "holds"
    assert differences(d, margin=0.1).label == "does not hold"


def test_degenerate_side_is_not_tested_and_named():
    v = paired([1, 2], [0, 1], {"A": Health("diverged", "diverged at round 3"), "B": Health()})
    assert v.label == "not tested (A: diverged at round 3)" and not v.tested


def test_chance_under_dp_is_a_result_only_when_the_noiseless_run_trains():
    at_chance = Health("chance", "at chance (accuracy 0.10)")
    assert chance_under_dp(at_chance, Health()).ok
    assert chance_under_dp(at_chance, Health("chance", "x")) == at_chance
    v = paired([0.9, 0.92], [0.1, 0.11], {"A": Health(), "B": chance_under_dp(at_chance, Health())})
    assert v.label == "holds" and "at chance under its DP noise" in v.note


def test_all_of_takes_the_weakest_part():
    yes, no, unsure = differences([1, 1.1]), differences([-1, -1.1]), differences([1, -1, 0.5])
    assert all_of([yes, yes]).label == "holds"
    assert all_of([yes, no]).label == "does not hold"
    assert all_of([yes, unsure]).label.startswith("inconclusive")


def test_identical_differences_prove_nothing_until_the_sign_test_does():
    assert paired([0.57, 0.57], [0.52, 0.52]).label == "inconclusive (2 seeds, identical differences)"
    assert differences([0.05] * 6).label == "holds"
    assert differences([-0.05] * 6).label == "does not hold"


def _float32_accuracy(correct: int, total: int = 450) -> float:
    return 100 * float(np.float32(correct / total))


def test_differences_of_one_test_image_are_identical_despite_float32_rounding():
    # three seeds at different accuracies, each exactly one test image of 450 ahead: the float32
    # accuracies make the differences differ by about 6e-6, which must not narrow a t interval to a point
    a = [_float32_accuracy(k) for k in (360, 362, 365)]
    b = [_float32_accuracy(k - 1) for k in (360, 362, 365)]
    assert np.ptp(np.subtract(a, b)) > 0
    v = paired(a, b)
    assert v.label == "inconclusive (3 seeds, identical differences)" and v.needed == 6
    assert paired(a, b, resolution=100 / 450).label == v.label


def test_the_sign_test_needs_six_seeds_at_95_percent():
    assert differences([0.2] * 5).label == "inconclusive (5 seeds, identical differences)"
    assert differences([0.2] * 6).label == "holds"
    assert differences([-0.2] * 6).label == "does not hold"
    assert differences([0.2] * 6, margin=0.2).label.startswith("inconclusive")


def test_resolution_counts_differences_within_half_a_test_example_as_identical():
    d = [0.2222, 0.2230, 0.2215, 0.2219, 0.2226, 0.2224]
    assert differences(d).label == "holds" and not math.isnan(differences(d).low)
    assert differences(d, resolution=100 / 450).note == "sign test"
    assert differences([0.2222, 0.4444, 0.2222], resolution=100 / 450).label == "inconclusive (3 seeds)"


def test_no_effect_when_the_interval_lies_within_the_smallest_effect():
    d = [0.05, -0.04, 0.02, -0.01]
    assert differences(d).label == "inconclusive (4 seeds)"
    v = differences(d, smallest_effect=0.2)
    assert v.label == "no effect at this scale" and -0.2 < v.low < v.high < 0.2
    assert "within ±0.2" in v.text() and v.outcome == "no effect at this scale"
    assert differences(d, smallest_effect=0.05).label.startswith("inconclusive")
    one_side_out = differences([0.3, 0.0, 0.15, 0.05], smallest_effect=0.2)  # interval about [-0.06, +0.31]
    assert one_side_out.low > -0.2 and one_side_out.high > 0.2 and one_side_out.outcome == "inconclusive"
    # an effect that is decided keeps its label even when smaller than the margin would need
    assert differences([0.05, 0.06, 0.055], smallest_effect=0.2).label == "holds"


def _interval_decides(mean, sd, n, margin=0.0, smallest_effect=math.nan):
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return abs(mean - margin) > half or abs(mean) + half < smallest_effect


def test_seeds_needed_is_the_first_count_at_which_the_observed_mean_and_spread_decide():
    d = [-9.48 / 3, 0.15, -2.0]  # mean and spread of a consistent but undecided row
    v = differences(d)
    mean, sd = np.mean(d), np.std(d, ddof=1)
    assert v.label == "inconclusive (3 seeds)" and v.needed is not None
    assert _interval_decides(mean, sd, v.needed) and not _interval_decides(mean, sd, v.needed - 1)
    assert f"needs about {v.needed} seeds" in v.text()


def test_seeds_needed_for_an_equivalence_and_when_nothing_would_decide():
    d = [0.3, -0.3, 0.1, -0.1]
    n = differences(d, smallest_effect=0.25).needed
    assert _interval_decides(0.0, np.std(d, ddof=1), n, smallest_effect=0.25)
    assert not _interval_decides(0.0, np.std(d, ddof=1), n - 1, smallest_effect=0.25)
    nothing = differences(d)  # mean exactly 0 and no margin: no count decides
    assert nothing.needed is None and "no seed count" in nothing.text()


def test_all_of_no_effect_and_needed():
    yes = differences([1, 1.1])
    none = differences([0.05, -0.04, 0.02, -0.01], smallest_effect=0.2)
    unsure_a, unsure_b = differences([1, -0.5, 0.5]), differences([0.3, -0.1, 0.2])
    assert all_of([yes, none]).label == "no effect at this scale"
    both = all_of([unsure_a, unsure_b, yes])
    assert both.outcome == "inconclusive" and both.needed == max(unsure_a.needed, unsure_b.needed)
