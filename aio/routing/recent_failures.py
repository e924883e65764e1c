"""Recent failed verifications: a request that is a near-duplicate of one whose answer the quality monitor failed
goes at least one tier above the failed tier, until a retrain learns from those verdicts.

Nearest neighbour by cosine over the classifier's own sentence embeddings (the request's embedding comes from the
same encoder pass that scored it). Each failure remembers the classifier version that routed it; when a new
version is in service (a retrain, a promotion), the old failures no longer apply. At most `max_items` are
kept (oldest go first); entries older than `ttl_s` are ignored.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from aio.settings import TIER_ORDER



@dataclass(frozen=True)
class FailureMatch:
    similarity: float
    failed_tier: str
    min_tier: str  # the smallest tier the request may now go to


@dataclass
class _Failure:
    embedding: np.ndarray
    tier: str
    version: str | None
    at: float


class RecentFailures:
    def __init__(self, similarity: float = 0.92, max_items: int = 2048, ttl_s: float = 7 * 86400.0) -> None:
        if not 0.0 < similarity <= 1.0:
            raise ValueError(f"similarity must be in (0, 1], got {similarity}")
        if max_items < 1 or ttl_s <= 0:
            raise ValueError(f"max_items must be >= 1 and ttl_s > 0, got {max_items}, {ttl_s}")
        self.similarity, self.ttl_s = similarity, ttl_s
        self._items: deque[_Failure] = deque(maxlen=max_items)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, embedding: np.ndarray, tier: str, version: str | None, now: float | None = None) -> None:
        """A failed verification of an answer from `tier`, routed by classifier `version`."""
        if tier not in TIER_ORDER:
            raise ValueError(f"unknown tier {tier!r}")
        e = np.asarray(embedding, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(e))
        if norm == 0.0 or not np.isfinite(norm):
            return
        with self._lock:
            self._items.append(_Failure(e / norm, tier, version, time.monotonic() if now is None else now))

    def match(self, embedding: np.ndarray | None, version: str | None, tiers: list[str],
              now: float | None = None) -> FailureMatch | None:
        """The most similar live failure of this classifier version at or above `similarity`, with the tier
        above the failed one among `tiers` (None if none matches or no larger tier is configured)."""
        if embedding is None:
            return None
        now = time.monotonic() if now is None else now
        with self._lock:
            live = [f for f in self._items if f.version == version and now - f.at <= self.ttl_s]
        if not live:
            return None
        e = np.asarray(embedding, dtype=np.float32).reshape(-1)
        e = e / max(float(np.linalg.norm(e)), 1e-12)
        sims = np.stack([f.embedding for f in live]) @ e
        best = int(np.argmax(sims))
        if sims[best] < self.similarity - 1e-6:
            return None
        failed = live[best].tier
        above = [t for t in tiers if TIER_ORDER.index(t) > TIER_ORDER.index(failed)]
        if not above:
            return None
        return FailureMatch(float(sims[best]), failed, min(above, key=TIER_ORDER.index))
