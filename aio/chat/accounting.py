"""What a finished (or refused) request leaves behind: Prometheus metrics, its SQL log record, and, when it
went well, a candidate for the quality monitor."""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Protocol

from aio.api.errors import APIError
from aio.api.schemas import ChatCompletionRequest
from aio.chat.context import GenerationState, PreparedChat, RequestContext
from aio.chat.openai_shapes import answer_text, finish_reason
from aio.db.records import RequestRecord
from aio.metrics import Metrics
from aio.routing import Router
from aio.settings import Prices

logger = logging.getLogger(__name__)

NO_PRICES = Prices(0.0, 0.0)


class RequestLog(Protocol):
    def begin(self, record: RequestRecord) -> None: ...

    def submit(self, record: RequestRecord) -> None: ...


class Accounting:
    def __init__(self, router: Router, prices: dict[str, Prices], baseline_prices: Prices, log: RequestLog,
                 metrics: Metrics, log_prompts: bool = True, reference_tier: str | None = None) -> None:
        self.router = router
        self.prices = prices
        self.baseline_prices = baseline_prices  # the largest tier's: the all-large baseline
        self.reference_tier = reference_tier  # the largest tier's name
        self.log = log
        self.metrics = metrics
        self.log_prompts = log_prompts
        self.monitor: Any = None  # a quality_monitor.QualityMonitor: finished answers are offered to it

    def costs(self, chat: PreparedChat, state: GenerationState) -> tuple[float, float]:
        """The request's cost on its tier and what the largest tier would have charged for the same tokens. After a
        confidence cascade the cost adds the replaced answers' and the baseline stays the served answer's tokens at
        the largest tier's prices: the request's cost had it gone to the largest tier at once."""
        tokens = (state.prompt_tokens(chat), state.completion_tokens)
        cost = self._answer_cost(chat, state) + (chat.cascaded.cost_usd if chat.cascaded else 0.0)
        return cost, self.baseline_prices.cost(*tokens)

    def replaced(self, chat: PreparedChat, state: GenerationState) -> float:
        """An answer the cascade replaces (on `chat.tier`): its tokens count on that tier's token counters (its engine
        did the work); returns its cost, which the request's row and cost carry."""
        labels = (chat.tier.name, chat.tier.model)
        self.metrics.prompt_tokens.labels(*labels).inc(state.prompt_tokens(chat))
        self.metrics.generation_tokens.labels(*labels).inc(state.completion_tokens)
        return self._answer_cost(chat, state)

    def _answer_cost(self, chat: PreparedChat, state: GenerationState) -> float:
        return self.prices.get(chat.tier.name, NO_PRICES).cost(state.prompt_tokens(chat), state.completion_tokens)

    def rejected(self, body: ChatCompletionRequest, ctx: RequestContext, error: APIError) -> None:
        self._submit(RequestRecord(
            request_id=ctx.request_id, status="rejected", created_at=ctx.created_at, key_id=ctx.key_id,
            user=body.user, prompt=self._redact(_bounded(json.dumps([m.model_dump() for m in body.messages]))),
            latency_ms=(time.perf_counter() - ctx.arrived) * 1000, stream=bool(body.stream),
            num_choices=body.n or 1, http_status=error.status_code, error=error.message))
        self.metrics.requests.labels("none", "none", "rejected").inc()
        _done(ctx, 0)

    def cached(self, body: ChatCompletionRequest, ctx: RequestContext, response: dict[str, Any], tier: str,
               saved_usd: float) -> None:
        """A request answered from the answer cache: logged as a hit, 0 tokens, the cost it saved."""
        aio = response.get("aio") or {}
        first = (response.get("choices") or [{}])[0]
        self._submit(RequestRecord(
            request_id=ctx.request_id, status="ok", created_at=ctx.created_at, tier=tier, model=response.get("model"),
            routing_reason="cache", key_id=ctx.key_id, user=body.user,
            prompt=self._redact(json.dumps([m.model_dump() for m in body.messages])),
            answer=self._redact((first.get("message") or {}).get("content")),
            baseline_cost_usd=float(aio.get("baseline_cost_usd") or 0.0),
            latency_ms=(time.perf_counter() - ctx.arrived) * 1000, finish_reason=first.get("finish_reason"),
            num_choices=len(response.get("choices") or []), cache_hit=True, cache_saved_usd=saved_usd))
        self.metrics.requests.labels(tier, "cache", "ok").inc()
        _done(ctx, 0)

    def begun(self, chat: PreparedChat) -> None:
        """Journals the request before its first token: a crash from here on still leaves its row."""
        state = GenerationState.for_chat(chat)
        try:
            self.log.begin(self._record(chat, state, self.costs(chat, state), 0.0))
        except Exception:  # never fail the request over its log line
            logger.exception("request %s could not be journaled", chat.ctx.request_id)

    def finished(self, chat: PreparedChat, state: GenerationState) -> None:
        latency_s = time.perf_counter() - chat.ctx.arrived
        costs = self.costs(chat, state)
        self._observe(chat, state, costs, latency_s)
        # Tool calls and JSON answers are not text the monitor can compare: only plain chat is verified. A cascade
        # that ended on the largest tier answered as the reference does: nothing to verify.
        reference_answer = chat.cascaded is not None and chat.tier.name == self.reference_tier
        if self.monitor is not None and state.status == "ok" and chat.decision is not None and chat.options is None \
                and not reference_answer:
            self._offer(chat, state.choices[0].text)
        self._submit(self._record(chat, state, costs, latency_s))
        _done(chat.ctx, state.prompt_tokens(chat) + state.completion_tokens)

    def _observe(self, chat: PreparedChat, state: GenerationState, costs: tuple[float, float],
                 latency_s: float) -> None:
        """The request's series, on the tier that served it (a cascaded request's whole cost too)."""
        tier, metrics = chat.tier, self.metrics
        labels = (tier.name, tier.model)
        metrics.requests.labels(tier.name, chat.decision.reason, state.status).inc()
        metrics.prompt_tokens.labels(*labels).inc(state.prompt_tokens(chat))
        metrics.generation_tokens.labels(*labels).inc(state.completion_tokens)
        metrics.cost.labels(tier.name).inc(costs[0])
        metrics.baseline_cost.labels(tier.name).inc(costs[1])
        metrics.e2e.labels(*labels).observe(latency_s)
        if state.queue_ms is not None:
            metrics.queue_time.labels(*labels).observe(state.queue_ms / 1000)
        if state.first_token_at is not None:
            metrics.ttft.labels(*labels).observe(state.first_token_at - chat.ctx.arrived)
        for choice in state.choices:
            if choice.finish_reason is not None:
                metrics.request_success.labels(*labels, finish_reason(choice.finish_reason)).inc()

    def _record(self, chat: PreparedChat, state: GenerationState, costs: tuple[float, float],
                latency_s: float) -> RequestRecord:
        tier, ctx, decision, first, cascaded = chat.tier, chat.ctx, chat.decision, state.choices[0], chat.cascaded
        ttft_ms = None if state.first_token_at is None else (state.first_token_at - ctx.arrived) * 1000
        return RequestRecord(
            request_id=ctx.request_id, status=state.status, created_at=ctx.created_at, tier=tier.name,
            model=tier.model, routing_reason=decision.reason, classifier_version=decision.classifier_version,
            routing_score=decision.score, tier_scores=list(decision.scores) if decision.scores else None,
            quality=self._logged_quality(chat), key_id=ctx.key_id, user=chat.body.user,
            prompt=self._redact(json.dumps(chat.messages)), answer=self._redact(answer_text(first)),
            prompt_tokens=state.prompt_tokens(chat), completion_tokens=state.completion_tokens,
            cost_usd=costs[0], baseline_cost_usd=costs[1], ttft_ms=ttft_ms, latency_ms=latency_s * 1000,
            itl_ms=state.mean_inter_token_ms(), queue_ms=state.queue_ms,
            finish_reason=finish_reason(first.finish_reason) if first.finish_reason else None,
            stream=bool(chat.body.stream), num_choices=len(state.choices), http_status=state.http_status,
            error=state.error, confidence=state.confidence(chat),
            cascade_from_tier=cascaded.from_tier if cascaded else None,
            cascade_confidence=cascaded.confidence if cascaded else None,
            cascade_cost_usd=cascaded.cost_usd if cascaded else None)

    def _logged_quality(self, chat: PreparedChat) -> float | None:
        """The request's own quality knob, else the router's (none for an explicitly named model)."""
        if chat.quality is not None:
            return chat.quality
        return self.router.quality if chat.decision.reason != "explicit" else None

    def _offer(self, chat: PreparedChat, answer: str) -> None:
        from quality_monitor import Candidate

        quality = self.router.quality if chat.quality is None else chat.quality
        threshold = quality + self.router.offsets.get(chat.tier.name, 0.0)
        try:
            self.monitor.offer(Candidate(chat.ctx.request_id, chat.tier.name, chat.messages, answer,
                                         chat.params[0].max_tokens, chat.decision.score, threshold,
                                         chat.decision.classifier_version))
        except Exception:  # verification is best effort: never fail the request over it
            logger.exception("offering request %s to the quality monitor failed", chat.ctx.request_id)

    def _submit(self, record: RequestRecord) -> None:
        try:
            self.log.submit(record)
        except Exception:  # e.g. the writer closed during shutdown: never fail the request over its log line
            logger.exception("request %s could not be queued for the SQL log", record.request_id)

    def _redact(self, text: str | None) -> str | None:
        return text if self.log_prompts else None


def _done(ctx: RequestContext, tokens: int) -> None:
    if ctx.on_done is not None:
        on_done, ctx.on_done = ctx.on_done, None
        on_done(tokens)


MAX_REJECTED_PROMPT_CHARS = 8192  # a refused request's prompt is stored cut to this (it may be megabytes)


def _bounded(text: str) -> str:
    if len(text) <= MAX_REJECTED_PROMPT_CHARS:
        return text
    cut = len(text) - MAX_REJECTED_PROMPT_CHARS
    return text[:MAX_REJECTED_PROMPT_CHARS] + f"… [{cut} more characters not stored]"
