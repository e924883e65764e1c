"""What the server logged about the benchmark's requests: one row per request (tier, cost, latency, the
classifier's per-tier scores, the cascade's columns) and the quality monitor's verdicts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from aio.db.models import Request, Verification


@dataclass(frozen=True)
class LoggedRequest:
    request_id: str
    tier: str | None
    routing_reason: str | None
    tier_scores: list[float] | None
    cost_usd: float
    baseline_cost_usd: float
    ttft_ms: float | None
    latency_ms: float | None
    cascade_from_tier: str | None
    cascade_cost_usd: float | None


@dataclass(frozen=True)
class LoggedVerdict:
    request_id: str
    tier: str
    passed: bool
    similarity: float
    method: str
    answer: str | None
    reference_answer: str | None


def _chunks(ids: list[str], size: int = 500) -> Iterable[list[str]]:
    for i in range(0, len(ids), size):
        yield ids[i:i + size]


def logged_requests(database_url: str, request_ids: Iterable[str]) -> dict[str, LoggedRequest]:
    engine = sa.create_engine(database_url)
    out: dict[str, LoggedRequest] = {}
    try:
        with Session(engine) as session:
            for chunk in _chunks([r for r in request_ids if r]):
                for row in session.scalars(sa.select(Request).where(Request.request_id.in_(chunk))):
                    out[row.request_id] = LoggedRequest(
                        row.request_id, row.tier, row.routing_reason, row.tier_scores, row.cost_usd,
                        row.baseline_cost_usd, row.ttft_ms, row.latency_ms, row.cascade_from_tier,
                        row.cascade_cost_usd)
    finally:
        engine.dispose()
    return out


def logged_verdicts(database_url: str, request_ids: Iterable[str]) -> dict[str, LoggedVerdict]:
    """The latest verdict per request."""
    engine = sa.create_engine(database_url)
    out: dict[str, LoggedVerdict] = {}
    try:
        with Session(engine) as session:
            for chunk in _chunks([r for r in request_ids if r]):
                query = sa.select(Verification).where(Verification.request_id.in_(chunk)).order_by(Verification.id)
                for row in session.scalars(query):
                    out[row.request_id] = LoggedVerdict(row.request_id, row.tier, row.passed, row.similarity,
                                                        row.method, row.answer, row.reference_answer)
    finally:
        engine.dispose()
    return out
