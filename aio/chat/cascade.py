"""The confidence cascade (FrugalGPT's LLM cascade, judged by the answer's own token logprobs): a request routed by
`auto`, not streamed, with one choice and no tools or response_format is answered on its tier; when that answer's
confidence (aio.chat.confidence) is below the threshold, it is answered again on the next larger tier that is up
and holds it, and that answer is judged in turn, up to the largest tier. The client sees only the last answer; the
request keeps one log row, whose cost includes the replaced answers' (docs/routing.md#the-confidence-cascade).

`cascade_policy` decides which requests cascade (the switches); `Cascade.step` runs one escalation.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Literal

from aio.api.errors import APIError, invalid_request
from aio.api.schemas import ChatCompletionRequest
from aio.chat.accounting import Accounting
from aio.chat.confidence import Measure
from aio.chat.context import CascadePolicy, CascadeReplaced, GenerationState, PreparedChat
from aio.chat.generation import generate
from aio.chat.tier_selection import TierSelector
from aio.metrics import Metrics
from aio.routing.context_routing import ContextRouting
from aio.routing.outcome_fit import RoutingFit
from aio.routing.verify import Verifier
from aio.routing.reasons import Reason
from aio.settings import DEFAULT_CASCADE_THRESHOLD
from tiers.serving.pool import TierUnavailableError
from tiers.serving.tools.options import ChatOptions

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CascadeSettings:
    """The server's defaults: settings `cascade`, `cascade_threshold`, `cascade_confidence`."""
    enabled: bool = False
    threshold: float = DEFAULT_CASCADE_THRESHOLD
    measure: Measure | Literal["scorer"] = "scorer"


def cascade_policy(body: ChatCompletionRequest, options: ChatOptions | None, settings: CascadeSettings,
                   fit: RoutingFit | None = None) -> CascadePolicy | None:
    """Whether this request cascades: its `aio_cascade` (a given `aio_cascade_threshold` turns it on too), else the
    server's default. Streamed requests, n > 1, tools or response_format and a named model never cascade; a
    client that asks for the cascade on one of those gets a 400 (a switch that changes the answer is never
    ignored). Whether the routed tier is not already the largest is the service's to check."""
    asked = body.aio_cascade
    if body.aio_cascade_threshold is not None:
        if asked is False:
            raise invalid_request("aio_cascade_threshold needs the cascade: drop aio_cascade: false or the threshold",
                                  "aio_cascade_threshold")
        asked = True
    why = _ineligible(body, options)
    if asked and why is not None:
        param = "aio_cascade" if body.aio_cascade else "aio_cascade_threshold"
        raise invalid_request(f"{param} is not supported {why}", param, code="unsupported_parameter")
    if why is not None or not (settings.enabled if asked is None else asked):
        return None
    if body.aio_cascade_threshold is None and settings.measure == "scorer" and fit is not None \
            and fit.scorer is not None and fit.escalation is not None:
        return CascadePolicy(None, "scorer", fit, Verifier(fit.escalate_below))
    measure = "mean" if settings.measure == "scorer" else settings.measure  # no fitted scorer: the logprobs
    threshold = settings.threshold if body.aio_cascade_threshold is None else body.aio_cascade_threshold
    return CascadePolicy(threshold, measure)


def _ineligible(body: ChatCompletionRequest, options: ChatOptions | None) -> str | None:
    """Why this request cannot cascade (the end of a sentence), or None."""
    if body.stream:
        return "with stream=true: a stream's tokens are sent before its answer can be judged"
    if (body.n or 1) > 1:
        return "with n > 1: only a single answer is judged"
    if options is not None:
        return "with tools or response_format: only plain text answers are judged"
    if body.model != "auto":
        return f"with the named model {body.model!r}: only requests routed by model 'auto' move between tiers"
    return None


