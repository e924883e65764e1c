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

`verify.route_then_verify` is steps 2 and 5 over a table of per-tier answers: what the fit chooses its
thresholds with and what the end-to-end benchmark scores, one implementation for both.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from aio.routing.batcher import ClassifierBatcher
from aio.routing.context_routing import ContextRouting
from aio.routing.conversation import ConversationKeys
from aio.routing.reasons import Reason
from aio.routing.router import Router, RoutingDecision
from aio.routing.verify import PolicyOutcome, Verifier, route_then_verify
from aio.settings import TIER_ORDER

__all__ = ["Reason", "RoutingPolicy", "Verifier", "route_then_verify", "PolicyOutcome"]

CLASSIFIER_MAX_CHARS = 32_768  # the classifier reads at most this much of a prompt (its features cut earlier)


class RoutingPolicy:
    """Steps 1-3 for one request; step 4 is `aio.chat.tier_selection`'s at serving time, step 5 `Verifier`'s."""

    def __init__(self, router: Router, tiers: list[str], batcher: ClassifierBatcher, context: ContextRouting,
                 structured_min_tier: str | None = None) -> None:
        self.router = router
        self.tiers = tiers
        self.batcher = batcher
        self.context = context
        self.structured_min_tier = structured_min_tier

    async def decide(self, named_tier: str | None, messages: list[dict[str, Any]], *, quality: float | None = None,
                     structured: bool = False, verify: bool = False, user: str | None = None,
                     session: str | None = None, owner: str | None = None
                     ) -> tuple[RoutingDecision, ConversationKeys]:
        """`named_tier`: the tier the client named (None: `auto`); `structured`: tools or a JSON format; `verify`:
        the answer will be judged (the first tier is then the route-then-verify rule's)."""
        decision, embedding = await self._score(named_tier, messages, quality, verify)
        decision, conversation = self.context.adjust(decision, self.tiers, messages=messages, user=user,
                                                     session=session, owner=owner, embedding=embedding)
        return self._structured_floor(decision, structured), conversation

    async def _score(self, named_tier: str | None, messages: list[dict[str, Any]], quality: float | None,
                     verify: bool) -> tuple[RoutingDecision, np.ndarray | None]:
        if named_tier is not None:
            return RoutingDecision(named_tier, Reason.EXPLICIT), None
        from classifier.features import messages_to_text

        classifier = self.router.classifier  # may be swapped meanwhile: decide with the one that scored
        score = await self.batcher.score(classifier, messages_to_text(messages)[:CLASSIFIER_MAX_CHARS])
        return self.router.decide(score.proba, quality, score.classifier, verify), score.embedding

    def _structured_floor(self, decision: RoutingDecision, structured: bool) -> RoutingDecision:
        """A routed request with tools or a JSON format goes at least to `structured_min_tier`, when set."""
        floor = self.structured_min_tier
        if floor is None or decision.reason == Reason.EXPLICIT or not structured or floor not in self.tiers \
                or TIER_ORDER.index(decision.tier) >= TIER_ORDER.index(floor):
            return decision
        return replace(decision, tier=floor, reason=Reason.STRUCTURED_MIN_TIER)
