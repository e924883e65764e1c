"""Route, then verify: the answer scorer fitted to the probe's answers, and the first-tier rule and escalation
thresholds that meet a quality target at the least cost on the probe's outcomes (docs/routing.md, "Escalation that
reads the answer").

Policy. Each cheaper tier gets a scorer (`classifier.answer_scorer`) fitted on its probe answers. The thresholds are
chosen on scores the scorer gave answers it was not fitted on (5-fold cross-fitting), by simulating the policy
(`policy.route_then_verify`) on the probe's real outcomes and costs: among (λ, thresholds) whose accuracy reaches the
target share of always-largest's, the cheapest. Every answer a request gets is paid for, so escalation is chosen
only where it pays; when none does, the thresholds are 0 (no escalation).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from aio.routing.verify import route_then_verify
from aio.routing.quality_target import LAMBDA_GRID, TargetRule
from classifier.answer_scorer import AnswerEvidence, AnswerScorer, answer_features, fit_tier_scorer

FOLDS = 5
THRESHOLDS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6)
LAMBDAS = LAMBDA_GRID[::6]


@dataclass(frozen=True)
class EscalationRule:
    rule: TargetRule  # the first tier's
    thresholds: tuple[float, ...]  # per tier but the last: an answer scored below it escalates
    accuracy: float  # on the probe's outcomes, relative to always-largest (cross-fitted scores)
    cost_share: float


def evidence(result) -> AnswerEvidence:
    return AnswerEvidence(result.answer or "", result.token_logprobs, result.token_margins, result.finish_reason)


def feature_table(results: Sequence[dict], tier: str, p_right: np.ndarray, column: int) -> tuple[np.ndarray, np.ndarray]:
    """(row indices, features) of the tasks `tier` answered with logprobs."""
    rows, features = [], []
    for i, by_tier in enumerate(results):
        result = by_tier.get(tier)
        x = answer_features(evidence(result), float(p_right[i, column])) if result is not None else None
        if x is not None:
            rows.append(i)
            features.append(x)
    return np.asarray(rows, dtype=int), np.asarray(features).reshape(len(rows), -1)


def fit_scorers(results: Sequence[dict], tiers: tuple[str, ...], p_right: np.ndarray, correct: np.ndarray,
                seed: int = 0) -> tuple[AnswerScorer, np.ndarray]:
    """The scorer of every tier but the last, and cross-fitted scores (n, tiers): NaN where a tier gave no answer
    with logprobs, and for the last tier."""
    scorers, scores = {}, np.full(correct.shape, np.nan)
    for column, tier in enumerate(tiers[:-1]):
        rows, x = feature_table(results, tier, p_right, column)
        y = correct[rows, column]
        fitted = fit_tier_scorer(x, y) if len(rows) else None
        if fitted is None:
            continue
        scorers[tier] = fitted
        order = np.random.default_rng(seed + column).permutation(len(rows))
        for k in range(FOLDS):
            held = order[k::FOLDS]
            part = fit_tier_scorer(x[np.setdiff1d(order, held)], y[np.setdiff1d(order, held)])
            scores[rows[held], column] = part.predict(x[held]) if part is not None else fitted.predict(x[held])
    return AnswerScorer(scorers), scores


def choose_escalation(p_right: np.ndarray, scores: np.ndarray, correct: np.ndarray, cost: np.ndarray,
                      cost_share: tuple[float, ...], target: float) -> EscalationRule:
    """The cheapest (λ, thresholds) whose accuracy on these outcomes reaches `target` × always-largest's; the
    most accurate when none does. Rows with an outcome for every tier only."""
    full = ~np.isnan(correct).any(axis=1)
    p_right, scores, correct, cost = p_right[full], scores[full], correct[full], cost[full]
    baseline_correct, baseline_cost = max(correct[:, -1].sum(), 1e-9), max(cost[:, -1].sum(), 1e-12)
    grids = [THRESHOLDS] * (correct.shape[1] - 1)
    best: EscalationRule | None = None
    for lam in LAMBDAS:
        rule = TargetRule(cost_share, float(lam))
        for thresholds in _product(grids):
            outcome = route_then_verify(p_right, scores, cost, rule, thresholds)
            accuracy = correct[np.arange(len(correct)), outcome.tier].sum() / baseline_correct
            spent = outcome.cost.sum() / baseline_cost
            candidate = EscalationRule(rule, thresholds, float(accuracy), float(spent))
            if best is None or _better(candidate, best, target):
                best = candidate
    return best


def _better(a: EscalationRule, b: EscalationRule, target: float) -> bool:
    a_ok, b_ok = a.accuracy >= target - 1e-12, b.accuracy >= target - 1e-12
    if a_ok != b_ok:
        return a_ok
    if a_ok:
        return (a.cost_share, -a.accuracy) < (b.cost_share, -b.accuracy)
    return (a.accuracy, -a.cost_share) > (b.accuracy, -b.cost_share)


def _product(grids: list[tuple[float, ...]]):
    if not grids:
        yield ()
        return
    for head in grids[0]:
        for rest in _product(grids[1:]):
            yield (head, *rest)
