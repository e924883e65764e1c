"""Retention of raw rows: `requests` (and their `verifications`) older than `raw_retention_days` are deleted; the
daily aggregates, histograms and usage sums they were counted into stay, so the dashboard's long ranges and the
cost report keep working. The answer cache's SQL entries older than the cutoff go too."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from aio.db.models import AnswerCacheEntry, Request, Verification
from aio.db.records import utcnow

logger = logging.getLogger(__name__)

PRUNE_CHUNK = 5_000  # rows per transaction: short locks on SQLite
PRUNE_INTERVAL_S = 3600.0


@dataclass(frozen=True)
class PruneResult:
    cutoff: datetime
    requests: int
    verifications: int


def prune_raw_rows(engine: Engine, retention_days: int, now: datetime | None = None) -> PruneResult:
    """Deletes raw rows created before `now - retention_days` days, in chunks; aggregates are kept."""
    if retention_days < 1:
        raise ValueError(f"raw_retention_days must be at least 1, got {retention_days}")
    cutoff = (now or utcnow()) - timedelta(days=retention_days)
    num_requests = num_verifications = 0
    while True:
        with engine.begin() as connection:
            ids = list(connection.execute(sa.select(Request.request_id).where(Request.created_at < cutoff)
                                          .limit(PRUNE_CHUNK)).scalars())
            if not ids:
                break
            num_verifications += connection.execute(
                sa.delete(Verification).where(Verification.request_id.in_(ids))).rowcount
            num_requests += connection.execute(sa.delete(Request).where(Request.request_id.in_(ids))).rowcount
    with engine.begin() as connection:  # cached answers follow the log's retention
        connection.execute(sa.delete(AnswerCacheEntry).where(AnswerCacheEntry.created_at < cutoff))
    return PruneResult(cutoff, num_requests, num_verifications)


async def prune_periodically(engine: Engine, retention_days: int, interval_s: float = PRUNE_INTERVAL_S) -> None:
    """`aio serve`'s background prune (when `raw_retention_days` is set): at start, then every `interval_s`."""
    while True:
        try:
            result = await asyncio.to_thread(prune_raw_rows, engine, retention_days)
            if result.requests:
                logger.info("pruned %d raw request rows (and %d verifications) older than %s; aggregates kept",
                            result.requests, result.verifications, result.cutoff.isoformat())
        except Exception as exc:  # the database may be away: try again next time
            logger.warning("pruning raw request rows failed: %s", exc)
        await asyncio.sleep(interval_s)
