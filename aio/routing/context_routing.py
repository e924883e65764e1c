"""What the router adds beyond one text's scores: the conversation's tier so far (`conversation`) and recent failed
verifications of near-duplicate requests (`recent_failures`). Applied after `Router.decide`, in that order:
a near-duplicate of a recent failure goes above the failed tier, then the conversation never moves down."""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import numpy as np

from aio.routing.conversation import ConversationKeys, ConversationTiers, conversation_keys
from aio.routing.reasons import Reason
from aio.routing.recent_failures import RecentFailures
from aio.routing.router import RoutingDecision
from aio.settings import TIER_ORDER

logger = logging.getLogger(__name__)


class ContextRouting:
    def __init__(self, conversations: ConversationTiers | None = None, failures: RecentFailures | None = None
                 ) -> None:
        self.conversations = conversations if conversations is not None else ConversationTiers()
        self.failures = failures if failures is not None else RecentFailures()

    def adjust(self, decision: RoutingDecision, tiers: list[str], *, messages: Any, user: str | None = None,
               session: str | None = None, owner: str | None = None, embedding: np.ndarray | None = None
               ) -> tuple[RoutingDecision, ConversationKeys]:
        """The decision after recent failures and stickiness, and the conversation's keys (for `served`)."""
        if decision.reason == Reason.CLASSIFIER:
            match = self.failures.match(embedding, decision.classifier_version, tiers)
            if match is not None and TIER_ORDER.index(match.min_tier) > TIER_ORDER.index(decision.tier):
                logger.info("routing up to %s: similar (%.3f) to a recent failed verification on %s", match.min_tier,
                            match.similarity, match.failed_tier)
                decision = replace(decision, tier=match.min_tier, reason=Reason.RECENT_FAILURE)
        keys = conversation_keys(messages, user, session, owner)
        if decision.reason == Reason.EXPLICIT:
            return decision, keys  # a named model is the client's choice (`served` still remembers its tier)
        return self.conversations.apply(decision, keys, tiers), keys

    def served(self, keys: ConversationKeys, tier: str) -> None:
        """The tier a turn was finally served on (escalation and fallback can only raise it)."""
        self.conversations.record(keys, tier)

    def failed_verification(self, embedding: np.ndarray, tier: str, version: str | None) -> None:
        self.failures.add(embedding, tier, version)


class FailureFeed:
    """A quality-monitor verdict store that also hands each failed verification to `ContextRouting` (embedded
    with the classifier in service, off the request path: the monitor saves verdicts in a worker thread)."""

    def __init__(self, store: Any, routing: ContextRouting, classifier: Any) -> None:
        self.store = store
        self.routing = routing
        self.classifier = classifier  # a callable returning the classifier in service (it may be swapped)

    def save(self, verdict: Any) -> None:
        self.store.save(verdict)
        if verdict.passed:
            return
        clf = self.classifier()
        embed = getattr(clf, "embed", None)
        if embed is None:
            return  # the heuristic router has no embeddings to compare
        from classifier.features import messages_to_text

        try:
            embedding = embed([messages_to_text(verdict.candidate.messages)])[0]
        except Exception:  # best effort: the verdict is stored either way
            logger.exception("embedding a failed verification for the recent-failures memory failed")
            return
        self.routing.failed_verification(embedding, verdict.candidate.tier, verdict.candidate.classifier_version)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)
