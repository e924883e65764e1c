"""Plain records the server hands to the SQL log (no SQLAlchemy here: the request path never touches the DB)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class RequestRecord:
    """One chat request as it ended. `request_id` is unique: the log stores each one exactly once."""
    request_id: str
    status: str  # "ok" | "error" (the engine or a remote tier failed) | "cancelled" (the client went away) | "rejected"
    created_at: datetime = field(default_factory=utcnow)  # when the request arrived (UTC)
    tier: str | None = None  # the tier that answered (None when rejected before routing)
    model: str | None = None  # the model name that answered
    routing_reason: str | None = None  # "classifier" | "explicit" | "escalation" | "fallback" | "cascade" | ...
    classifier_version: str | None = None
    routing_score: float | None = None  # the classifier's probability that the chosen tier answers well
    tier_scores: list[float] | None = None  # the classifier's per-tier probabilities
    quality: float | None = None  # the quality knob in force for this request
    key_id: int | None = None  # the API key (None when the endpoint is open)
    user: str | None = None  # the OpenAI `user` field
    prompt: str | None = None  # the messages as JSON (None when prompts are redacted)
    answer: str | None = None  # the first choice's text (None when redacted)
    prompt_tokens: int = 0
    completion_tokens: int = 0  # over all choices
    cost_usd: float = 0.0  # with a cascade, the replaced answers' cost included
    baseline_cost_usd: float = 0.0  # what the large tier would have cost for the same tokens (the served answer's)
    ttft_ms: float | None = None
    latency_ms: float | None = None  # end to end, arrival to last byte
    itl_ms: float | None = None  # mean inter-token latency of the first choice (None with fewer than 2 tokens)
    queue_ms: float | None = None  # time the request waited for the engine, when the tier reports it
    finish_reason: str | None = None  # of the first choice
    stream: bool = False
    num_choices: int = 1
    http_status: int = 200
    error: str | None = None
    replica: str | None = None  # the server that answered (settings.replica)
    # the confidence cascade (aio.chat.cascade): the served answer's confidence, when the request was judged; and
    # when a cheaper tier's answer was replaced (routing_reason "cascade"): that tier, that first answer's
    # confidence, and what the replaced answers cost (included in cost_usd)
    confidence: float | None = None
    cascade_from_tier: str | None = None
    cascade_confidence: float | None = None
    cascade_cost_usd: float | None = None
    cache_hit: bool = False  # answered from the answer cache (no tokens billed)
    cache_saved_usd: float | None = None  # on a hit: what the cached answer cost when it was made
