"""The quality target: per-tier calibration on outcomes, the cheapest rule that meets the target, the estimate and
its interval, and the estimate over routed traffic (checked against outcomes drawn from known probabilities)."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
import sqlalchemy as sa

from aio.db.database import make_engine
from aio.db.migrate import upgrade
from aio.db.models import Request
from aio.db.records import utcnow
from aio.routing.outcome_fit import RoutingFit, fit_routing
from aio.routing.quality_estimate import MIN_REQUESTS, quality_estimate
from aio.routing.quality_target import TargetRule, relative_accuracy, rule_for_target
from classifier.outcome_calibration import fit_tier_calibration, score_features

TIERS = ("small", "medium", "large")


def synthetic(n: int, seed: int):
    """Classifier scores, and outcomes drawn from P(tier right) = sigmoid of a known function of those scores."""
    rng = np.random.default_rng(seed)
    p_small = rng.uniform(0.05, 0.95, n)
    p_medium = rng.uniform(0.0, 1.0, n) * (1 - p_small)
    proba = np.column_stack([p_small, p_medium, 1 - p_small - p_medium])
    x = score_features(proba)
    truth = 1 / (1 + np.exp(-np.column_stack([-2.0 + 1.5 * x[:, 0], -0.5 + 1.0 * x[:, 1], 0.2 + 0.5 * x[:, 1]])))
    correct = (rng.uniform(size=truth.shape) < truth).astype(float)
    cost = np.tile([0.14, 0.40, 1.0], (n, 1)) * rng.uniform(0.5, 1.5, (n, 1))
    return proba, truth, correct, cost


def test_calibration_recovers_the_outcome_probabilities():
    proba, truth, correct, _ = synthetic(6000, 0)
    predicted = fit_tier_calibration(proba, correct, TIERS).predict(proba)
    assert np.abs(predicted - truth).mean(axis=0).max() < 0.03


def test_a_tier_whose_outcomes_are_all_alike_gets_a_smoothed_constant():
    proba, _, correct, _ = synthetic(50, 1)
    correct[:, 0] = 0
    predicted = fit_tier_calibration(proba, correct, TIERS).predict(proba)
    assert np.allclose(predicted[:, 0], 1 / 52)


def test_the_rule_is_the_cheapest_that_reaches_the_target_and_lambda_zero_is_the_most_accurate():
    proba, truth, _, _ = synthetic(2000, 2)
    share = (0.14, 0.40, 1.0)
    for target in (0.8, 0.9, 0.95):
        rule = rule_for_target(truth, share, target)
        assert relative_accuracy(truth, rule.choose(truth)) >= target
        cheaper = TargetRule(share, rule.lam * 1.05 + 1e-4)
        assert relative_accuracy(truth, cheaper.choose(truth)) < target or rule.lam == 0
    most = TargetRule(share, 0.0).choose(truth)
    assert np.array_equal(most, truth.argmax(axis=1))
    with pytest.raises(ValueError):
        rule_for_target(truth, share, 0.0)


def test_the_estimate_holds_on_new_prompts_within_its_interval():
    proba, _, correct, cost = synthetic(3000, 3)
    fit = fit_routing(proba, correct, cost, TIERS, 0.9, "v1", {t: t for t in TIERS})
    new_proba, new_truth, new_correct, _ = synthetic(20000, 4)
    chosen = fit.choose(new_proba)
    estimate = fit.estimate_for(new_proba, chosen)
    realised = new_correct[np.arange(len(chosen)), chosen].sum() / new_correct[:, 2].sum()
    assert estimate.low <= realised <= estimate.high
    assert abs(estimate.relative_accuracy - realised) < 0.02
    again = RoutingFit.from_dict(fit.to_dict())
    assert np.array_equal(again.choose(new_proba), chosen)


def test_the_traffic_estimate_reads_routed_requests_and_leaves_named_models_out(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'aio.db'}")
    upgrade(engine)
    proba, _, correct, cost = synthetic(1500, 5)
    fit = fit_routing(proba, correct, cost, TIERS, 0.9, "v1", {t: t for t in TIERS})
    now = utcnow()
    traffic, _, _, _ = synthetic(MIN_REQUESTS + 30, 6)
    chosen = fit.choose(traffic)
    with engine.begin() as connection:
        for i, (row, tier) in enumerate(zip(traffic, chosen)):
            connection.execute(sa.insert(Request).values(
                request_id=f"r{i}", created_at=now, status="ok", tier=TIERS[tier], routing_reason="classifier",
                tier_scores=row.tolist()))
        connection.execute(sa.insert(Request).values(request_id="named", created_at=now, status="ok", tier="small",
                                                     routing_reason="explicit", tier_scores=[0.01, 0.01, 0.98]))
    with engine.connect() as connection:
        live = quality_estimate(connection, fit, now - timedelta(hours=1), now + timedelta(hours=1))
        empty = quality_estimate(connection, fit, now - timedelta(days=9), now - timedelta(days=8))
        assert quality_estimate(connection, None, now, now) is None
    assert live["on"] == "routed traffic" and live["num_requests"] == MIN_REQUESTS + 30
    assert live["relative_accuracy"] == pytest.approx(relative_accuracy(fit.p_right(traffic), chosen))
    assert live["low"] <= live["relative_accuracy"] <= live["high"]
    assert empty["on"] == "probe prompts" and empty["relative_accuracy"] == fit.estimate.relative_accuracy
