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
