"""Which tier serves a request: the routed one, or the next larger one whose context holds the request
(escalation), skipping tiers marked down after a failure (fallback)."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from aio.api.errors import APIError, invalid_request
from aio.routing import RoutingDecision
from aio.routing.reasons import Reason
from tiers.engine.sampling_params import InvalidRequestError
from tiers.serving.pool import Tier, TierPool, TierUnavailableError
from tiers.serving.tools.options import ChatOptions

logger = logging.getLogger(__name__)


@dataclass
class Selection:
    tier: Tier
    num_prompt_tokens: int
    decision: RoutingDecision


@dataclass
class _Search:
    """One pass over the candidate tiers."""
    found: Tier | None = None
    num_prompt_tokens: int = 0
    down: Tier | None = None  # the first tier that holds the request but is down
    too_small: list[str] = field(default_factory=list)  # "name: context tokens, prompt tokens" of tiers too small


class TierSelector:
    def __init__(self, pool: TierPool, retry_after_s: float = 5.0) -> None:
        self.pool = pool
        self.retry_after_s = retry_after_s
        self._down_until: dict[str, float] = {}  # tiers marked down after a failure, until then

    def is_up(self, tier: Tier) -> bool:
        return tier.is_available() and time.monotonic() >= self._down_until.get(tier.name, 0.0)

    def mark_down(self, name: str, exc: BaseException) -> None:
        retry = exc.retry_after_s if isinstance(exc, TierUnavailableError) else self.retry_after_s
        self._down_until[name] = time.monotonic() + retry
        logger.warning("tier %s marked down for %.0f s: %s: %s", name, retry, type(exc).__name__, exc)

    async def select(self, decision: RoutingDecision, messages: list[dict[str, Any]], max_tokens: int | None,
                     options: ChatOptions | None = None) -> Selection:
        """The routed tier, or the first larger one that holds the prompt (+ max_tokens when given) and is up.
        Raises APIError: 400 when no tier's context holds it, 503 when those that do are down."""
        search = await self._search(self.pool.tiers[self.pool.index(decision.tier):], messages, max_tokens,
                                    options=options)
        if search.found is not None:
            reason = Reason.FALLBACK if search.down is not None else Reason.ESCALATION
            return self._selection(decision, search, reason)
        if search.down is not None:
            raise APIError(503, f"tier {search.down.name} is unavailable and no larger tier can take the request; "
                                "retry later", code="tier_unavailable", retry_after_s=self.retry_after_s)
        wanted = f" + {max_tokens} completion tokens" if max_tokens else ""
        raise APIError(400, f"the messages{wanted} do not fit the context of any tier ({'; '.join(search.too_small)}); "
                            "shorten the messages or lower max_completion_tokens",
                       param="messages", code="context_length_exceeded")

    async def fall_back(self, failed: Tier, decision: RoutingDecision, messages: list[dict[str, Any]],
                        max_tokens: int | None, options: ChatOptions | None = None,
                        reason: str = Reason.FALLBACK) -> Selection | None:
        """The next tier larger than `failed` that is up and holds the request (also the confidence cascade's next
        step, with reason "cascade": tiers that are down are skipped alike)."""
        larger = self.pool.tiers[self.pool.index(failed.name) + 1:]
        search = await self._search(larger, messages, max_tokens, down=failed, options=options)
        return None if search.found is None else self._selection(decision, search, reason)

    async def _search(self, tiers: Sequence[Tier], messages: list[dict[str, Any]], max_tokens: int | None,
                      down: Tier | None = None, options: ChatOptions | None = None) -> _Search:
        """The first of `tiers` that holds the request and is up. Once one that holds it is found down, the
        rest are only considered when up (their prompt is not counted otherwise)."""
        search = _Search(down=down)
        for tier in tiers:
            up = self.is_up(tier)
            if search.down is not None and not up:
                continue
            num_prompt = await self._count(tier, messages, options)
            if num_prompt + (max_tokens or 1) > tier.max_model_len:
                search.too_small.append(f"{tier.name}: {tier.max_model_len} tokens, prompt {num_prompt}")
            elif up:
                search.found, search.num_prompt_tokens = tier, num_prompt
                return search
            else:
                search.down = tier
        return search

    @staticmethod
    async def _count(tier: Tier, messages: list[dict[str, Any]], options: ChatOptions | None) -> int:
        try:
            return await asyncio.to_thread(tier.count_prompt_tokens, messages, options)
        except InvalidRequestError as exc:
            raise invalid_request(str(exc), "messages") from exc

    @staticmethod
    def _selection(decision: RoutingDecision, search: _Search, reason: str) -> Selection:
        tier = search.found
        if tier.name != decision.tier:
            decision = replace(decision, tier=tier.name, reason=reason)
        return Selection(tier, search.num_prompt_tokens, decision)