class Cascade:
    """Runs the escalations of the requests whose policy says they cascade (ChatService.complete)."""

    def __init__(self, tiers: TierSelector, accounting: Accounting, metrics: Metrics, context_routing: ContextRouting,
                 max_queue: dict[str, int]) -> None:
        self.tiers = tiers
        self.accounting = accounting
        self.metrics = metrics
        self.context_routing = context_routing
        self.max_queue = max_queue

    async def step(self, chat: PreparedChat, state: GenerationState, queue_timeout_s: float
                   ) -> GenerationState | None:
        """Judges the answer in `state`; below the threshold, answers again on the next larger tier and returns that
        answer (`chat` then names its tier and carries the replaced answer's cost). None when the answer stays:
        confident, of unknown confidence (no logprobs), no larger tier up that holds the request and has room, or
        the escalation failed (logged): the cheaper answer is still a valid answer."""
        policy = chat.cascade
        score = state.confidence(chat)
        if policy is None or state.status != "ok" or not policy.escalates(chat.tier.name, score):
            return None
        attempt = await self._next(chat)
        if attempt is None:
            return None
        try:
            answer = await self._answer(attempt, queue_timeout_s)
        except Exception as exc:  # noqa: BLE001 - any failure keeps the answer we have; the client left: re-raised
            if isinstance(exc, TierUnavailableError):
                self.tiers.mark_down(attempt.tier.name, exc)
            reason = f"no first token within {queue_timeout_s:g} s" if isinstance(exc, asyncio.TimeoutError) \
                else f"{type(exc).__name__}: {exc}"
            logger.warning("request %s: the cascade from %s to %s failed (%s); serving the %s answer",
                           chat.ctx.request_id, chat.tier.name, attempt.tier.name, reason, chat.tier.name)
            return None
        self._replace(chat, state, score, attempt)
        return answer

    async def _next(self, chat: PreparedChat) -> PreparedChat | None:
        """The request re-targeted at the next larger tier that is up, holds it and has queue room; else None."""
        try:
            selection = await self.tiers.fall_back(chat.tier, chat.decision, chat.messages, chat.max_tokens,
                                                   chat.options, reason=Reason.CASCADE)
        except Exception as exc:  # noqa: BLE001 - e.g. a larger tier's tokenizer refuses the messages: keep the answer
            why = exc.message if isinstance(exc, APIError) else f"{type(exc).__name__}: {exc}"
            logger.warning("request %s: no cascade from %s: %s", chat.ctx.request_id, chat.tier.name, why)
            return None
        if selection is None:
            logger.info("request %s: no cascade from %s: no larger tier is up and holds it", chat.ctx.request_id,
                        chat.tier.name)
            return None
        tier = selection.tier
        if tier.load().num_waiting + len(chat.params) > self.max_queue.get(tier.name, 256):
            logger.info("request %s: no cascade from %s: tier %s's queue is full", chat.ctx.request_id,
                        chat.tier.name, tier.name)
            return None
        max_tokens = chat.max_tokens or tier.max_model_len - selection.num_prompt_tokens
        return replace(chat, tier=tier, num_prompt_tokens=selection.num_prompt_tokens, decision=selection.decision,
                       params=[replace(p, max_tokens=max_tokens) for p in chat.params])

    async def _answer(self, attempt: PreparedChat, queue_timeout_s: float) -> GenerationState:
        """The whole answer on the attempt's tier (as `ChatService.open`, no first token within the queue timeout
        is a failure)."""
        state = GenerationState.for_chat(attempt)
        chunks = generate(attempt, state, self.metrics)
        try:
            if await asyncio.wait_for(anext(chunks, None), queue_timeout_s) is not None:
                async for _ in chunks:
                    pass
        finally:
            await chunks.aclose()
        return state

    def _replace(self, chat: PreparedChat, replaced: GenerationState, score: float, attempt: PreparedChat) -> None:
        cost = self.accounting.replaced(chat, replaced)
        if chat.cascaded is None:
            chat.cascaded = CascadeReplaced(chat.tier.name, score)
        chat.cascaded.cost_usd += cost
        self.metrics.cascades.labels(chat.tier.name, attempt.tier.name).inc()
        chat.tier, chat.num_prompt_tokens, chat.decision, chat.params = (attempt.tier, attempt.num_prompt_tokens,
                                                                         attempt.decision, attempt.params)
        if chat.conversation is not None:
            self.context_routing.served(chat.conversation, chat.tier.name)
