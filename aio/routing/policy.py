"""The routing decision, in order: one module owns the steps and what each may do.

1. **Score.** `auto`: the classifier's per-tier probabilities of the conversation's text (micro-batched,
   `batcher`); a named tier or model skips routing (`Reason.EXPLICIT`).
2. **The target's thresholds.** `Router.decide`: once the tiers are measured, P(tier right) from the routing fit
   and the quality target's rule; before that, or when a knob overrides it, the quality knob.
3. **Context.** `ContextRouting.adjust`: a sticky conversation or a near-duplicate of a recent failure may move the
   tier up, never down (`Reason.STICKY`, `Reason.RECENT_FAILURE`); then `structured_min_tier` for tools / JSON.
4. **First tier.** `TierSelector.select` at serving time: a prompt too long for the tier escalates, a tier that is
   down falls back (`Reason.ESCALATION`, `Reason.FALLBACK`).
5. **Verify / escalate.** After the answer (requests that cascade: `aio.chat.cascade`): the answer scorer's
   P(right) against the tier's threshold (`Verifier`), or, without a fitted scorer, the answer's confidence;
   below it the request is answered again on the next larger tier (`Reason.CASCADE`), both answers paid for.

`route_then_verify` is steps 2 and 5 over a table of per-tier answers: what the fit chooses its thresholds with
and what the end-to-end benchmark scores, one implementation for both.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aio.routing.quality_target import TargetRule
from aio.routing.reasons import Reason

__all__ = ["Reason", "Verifier", "route_then_verify", "PolicyOutcome"]


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
