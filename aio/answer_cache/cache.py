"""The answer cache's policy: which requests use it, the lookup before routing, and the store after an answer.

A request uses the cache when the server has a store (`answer_cache = "memory"` or `"sql"`), the request is not
streamed, it is deterministic (temperature 0, or a seed), and it does not say `aio_cache: false` (with
`answer_cache_opt_in = true`, only requests that say `aio_cache: true` use it). Asking for the cache
(`aio_cache: true`) on a request that cannot use it is a 400, not a silent miss. Only whole answers are stored: a
200 whose choices all finished ("stop", "length", "tool_calls").
"""
from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from aio.answer_cache.key import cache_key, is_deterministic
from aio.answer_cache.stores import AnswerStore, CachedAnswer, MemoryStore, retention_cutoff
from aio.api.errors import invalid_request
from aio.api.schemas import ChatCompletionRequest
from aio.db.records import utcnow

logger = logging.getLogger(__name__)

STORED_FINISHES = frozenset({"stop", "length", "tool_calls"})
CACHE_HEADER = "x-aio-cache"  # hit | miss | bypass


@dataclass(frozen=True)
class CacheLookup:
    """A request's place in the cache: `key` None when it bypasses it; `answer` set on a hit."""
    key: str | None
    answer: CachedAnswer | None = None

    @property
    def status(self) -> str:
        return "bypass" if self.key is None else "hit" if self.answer is not None else "miss"


class AnswerCache:
    def __init__(self, store: AnswerStore | None, scope: str = "key", opt_in: bool = False,
                 retention_days: int | None = None, clock: Callable[[], datetime] = utcnow) -> None:
        if scope not in ("key", "shared"):
            raise ValueError(f"answer_cache_scope is 'key' or 'shared', got {scope!r}")
        self.store = store
        self.scope = scope
        self.opt_in = opt_in
        self.retention_days = retention_days
        self._clock = clock

    def key_for(self, body: ChatCompletionRequest, key_id: int | None, tiers: list[tuple[str, str]]) -> str | None:
        """The request's cache key, or None when it bypasses the cache; a 400 when it asks for the cache and
        cannot use it."""
        asked = body.aio_cache
        if asked is True:
            if self.store is None:
                raise invalid_request("aio_cache: this server has no answer cache (answer_cache = \"off\")",
                                      "aio_cache")
            if body.stream:
                raise invalid_request("aio_cache: streamed requests are not answered from the cache", "aio_cache")
            if not is_deterministic(body):
                raise invalid_request("aio_cache: only deterministic requests are cached: set temperature to 0 or "
                                      "give a seed", "aio_cache")
        if self.store is None or asked is False or (self.opt_in and asked is not True) or body.stream \
                or not is_deterministic(body):
            return None
        scope = "shared" if self.scope == "shared" else f"key:{key_id if key_id is not None else '-'}"
        return cache_key(body, scope, tiers)

    async def lookup(self, body: ChatCompletionRequest, key_id: int | None,
                     tiers: list[tuple[str, str]]) -> CacheLookup:
        key = self.key_for(body, key_id, tiers)
        if key is None:
            return CacheLookup(None)
        not_before = retention_cutoff(self._clock(), self.retention_days)
        try:
            answer = await self._call(self.store.get, key, not_before)
        except Exception:  # the cache is an optimisation: a store that fails is a miss
            logger.exception("the answer cache could not be read")
            answer = None
        return CacheLookup(key, answer)

    async def save(self, lookup: CacheLookup, result: dict[str, Any], request_id: str) -> None:
        """Stores a whole answer (`result`: the response body) under the request's key."""
        if lookup.key is None or lookup.answer is not None:
            return
        if any(choice.get("finish_reason") not in STORED_FINISHES for choice in result.get("choices", [])):
            return
        aio = result.get("aio") or {}
        answer = CachedAnswer(json.dumps(result, separators=(",", ":"), ensure_ascii=False), aio.get("tier", ""),
                              result.get("model", ""), float(aio.get("cost_usd") or 0.0),
                              float(aio.get("baseline_cost_usd") or 0.0), request_id, self._clock())
        try:
            await self._call(self.store.put, lookup.key, answer)
        except Exception:
            logger.exception("the answer cache could not store request %s", request_id)

    async def _call(self, fn, *args):
        if isinstance(self.store, MemoryStore):
            return fn(*args)  # a dict lookup: no thread hop
        return await asyncio.to_thread(fn, *args)


def hit_body(answer: CachedAnswer, request_id: str, created: int) -> dict[str, Any]:
    """The response to a hit: the first answer's choices as they were, a new id, 0 tokens billed, and in `aio` the
    cost it saved (`cache.saved_usd`) and the request that produced it."""
    body = json.loads(answer.body)
    body["id"], body["created"] = f"chatcmpl-{request_id}", created
    body["usage"] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
                     "prompt_tokens_details": {"cached_tokens": 0}}
    aio = body.get("aio") or {}
    body["aio"] = {**aio, "routing_reason": "cache", "cost_usd": 0.0, "baseline_cost_usd": answer.baseline_cost_usd,
                   "cache": {"hit": True, "saved_usd": answer.cost_usd, "request_id": answer.request_id}}
    return body
