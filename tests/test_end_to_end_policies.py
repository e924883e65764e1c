"""benchmarks.end_to_end's accounting of policies on per-tier answers (synthetic answers, worked by hand)."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.end_to_end.curves import CurvePoint, cost_at, fit_threshold, intervals
from benchmarks.end_to_end.policies import TierAnswers, auto, cascade, fixed, oracle, routed_tiers

NAN = float("nan")


@pytest.fixture()
def answers() -> TierAnswers:
    # task 0: small right; task 1: only large right; task 2: medium and large right; task 3: nobody right
    correct = np.array([[1, 1, 1], [0, 0, 1], [0, 1, 1], [0, 0, 0]], bool)
    cost = np.array([[1.0, 4.0, 10.0]] * 4)
    confidence = np.array([[-0.1, -0.2, -0.1], [-2.0, -1.5, -0.3], [-1.0, -0.2, -0.1], [NAN, -3.0, -2.0]])
    return TierAnswers(correct, cost, confidence)


def test_fixed_and_oracle(answers):
    large = fixed(answers, 2)
    assert large.accuracy(answers) == 0.75 and large.cost_fraction(answers) == 1.0
    best = oracle(answers)
    assert best.tier.tolist() == [0, 2, 1, 0]  # nobody right: the cheapest
    assert best.cost_fraction(answers) == pytest.approx((1 + 10 + 4 + 1) / 40)
    assert best.accuracy(answers) == 0.75


def test_the_cascade_pays_every_answer_it_made_and_stops_on_unknown_confidence(answers):
    choice = cascade(answers, np.array([0, 0, 0, 0]), threshold=-0.5)
    # 0: confident on small; 1: small -2.0 -> medium -1.5 -> large; 2: small -1.0 -> medium -0.2 stays;
    # 3: small's confidence unknown: never escalated
    assert choice.tier.tolist() == [0, 2, 1, 0]
    assert choice.cost.tolist() == [1.0, 15.0, 5.0, 1.0]
    assert choice.accuracy(answers) == 0.75


def test_the_cascade_starts_at_the_routed_tier(answers):
    choice = cascade(answers, np.array([2, 1, 1, 1]), threshold=-0.5)
    assert choice.tier.tolist() == [2, 2, 1, 2]
    assert choice.cost.tolist() == [10.0, 14.0, 4.0, 14.0]


def test_auto_routes_with_the_products_router():
    scores = np.array([[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    assert routed_tiers(scores, 0.5).tolist() == [0, 1, 2]
    assert routed_tiers(scores, 0.0).tolist() == [0, 0, 0]
    assert routed_tiers(scores, 1.0).tolist() == [2, 2, 2]
    cost = np.array([[1.0, 4.0, 10.0]] * 3)
    tiers = TierAnswers(np.ones((3, 3), bool), cost, np.zeros((3, 3)))
    assert auto(tiers, scores, 0.5).cost.tolist() == [1.0, 4.0, 10.0]


def test_cost_at_reads_the_cheapest_point_that_reaches_the_target():
    points = [CurvePoint(0.0, 0.5, 0.1), CurvePoint(0.5, 0.8, 0.4), CurvePoint(0.7, 0.79, 0.3),
              CurvePoint(1.0, 0.8, 1.0)]
    assert cost_at(points, 0.8) == 0.4
    assert np.isnan(cost_at(points, 0.9))


def test_the_threshold_separates_wrong_from_right_answers():
    confidence = np.array([-2.0, -1.5, -1.2, -0.4, -0.3, -0.1, NAN])
    wrong = np.array([1, 1, 0, 0, 0, 0, 1], bool)
    threshold = fit_threshold(confidence, wrong)
    assert -1.5 < threshold < -1.2
    with pytest.raises(ValueError):
        fit_threshold(confidence, np.zeros(7, bool))


def test_bootstrap_intervals_hold_the_point_estimate_and_open_above_when_a_target_is_missed():
    values = np.arange(100, dtype=float)
    ci = intervals(100, lambda rows: {"mean": values[rows].mean(), "never": NAN}, resamples=300)
    assert ci["mean"][0] < 49.5 < ci["mean"][1] and ci["mean"][1] - ci["mean"][0] < 20
    assert ci["never"] == (np.inf, np.inf)
