"""The answer cache's key: SHA-256 over a canonical JSON of the whole request body but for the fields that provably
do not change the answer, plus the key scope and the tiers served.

Every field of `ChatCompletionRequest` is in the key (unknown extra fields too) except `EXCLUDED_FIELDS`:
- `user`: an end user's id for the log and conversation stickiness; it never reaches the engine;
- `aio_cache`: whether to use the cache, not what to answer.
A field added to the request model later joins the key by default (a miss is safe, a wrong hit is not). `stream`
and `stream_options` stay in the key: streamed requests bypass the cache anyway. The scope (`key:<API key id>`, or
`shared`) keeps one tenant's answers from another; the tiers' names and models make a changed tier a miss.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from aio.api.schemas import ChatCompletionRequest

EXCLUDED_FIELDS = frozenset({"user", "aio_cache"})
KEY_VERSION = 1  # bump when what goes into the key changes: old entries become misses


def is_deterministic(body: ChatCompletionRequest) -> bool:
    """Greedy decoding (temperature 0) or a seeded sampler: the same request gives the same answer."""
    return body.temperature == 0 or body.seed is not None


def canonical_body(body: ChatCompletionRequest) -> dict[str, Any]:
    """The body's fields in the key, as JSON values (defaults included, so `"n": 1` and no `n` are one key)."""
    data = body.model_dump(mode="json", by_alias=True)
    return {name: value for name, value in data.items() if name not in EXCLUDED_FIELDS}


def cache_key(body: ChatCompletionRequest, scope: str, tiers: list[tuple[str, str]]) -> str:
    """The hex SHA-256 key of `body` in `scope`, for the pool's (tier, model) list."""
    payload = {"v": KEY_VERSION, "scope": scope, "tiers": tiers, "body": canonical_body(body)}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
