"""Chat orchestration: validate → route (classifier, explicit model, escalation) → generate on the tier → cost →
metrics and SQL log. Knows the OpenAI response shapes; the HTTP layer only wires requests to it."""
from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, AsyncIterator, Protocol

from aio.chat_messages import normalize_messages
from aio.classify_batcher import ClassifierBatcher
from aio.db.records import RequestRecord, utcnow
from aio.metrics import Metrics
from aio.routing import Router, RoutingDecision
from aio.api.errors import APIError, invalid_request
from aio.api.schemas import ChatCompletionRequest
from aio.settings import Prices, TierSettings
from classifier.features import messages_to_text
from tiers.engine.sampling_params import InvalidRequestError, SamplingParams
from tiers.pool import ChatChunk, Tier, TierPool, TierUnavailableError

logger = logging.getLogger(__name__)

QUEUE_FULL_RETRY_AFTER_S = 1.0


class RequestLog(Protocol):
    def submit(self, record: RequestRecord) -> None: ...


@dataclass
class RequestContext:
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    key_id: int | None = None
    arrived: float = field(default_factory=time.perf_counter)
    created_at: datetime = field(default_factory=utcnow)


@dataclass
class PreparedChat:
    """A validated, routed request, ready to generate."""
    ctx: RequestContext
    body: ChatCompletionRequest
    messages: list[dict[str, str]]
    tier: Tier
    decision: RoutingDecision
    quality: float | None
    num_prompt_tokens: int
    params: list[SamplingParams]  # one per choice
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def response_id(self) -> str:
        return f"chatcmpl-{self.ctx.request_id}"


@dataclass
class ChoiceState:
    text: str = ""
    num_tokens: int = 0
    finish_reason: str | None = None
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    num_cached_tokens: int = 0


@dataclass
class GenerationState:
    """What a request produced so far; turned into the log record however it ends."""
    choices: list[ChoiceState]
    first_token_at: float | None = None
    last_token_at: float | None = None
    first_choice_tokens_after_first: int = 0  # the first choice's tokens after its first chunk (inter-token latency)
    first_choice_started_at: float | None = None
    queue_ms: float | None = None  # reported by the tier on a chunk (`queue_time_s`), when it knows it
    status: str = "ok"
    error: str | None = None
    http_status: int = 200
    num_prompt_tokens: int | None = None  # as the tier counted them (a remote tier's own tokenizer)

    @property
    def completion_tokens(self) -> int:
        return sum(c.num_tokens for c in self.choices)


