"""Where cached answers live: in this process's memory (LRU, bounded by entries), or in the SQL database's
`answer_cache` table (shared by replicas). An entry is the answer's JSON body and what producing it cost; its key is
a hash (`aio.answer_cache.key`), never the prompt. Entries older than the retention (the request log's
`raw_retention_days`) are not served and are deleted with the log's raw rows (`aio db prune`)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from aio.db.models import AnswerCacheEntry


@dataclass(frozen=True)
class CachedAnswer:
    body: str  # the first answer's response body (JSON text)
    tier: str
    model: str
    cost_usd: float  # what the first answer cost: what a hit saves
    baseline_cost_usd: float
    request_id: str  # the request that produced it
    created_at: datetime


class AnswerStore(Protocol):
    def get(self, key: str, not_before: datetime | None) -> CachedAnswer | None: ...

    def put(self, key: str, answer: CachedAnswer) -> None: ...


class MemoryStore:
    """At most `max_entries` answers, the least recently used evicted first. Thread-safe."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("the memory answer cache needs room for at least one entry")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, CachedAnswer] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, not_before: datetime | None) -> CachedAnswer | None:
        with self._lock:
            answer = self._entries.get(key)
            if answer is None:
                return None
            if not_before is not None and answer.created_at < not_before:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return answer

    def put(self, key: str, answer: CachedAnswer) -> None:
        with self._lock:
            self._entries[key] = answer
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


_INSERTS = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}


class SqlStore:
    """The `answer_cache` table: every replica on the database shares the entries (the first answer stored wins)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        table = AnswerCacheEntry.__table__
        self._insert = _INSERTS[engine.dialect.name](table).on_conflict_do_nothing(index_elements=[table.c.key_hash])

    def get(self, key: str, not_before: datetime | None) -> CachedAnswer | None:
        query = sa.select(AnswerCacheEntry).where(AnswerCacheEntry.key_hash == key)
        if not_before is not None:
            query = query.where(AnswerCacheEntry.created_at >= not_before)
        with self._engine.connect() as connection:
            row = connection.execute(query).first()
        if row is None:
            return None
        return CachedAnswer(row.body, row.tier, row.model, row.cost_usd, row.baseline_cost_usd, row.request_id,
                            row.created_at)

    def put(self, key: str, answer: CachedAnswer) -> None:
        with self._engine.begin() as connection:
            connection.execute(self._insert, {
                "key_hash": key, "body": answer.body, "tier": answer.tier, "model": answer.model,
                "cost_usd": answer.cost_usd, "baseline_cost_usd": answer.baseline_cost_usd,
                "request_id": answer.request_id, "created_at": answer.created_at})


def retention_cutoff(now: datetime, retention_days: int | None) -> datetime | None:
    return None if retention_days is None else now - timedelta(days=retention_days)
