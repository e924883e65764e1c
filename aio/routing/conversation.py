"""Conversation stickiness: a conversation keeps the tier it reached unless a new turn needs a larger one; it is
never moved down mid-thread.

A conversation is keyed by an explicit session id (the `x-aio-session` header) with the API key and `user`,
else by the `user` field and a hash of its earlier user/system turns: turn n is remembered under the hash of
its user/system turns 1..n, and turn n+1 finds it under the hash of the turns before its last user message.
Assistant turns are left out of the hash, so a client that re-formats the model's answers still matches.
Entries expire after `ttl_s` without a turn; at most `max_conversations` are kept (least recently used go).
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from aio.routing.reasons import Reason
from aio.routing.router import RoutingDecision
from aio.settings import TIER_ORDER



@dataclass(frozen=True)
class ConversationKeys:
    lookup: str | None  # where the conversation's tier so far is remembered (None: a first turn)
    store: str  # where this turn's tier is remembered for the next turn


def _turns(messages: Any) -> list[tuple[str, str]]:
    out = []
    for m in messages if isinstance(messages, (list, tuple)) else []:
        if isinstance(m, dict) and m.get("role") in ("user", "system", "developer"):
            content = m.get("content")
            out.append((str(m["role"]), content if isinstance(content, str) else json.dumps(content, sort_keys=True,
                                                                                             default=str)))
    return out


def _digest(owner: str, turns: list[tuple[str, str]]) -> str:
    h = hashlib.sha256(owner.encode("utf-8", "surrogatepass"))
    for role, text in turns:
        h.update(b"\x00" + role.encode() + b"\x00" + text.encode("utf-8", "surrogatepass"))
    return "h:" + h.hexdigest()[:32]


def conversation_keys(messages: Any, user: str | None = None, session: str | None = None,
                      owner: str | None = None) -> ConversationKeys:
    """The keys of a request's conversation (see the module docstring); `owner` is the API key's id, so two
    keys' sessions never mix."""
    who = f"{owner or ''}\x00{user or ''}"
    if session:
        key = "s:" + hashlib.sha256(f"{who}\x00{session}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return ConversationKeys(key, key)
    turns = _turns(messages)
    last_user = max((i for i, (role, _) in enumerate(turns) if role == "user"), default=None)
    earlier = turns[:last_user] if last_user is not None else []
    has_history = any(role == "user" for role, _ in earlier)
    return ConversationKeys(_digest(who, earlier) if has_history else None, _digest(who, turns))


class ConversationTiers:
    """The tier each live conversation has reached; thread-safe."""

    def __init__(self, ttl_s: float = 3600.0, max_conversations: int = 100_000) -> None:
        if ttl_s <= 0 or max_conversations < 1:
            raise ValueError(f"ttl_s must be > 0 and max_conversations >= 1, got {ttl_s}, {max_conversations}")
        self.ttl_s, self.max_conversations = ttl_s, max_conversations
        self._tiers: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._tiers)

    def get(self, key: str | None, now: float | None = None) -> str | None:
        if key is None:
            return None
        now = time.monotonic() if now is None else now
        with self._lock:
            entry = self._tiers.get(key)
            if entry is None or now - entry[1] > self.ttl_s:
                return None
            return entry[0]

    def put(self, key: str, tier: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            self._tiers[key] = (tier, now)
            self._tiers.move_to_end(key)
            while len(self._tiers) > self.max_conversations:
                self._tiers.popitem(last=False)

    def apply(self, decision: RoutingDecision, keys: ConversationKeys, tiers: list[str],
              now: float | None = None) -> RoutingDecision:
        """The decision kept at least as large as the conversation's earlier tier, remembered for its next
        turn. `tiers`: the configured tiers (an earlier tier no longer configured is ignored)."""
        earlier = self.get(keys.lookup, now)
        if earlier is not None and earlier in tiers and TIER_ORDER.index(earlier) > TIER_ORDER.index(decision.tier):
            decision = replace(decision, tier=earlier, reason=Reason.STICKY)
        if keys.lookup is not None and keys.lookup != keys.store:
            with self._lock:
                self._tiers.pop(keys.lookup, None)  # the conversation moved on: one entry per thread
        self.put(keys.store, decision.tier, now)
        return decision

    def record(self, keys: ConversationKeys, tier: str, now: float | None = None) -> None:
        """Remember the tier a turn was finally served on (after escalation or fallback), if larger."""
        current = self.get(keys.store, now)
        if current is None or TIER_ORDER.index(tier) > TIER_ORDER.index(current):
            self.put(keys.store, tier, now)
