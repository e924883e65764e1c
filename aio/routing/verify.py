"""Step 5 of the routing policy (`policy`): judging an answer, and route-then-verify over a table of per-tier
answers (steps 2 and 5 at once), which the routing fit chooses its thresholds with and the end-to-end benchmark
scores."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aio.routing.quality_target import TargetRule


@dataclass(frozen=True)
class Verifier:
    """Step 5: escalate an answer whose score is below its tier's threshold (the largest tier is never judged)."""
    thresholds: dict[str, float]

    def escalates(self, tier: str, score: float | None) -> bool:
        """An answer of unknown score (no logprobs: a remote tier) is never escalated."""
        threshold = self.thresholds.get(tier)
        return threshold is not None and score is not None and score < threshold


@dataclass
class PolicyOutcome:
    """Per task: the tier whose answer is served, and what every answer made for it cost."""
    tier: np.ndarray
    cost: np.ndarray


def route_then_verify(p_right: np.ndarray, answer_scores: np.ndarray, cost: np.ndarray, rule: TargetRule,
                      thresholds: tuple[float, ...]) -> PolicyOutcome:
    """`p_right`: (n, tiers) P(tier right | prompt); `answer_scores`: (n, tiers) each tier's answer's P(right), NaN
    where unknown; `cost`: (n, tiers) what each tier's answer cost; `thresholds`: per tier but the last. The first
    tier is the rule's; an answer scored below its tier's threshold goes one tier up (judged in turn)."""
    rows = np.arange(len(p_right))
    tier = rule.choose(p_right)
    spent = cost[rows, tier].copy()
    limits = np.asarray(list(thresholds) + [-np.inf])
    for _ in range(p_right.shape[1] - 1):
        score = answer_scores[rows, tier]
        escalate = (tier < p_right.shape[1] - 1) & ~np.isnan(score) & (score < limits[tier])
        if not escalate.any():
            break
        tier = np.where(escalate, tier + 1, tier)
        spent = spent + np.where(escalate, cost[rows, tier], 0.0)
    return PolicyOutcome(tier, spent)