class ChatService:
    def __init__(self, pool: TierPool, router: Router, tier_settings: dict[str, TierSettings], log: RequestLog,
                 metrics: Metrics, log_prompts: bool = True, max_concurrent_requests: int = 1024,
                 queue_timeout_s: float = 60.0, tier_retry_after_s: float = 5.0) -> None:
        self.pool = pool
        self.router = router
        self.log = log
        self.metrics = metrics
        self.log_prompts = log_prompts
        self.prices = {name: t.prices for name, t in tier_settings.items()}
        self.max_queue = {name: t.max_queue for name, t in tier_settings.items()}
        self.baseline_prices = self.prices[pool.tiers[-1].name]  # the largest tier: the all-large baseline
        self.monitor = None  # a quality_monitor.QualityMonitor: finished answers are offered to it
        self.max_concurrent_requests = max_concurrent_requests
        self.queue_timeout_s = queue_timeout_s
        self.classifier_batcher = ClassifierBatcher()
        self.tier_retry_after_s = tier_retry_after_s
        self._in_flight = 0  # opened and not finished
        self._down_until: dict[str, float] = {}  # tiers marked down after a failure, until then

    # ---- routing ------------------------------------------------------------------------------------------

    async def prepare(self, body: ChatCompletionRequest, ctx: RequestContext) -> PreparedChat:
        """Validates and routes; raises APIError (and logs the rejection) when the request cannot be served."""
        try:
            return await self._prepare(body, ctx)
        except APIError as exc:
            self._log(RequestRecord(
                request_id=ctx.request_id, status="rejected", created_at=ctx.created_at, key_id=ctx.key_id,
                user=body.user, prompt=self._redact(json.dumps([m.model_dump() for m in body.messages])),
                latency_ms=(time.perf_counter() - ctx.arrived) * 1000, stream=bool(body.stream),
                num_choices=body.n or 1, http_status=exc.status_code, error=exc.message))
            self.metrics.requests.labels("none", "none", "rejected").inc()
            raise

    async def _prepare(self, body: ChatCompletionRequest, ctx: RequestContext) -> PreparedChat:
        messages = normalize_messages(body.messages)
        max_tokens = body.max_completion_tokens or body.max_tokens
        if body.top_logprobs is not None and not body.logprobs:
            raise invalid_request("top_logprobs requires logprobs to be true", "top_logprobs")
        if body.model == "auto":
            classifier = self.router.classifier  # may be swapped meanwhile: decide with the one that scored
            proba = await self.classifier_batcher.predict(classifier, messages_to_text(messages))
            decision = self.router.decide(proba, body.aio_quality, classifier)
        else:
            tier = self.pool.find(body.model)
            if tier is None:
                names = ["auto"] + [t.name for t in self.pool] + [t.model for t in self.pool]
                raise APIError(404, f"the model {body.model!r} does not exist; models: {', '.join(names)}",
                               param="model", code="model_not_found")
            decision = RoutingDecision(tier.name, "explicit")
        if self._in_flight >= self.max_concurrent_requests:
            raise APIError(429, f"the server is at its limit of {self.max_concurrent_requests} concurrent requests; "
                                "retry later", code="server_busy", retry_after_s=QUEUE_FULL_RETRY_AFTER_S)
        tier, num_prompt_tokens = await self._fit_context(decision.tier, messages, max_tokens)
        if tier.name != decision.tier:
            decision = RoutingDecision(tier.name, "escalation", decision.score, decision.scores,
                                       decision.classifier_version)
        if not self.is_up(tier):
            probe = PreparedChat(ctx, body, messages, tier, decision, body.aio_quality, num_prompt_tokens, [])
            probe.params = [self._sampling_params(body, max_tokens or 1, 0)]
            fallback = await self._fallback(probe)
            if fallback is None:
                raise APIError(503, f"tier {tier.name} is unavailable and no larger tier can take the request; "
                                    "retry later", code="tier_unavailable", retry_after_s=self.tier_retry_after_s)
            tier, num_prompt_tokens = fallback
            decision = RoutingDecision(tier.name, "fallback", decision.score, decision.scores,
                                       decision.classifier_version)
        if tier.load().num_waiting >= self.max_queue.get(tier.name, 256):
            raise APIError(429, f"tier {tier.name} has too many queued requests; retry later", code="queue_full",
                           retry_after_s=QUEUE_FULL_RETRY_AFTER_S)
        max_tokens = max_tokens or tier.max_model_len - num_prompt_tokens
        params = [self._sampling_params(body, max_tokens, i) for i in range(body.n or 1)]
        return PreparedChat(ctx, body, messages, tier, decision, body.aio_quality, num_prompt_tokens, params)

    async def _fit_context(self, start: str, messages: list[dict[str, str]],
                           max_tokens: int | None) -> tuple[Tier, int]:
        """The chosen tier, or the first larger one whose context holds the prompt (+ max_tokens when given)."""
        tried: list[str] = []
        for tier in self.pool.tiers[self.pool.index(start):]:
            try:
                num_prompt = await asyncio.to_thread(tier.count_prompt_tokens, messages)
            except InvalidRequestError as exc:
                raise invalid_request(str(exc), "messages") from exc
            if num_prompt + (max_tokens or 1) <= tier.max_model_len:
                return tier, num_prompt
            tried.append(f"{tier.name}: {tier.max_model_len} tokens, prompt {num_prompt}")
        wanted = f" + {max_tokens} completion tokens" if max_tokens else ""
        raise APIError(400, f"the messages{wanted} do not fit the context of any tier ({'; '.join(tried)}); "
                            "shorten the messages or lower max_completion_tokens",
                       param="messages", code="context_length_exceeded")

    @staticmethod
    def _sampling_params(body: ChatCompletionRequest, max_tokens: int, choice: int) -> SamplingParams:
        try:
            return SamplingParams(
                max_tokens=max_tokens, temperature=1.0 if body.temperature is None else body.temperature,
                top_p=1.0 if body.top_p is None else body.top_p,
                seed=None if body.seed is None else body.seed + choice, stop=body.stop,
                top_k=body.top_k or 0, ignore_eos=bool(body.ignore_eos),
                logprobs=(body.top_logprobs or 0) if body.logprobs else None)
        except InvalidRequestError as exc:
            raise invalid_request(str(exc)) from exc

    # ---- generation ---------------------------------------------------------------------------------------

    async def _generate(self, chat: PreparedChat, state: GenerationState) -> AsyncIterator[tuple[int, ChatChunk]]:
        """Runs every choice concurrently and yields (choice index, chunk) as they come."""
        queue: asyncio.Queue[tuple[int, ChatChunk | BaseException | None]] = asyncio.Queue()

        async def run(index: int) -> None:
            request_id = chat.ctx.request_id if len(chat.params) == 1 else f"{chat.ctx.request_id}-{index}"
            try:
                async for chunk in chat.tier.stream_chat(chat.messages, chat.params[index], request_id):
                    await queue.put((index, chunk))
                await queue.put((index, None))
            except BaseException as exc:  # handed to the consumer, which re-raises it
                await queue.put((index, exc))
                if isinstance(exc, asyncio.CancelledError):
                    raise

        tasks = [asyncio.create_task(run(i)) for i in range(len(chat.params))]
        try:
            remaining = len(tasks)
            while remaining:
                index, item = await queue.get()
                if item is None:
                    remaining -= 1
                    continue
                if isinstance(item, BaseException):
                    raise item
                now = time.perf_counter()
                queue_time_s = getattr(item, "queue_time_s", None)
                if queue_time_s is not None and state.queue_ms is None:
                    state.queue_ms = queue_time_s * 1000
                if item.num_new_tokens and index == 0:
                    if state.first_choice_started_at is None:
                        state.first_choice_started_at = now
                    else:
                        state.first_choice_tokens_after_first += item.num_new_tokens
                if item.num_new_tokens:
                    if state.first_token_at is None:
                        state.first_token_at = now
                    elif index == 0 and state.last_token_at is not None:
                        gap = (now - state.last_token_at) / item.num_new_tokens
                        for _ in range(item.num_new_tokens):
                            self.metrics.inter_token.labels(chat.tier.name, chat.tier.model).observe(gap)
                    if index == 0:
                        state.last_token_at = now
                self._apply(chat, state.choices[index], item)
                if item.num_prompt_tokens:
                    state.num_prompt_tokens = item.num_prompt_tokens
                yield index, item
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _apply(self, chat: PreparedChat, choice: ChoiceState, chunk: ChatChunk) -> None:
        choice.text += chunk.delta_text
        choice.num_tokens += chunk.num_new_tokens
        choice.num_cached_tokens = max(choice.num_cached_tokens, chunk.num_cached_tokens)
        if chunk.logprobs:
            choice.logprobs.extend(self._logprob_entries(chat.tier, chunk))
        if chunk.finish_reason is not None:
            choice.finish_reason = chunk.finish_reason

    @staticmethod
    def _logprob_entries(tier: Tier, chunk: ChatChunk) -> list[dict[str, Any]]:
        def entry(token_id: int, logprob: float) -> dict[str, Any]:
            text = tier.token_text(token_id)
            return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

        return [{**entry(lp.token_id, lp.logprob), "top_logprobs": [entry(t, p) for t, p in lp.top]}
                for lp in chunk.logprobs or []]

    @dataclass
    class Opened:
        """A generation that has produced its first chunk (or failed before it, see `error`)."""
        chat: PreparedChat
        state: GenerationState
        chunks: AsyncIterator[tuple[int, ChatChunk]] | None
        first: tuple[int, ChatChunk] | None

    async def open(self, chat: PreparedChat) -> "ChatService.Opened":
        """Starts generating and waits for the first chunk. A tier that fails before answering is marked down
        and the request falls back to the next larger tier that is up; past `queue_timeout_s` without a first
        chunk the request is refused (503), not served late. Raises APIError (the request is logged)."""
        self._in_flight += 1
        while True:
            state = GenerationState([ChoiceState() for _ in chat.params])
            chunks = self._generate(chat, state)
            try:
                first = await asyncio.wait_for(anext(chunks), self.queue_timeout_s)
                return self.Opened(chat, state, chunks, first)
            except StopAsyncIteration:
                return self.Opened(chat, state, None, None)
            except asyncio.TimeoutError:
                error = APIError(503, f"tier {chat.tier.name} did not start answering within {self.queue_timeout_s:g} s; "
                                      "retry later", code="queue_timeout", retry_after_s=QUEUE_FULL_RETRY_AFTER_S)
            except InvalidRequestError as exc:
                error = invalid_request(str(exc))
            except Exception as exc:  # the tier failed before answering: mark it down, try a larger one
                self.mark_down(chat.tier.name, exc)
                fallback = await self._fallback(chat)
                if fallback is not None:
                    chat.tier, chat.num_prompt_tokens = fallback
                    chat.decision = RoutingDecision(chat.tier.name, "fallback", chat.decision.score,
                                                    chat.decision.scores, chat.decision.classifier_version)
                    continue
                error = self._api_error(exc)
            await chunks.aclose()
            state.status, state.error, state.http_status = "error", error.message, error.status_code
            self._finish(chat, state)
            raise error

    async def complete(self, chat: PreparedChat) -> dict[str, Any]:
        opened = await self.open(chat)
        chat, state = opened.chat, opened.state
        try:
            if opened.chunks is not None:
                async for _ in opened.chunks:
                    pass
        except BaseException as exc:
            self._fail(state, exc)
            raise self._api_error(exc) from exc
        finally:
            self._finish(chat, state)
        return self._completion_body(chat, state)

    async def stream(self, opened: "ChatService.Opened") -> AsyncIterator[str]:
        """Server-sent events: the role first, content deltas, a finish chunk per choice, usage if asked, [DONE].
        `opened` comes from `open`, so a request refused before its first token gets a plain HTTP error."""
        chat, state = opened.chat, opened.state
        include_usage = bool(chat.body.stream_options and chat.body.stream_options.include_usage)

        async def chunks():
            if opened.first is not None:
                yield opened.first
            if opened.chunks is not None:
                async for item in opened.chunks:
                    yield item

        try:
            for i in range(len(chat.params)):
                yield _sse(self._chunk(chat, i, {"role": "assistant", "content": ""}, None, include_usage))
            async for index, chunk in chunks():
                if chunk.delta_text or chunk.logprobs:
                    logprobs = {"content": self._logprob_entries(chat.tier, chunk)} if chunk.logprobs else None
                    yield _sse(self._chunk(chat, index, {"content": chunk.delta_text}, None, include_usage, logprobs))
                if chunk.finish_reason is not None:
                    yield _sse(self._chunk(chat, index, {}, _finish_reason(chunk.finish_reason), include_usage))
            if include_usage:
                yield _sse({"id": chat.response_id, "object": "chat.completion.chunk", "created": chat.created,
                            "model": chat.tier.model, "choices": [], "usage": self._usage(chat, state),
                            "aio": self._aio_fields(chat, state)})
            yield "data: [DONE]\n\n"
        except (asyncio.CancelledError, GeneratorExit):
            state.status, state.http_status = "cancelled", 499  # the client went away
            raise
        except Exception as exc:
            self._fail(state, exc)
            yield _sse(self._api_error(exc).body())
            yield "data: [DONE]\n\n"
        finally:
            if opened.chunks is not None:
                await opened.chunks.aclose()
            self._finish(chat, state)

    # ---- tier health --------------------------------------------------------------------------------------

    def is_up(self, tier: Tier) -> bool:
        return tier.is_available() and time.monotonic() >= self._down_until.get(tier.name, 0.0)

    def mark_down(self, name: str, exc: BaseException) -> None:
        retry = exc.retry_after_s if isinstance(exc, TierUnavailableError) else self.tier_retry_after_s
        self._down_until[name] = time.monotonic() + retry
        logger.warning("tier %s marked down for %.0f s: %s: %s", name, retry, type(exc).__name__, exc)

    async def _fallback(self, chat: PreparedChat) -> tuple[Tier, int] | None:
        """The next larger tier that is up and holds the request."""
        max_tokens = chat.params[0].max_tokens if chat.body.max_completion_tokens or chat.body.max_tokens else None
        for tier in self.pool.tiers[self.pool.index(chat.tier.name) + 1:]:
            if not self.is_up(tier):
                continue
            num_prompt = await asyncio.to_thread(tier.count_prompt_tokens, chat.messages)
            if num_prompt + (max_tokens or 1) <= tier.max_model_len:
                return tier, num_prompt
        return None

    # ---- accounting ---------------------------------------------------------------------------------------

    @staticmethod
    def _fail(state: GenerationState, exc: BaseException) -> None:
        if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
            state.status, state.http_status = "cancelled", 499
        else:
            state.status, state.error = "error", f"{type(exc).__name__}: {exc}"
            state.http_status = 503 if isinstance(exc, TierUnavailableError) else 500

    @staticmethod
    def _api_error(exc: BaseException) -> APIError:
        if isinstance(exc, APIError):
            return exc
        if isinstance(exc, TierUnavailableError):
            return APIError(503, str(exc), code="tier_unavailable", retry_after_s=exc.retry_after_s)
        if isinstance(exc, InvalidRequestError):
            return invalid_request(str(exc))
        return APIError(500, f"generation failed: {exc}", code="generation_failed")

    def _costs(self, chat: PreparedChat, state: GenerationState) -> tuple[float, float]:
        prices = self.prices.get(chat.tier.name, Prices(0.0, 0.0))
        tokens = (_prompt_tokens(chat, state), state.completion_tokens)
        return prices.cost(*tokens), self.baseline_prices.cost(*tokens)

    def _finish(self, chat: PreparedChat, state: GenerationState) -> None:
        self._in_flight -= 1
        now = time.perf_counter()
        tier, ctx = chat.tier, chat.ctx
        cost, baseline = self._costs(chat, state)
        ttft = None if state.first_token_at is None else state.first_token_at - ctx.arrived
        labels = (tier.name, tier.model)
        self.metrics.requests.labels(tier.name, chat.decision.reason, state.status).inc()
        self.metrics.prompt_tokens.labels(*labels).inc(_prompt_tokens(chat, state))
        self.metrics.generation_tokens.labels(*labels).inc(state.completion_tokens)
        self.metrics.cost.labels(tier.name).inc(cost)
        self.metrics.baseline_cost.labels(tier.name).inc(baseline)
        self.metrics.e2e.labels(*labels).observe(now - ctx.arrived)
        if state.queue_ms is not None:
            self.metrics.queue_time.labels(*labels).observe(state.queue_ms / 1000)
        if ttft is not None:
            self.metrics.ttft.labels(*labels).observe(ttft)
        for choice in state.choices:
            if choice.finish_reason is not None:
                self.metrics.request_success.labels(*labels, _finish_reason(choice.finish_reason)).inc()
        first = state.choices[0]
        if self.monitor is not None and state.status == "ok" and chat.decision is not None:
            self._offer(chat, first.text)
        self._log(RequestRecord(
            request_id=ctx.request_id, status=state.status, created_at=ctx.created_at, tier=tier.name,
            model=tier.model, routing_reason=chat.decision.reason, classifier_version=chat.decision.classifier_version,
            routing_score=chat.decision.score, tier_scores=list(chat.decision.scores) if chat.decision.scores else None,
            quality=chat.quality if chat.quality is not None else (self.router.quality if chat.decision.reason != "explicit" else None),
            key_id=ctx.key_id, user=chat.body.user, prompt=self._redact(json.dumps(chat.messages)),
            answer=self._redact(first.text), prompt_tokens=_prompt_tokens(chat, state),
            completion_tokens=state.completion_tokens, cost_usd=cost, baseline_cost_usd=baseline,
            ttft_ms=None if ttft is None else ttft * 1000, latency_ms=(now - ctx.arrived) * 1000,
            itl_ms=_mean_inter_token_ms(state), queue_ms=state.queue_ms,
            finish_reason=_finish_reason(first.finish_reason) if first.finish_reason else None,
            stream=bool(chat.body.stream), num_choices=len(state.choices), http_status=state.http_status,
            error=state.error))

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

    def _log(self, record: RequestRecord) -> None:
        try:
            self.log.submit(record)
        except Exception:  # e.g. the writer closed during shutdown: never fail the request over its log line
            logger.exception("request %s could not be queued for the SQL log", record.request_id)

    def _redact(self, text: str | None) -> str | None:
        return text if self.log_prompts else None

    # ---- response shapes ----------------------------------------------------------------------------------

    def _usage(self, chat: PreparedChat, state: GenerationState) -> dict[str, Any]:
        cached = max((c.num_cached_tokens for c in state.choices), default=0)
        prompt_tokens = _prompt_tokens(chat, state)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": state.completion_tokens,
                "total_tokens": prompt_tokens + state.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached}}

    def _aio_fields(self, chat: PreparedChat, state: GenerationState) -> dict[str, Any]:
        cost, baseline = self._costs(chat, state)
        return {"tier": chat.tier.name, "routing_reason": chat.decision.reason, "routing_score": chat.decision.score,
                "cost_usd": cost, "baseline_cost_usd": baseline, "demo_weights": chat.tier.is_demo}

    def _completion_body(self, chat: PreparedChat, state: GenerationState) -> dict[str, Any]:
        choices = [{"index": i, "message": {"role": "assistant", "content": c.text},
                    "logprobs": {"content": c.logprobs} if chat.params[i].logprobs is not None else None,
                    "finish_reason": _finish_reason(c.finish_reason or "stop")}
                   for i, c in enumerate(state.choices)]
        return {"id": chat.response_id, "object": "chat.completion", "created": chat.created, "model": chat.tier.model,
                "choices": choices, "usage": self._usage(chat, state), "system_fingerprint": None,
                "aio": self._aio_fields(chat, state)}

    def _chunk(self, chat: PreparedChat, index: int, delta: dict[str, Any], finish_reason: str | None,
               include_usage: bool, logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
        chunk = {"id": chat.response_id, "object": "chat.completion.chunk", "created": chat.created,
                 "model": chat.tier.model,
                 "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}]}
        if include_usage:
            chunk["usage"] = None
        return chunk


def _mean_inter_token_ms(state: GenerationState) -> float | None:
    """The first choice's mean time between output tokens (from its first to its last token)."""
    if state.first_choice_started_at is None or state.last_token_at is None \
            or state.first_choice_tokens_after_first <= 0:
        return None
    return (state.last_token_at - state.first_choice_started_at) * 1000 / state.first_choice_tokens_after_first


def _prompt_tokens(chat: PreparedChat, state: GenerationState) -> int:
    return state.num_prompt_tokens or chat.num_prompt_tokens


def _finish_reason(reason: str) -> str:
    return "stop" if reason in ("stop", "abort") else reason


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"
