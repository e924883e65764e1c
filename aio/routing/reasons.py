"""Why a request was served where it was: the routing reason in responses, the SQL log and the dashboard. The one
place these names are written."""
from __future__ import annotations

from enum import Enum


class Reason(str, Enum):
    CLASSIFIER = "classifier"  # the router's rule (quality target or knob) on the classifier's scores
    EXPLICIT = "explicit"  # the client named a tier or a model
    STICKY = "sticky"  # the conversation's earlier tier, larger than this turn alone needs
    RECENT_FAILURE = "recent-failure"  # a near-duplicate of an answer the quality monitor failed went a tier up
    STRUCTURED_MIN_TIER = "structured_min_tier"  # tools or a JSON format: not below `structured_min_tier`
    ESCALATION = "escalation"  # the prompt does not fit the chosen tier's context: the next larger that holds it
    FALLBACK = "fallback"  # the chosen tier is down: the next larger one that is up
    CASCADE = "cascade"  # the answer was judged unsure and answered again on a larger tier

    def __str__(self) -> str:
        return self.value


ROUTED = (Reason.CLASSIFIER.value, Reason.ESCALATION.value)  # decisions the classifier's scores made
