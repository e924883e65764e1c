"""ChatService: the orchestrator. Validates and routes a request (prepare), starts it on its tier with fallback
(open), and serves it whole (complete) or as server-sent events (stream); each request is accounted once."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator


from aio.api.errors import APIError, invalid_request
from aio.api.schemas import ChatCompletionRequest
from aio.chat.accounting import Accounting, RequestLog
from aio.chat.cascade import Cascade, CascadeSettings, cascade_policy
from aio.chat.context import GenerationState, Opened, PreparedChat, RequestContext
from aio.chat.generation import api_error, generate, open_failure, record_failure
from aio.chat.messages import normalize_messages
from aio.chat.openai_shapes import chunk_body, completion_body, sse, stream_events, usage_chunk_body
from aio.chat.queue_admission import QUEUE_FULL_RETRY_AFTER_S, QueueAdmission
from aio.chat.request_options import (chat_options, named_tier, refuse_oversized, reject_unsupported,
                                      wants_structure)
from aio.chat.tier_selection import TierSelector
from aio.metrics import Metrics
from aio.routing import ClassifierBatcher, Router
from aio.routing.context_routing import ContextRouting
from aio.routing.policy import RoutingPolicy
from aio.settings import Prices, TierSettings
from classifier.heuristic import HeuristicClassifier
from tiers.engine.sampling_params import InvalidRequestError, SamplingParams
from tiers.serving.pool import ChatChunk, Tier, TierPool, TierUnavailableError
from tiers.serving.tools.options import ChatOptions

logger = logging.getLogger(__name__)

JUDGED_TOP_LOGPROBS = 2  # the chosen token and the best other, for the answer scorer's margins


class ChatService:
    def __init__(self, pool: TierPool, router: Router, tier_settings: dict[str, TierSettings], log: RequestLog,
                 metrics: Metrics, log_prompts: bool = True, max_concurrent_requests: int = 1024,
                 queue_timeout_s: float = 60.0, tier_retry_after_s: float = 5.0,
                 structured_min_tier: str | None = None, cascade: CascadeSettings = CascadeSettings()) -> None:
        self.pool = pool
        self.router = router
        self.metrics = metrics
        self.max_queue = {name: t.max_queue for name, t in tier_settings.items()}
        self.max_concurrent_requests = max_concurrent_requests
        self.queue_timeout_s = queue_timeout_s

        self.cascade_settings = cascade
        # A text the classifier fails on is routed by the heuristic rather than failing its batch-mates.
        self.classifier_batcher = ClassifierBatcher(fallback=HeuristicClassifier(n_tiers=len(pool))
                                                    if len(pool) > 1 else None)
        self.context_routing = ContextRouting()  # conversation stickiness, recent failed verifications
        self.routing = RoutingPolicy(router, [t.name for t in pool], self.classifier_batcher, self.context_routing,
                                     structured_min_tier)
        self.tiers = TierSelector(pool, tier_retry_after_s)
        prices = {name: t.prices for name, t in tier_settings.items()}
        self.accounting = Accounting(router, prices, prices[pool.tiers[-1].name], log, metrics, log_prompts,
                                     pool.tiers[-1].name)
        self.cascade = Cascade(self.tiers, self.accounting, metrics, self.context_routing, self.max_queue)
        self.queue = QueueAdmission(self.max_queue)
        self._in_flight = 0  # opened and not finished

    @property
    def prices(self) -> dict[str, Prices]:
        return self.accounting.prices

    @property
    def log_prompts(self) -> bool:
        return self.accounting.log_prompts

    @log_prompts.setter
    def log_prompts(self, value: bool) -> None:
        self.accounting.log_prompts = value

    @property
    def monitor(self) -> Any:
        """A quality_monitor.QualityMonitor that finished answers are offered to, or None."""
        return self.accounting.monitor

    @monitor.setter
    def monitor(self, monitor: Any) -> None:
        self.accounting.monitor = monitor

    # ---- routing ------------------------------------------------------------------------------------------

    async def prepare(self, body: ChatCompletionRequest, ctx: RequestContext) -> PreparedChat:
        """Validates and routes; raises APIError (and logs the rejection) when the request cannot be served, also
        when preparing it failed with an internal error (a 500, logged with its traceback)."""
        try:
            return await self._prepare(body, ctx)
        except APIError as exc:
            self.accounting.rejected(body, ctx, exc)
            raise
        except asyncio.CancelledError:  # the client left before its request was routed
            self.accounting.rejected(body, ctx, APIError(499, "the client closed the connection", code="client_closed"))
            raise
        except Exception as exc:
            logger.exception("request %s could not be prepared", ctx.request_id)
            error = APIError(500, "the request failed with an internal error before generation; the server's log "
                                  f"has the details under request id {ctx.request_id}", code="internal_error")
            self.accounting.rejected(body, ctx, error)
            raise error from exc

    async def _prepare(self, body: ChatCompletionRequest, ctx: RequestContext) -> PreparedChat:
        reject_unsupported(body)
        messages = normalize_messages(body.messages)
        refuse_oversized(messages, self.pool)
        options = chat_options(body)
        cascade = cascade_policy(body, options, self.cascade_settings, self.router.target_fit())
        max_tokens = body.max_completion_tokens or body.max_tokens
        if body.top_logprobs is not None and not body.logprobs:
            raise invalid_request("top_logprobs requires logprobs to be true", "top_logprobs")
        decision, conversation = await self.routing.decide(
            named_tier(body.model, self.pool), messages, quality=body.aio_quality, structured=wants_structure(options),
            verify=cascade is not None, user=body.user, session=ctx.session, owner=str(ctx.key_id or ""))
        if self._in_flight >= self.max_concurrent_requests:
            raise APIError(429, f"the server is at its limit of {self.max_concurrent_requests} concurrent requests; "
                                "retry later", code="server_busy", retry_after_s=QUEUE_FULL_RETRY_AFTER_S)
        selection = await self.tiers.select(decision, messages, max_tokens, options)
        tier = selection.tier
        self.context_routing.served(conversation, tier.name)
        self.queue.admit(tier, ctx.key_id, body.n or 1)
        if options is not None:
            await _check_options(tier, options)
        max_tokens = max_tokens or tier.max_model_len - selection.num_prompt_tokens
        cascade = cascade if tier is not self.pool.tiers[-1] else None  # nothing larger to escalate to
        params = [sampling_params(body, max_tokens, i, cascade is not None) for i in range(body.n or 1)]
        return PreparedChat(ctx, body, messages, tier, selection.decision, body.aio_quality,
                            selection.num_prompt_tokens, params, options, cascade=cascade, conversation=conversation)

    # ---- generation ---------------------------------------------------------------------------------------

    async def open(self, chat: PreparedChat) -> Opened:
        """Starts generating and waits for the first chunk. A tier that fails before answering (unavailable: its
        server unreachable, its engine broken) is marked down and the request falls back to the next larger tier
        that is up; a failure of the request's own is its error alone (the tier stays up). Past
        `queue_timeout_s` without a first chunk the request is refused (503), not served late. Raises APIError
        (the request is logged); cancelled (the client left), it is logged cancelled and the cancellation goes on."""
        self._in_flight += 1
        self.queue.hold(chat)
        self.accounting.begun(chat)
        state, chunks = GenerationState.for_chat(chat), None
        try:
            while True:
                state = GenerationState.for_chat(chat)
                chunks = generate(chat, state, self.metrics)
                try:
                    first = await asyncio.wait_for(anext(chunks), self.queue_timeout_s)
                except StopAsyncIteration:
                    return Opened(chat, state, None, None)
                except TierUnavailableError as exc:  # the tier failed before answering: mark it down, try a larger one
                    await chunks.aclose()
                    if not await self._fall_back(chat, exc):
                        raise
                    continue
                return Opened(chat, state, chunks, first)
        except BaseException as exc:
            if chunks is not None:
                await chunks.aclose()
            error = open_failure(chat, state, exc, self.queue_timeout_s)
            self._finish(chat, state)
            if error is None:
                raise
            raise error from exc

    async def _fall_back(self, chat: PreparedChat, exc: TierUnavailableError) -> bool:
        self.tiers.mark_down(chat.tier.name, exc)
        fallback = await self.tiers.fall_back(chat.tier, chat.decision, chat.messages, chat.max_tokens, chat.options)
        if fallback is not None:
            chat.tier, chat.num_prompt_tokens, chat.decision = (fallback.tier, fallback.num_prompt_tokens,
                                                                fallback.decision)
        return fallback is not None

    async def complete(self, chat: PreparedChat) -> dict[str, Any]:
        """The whole answer; a request that cascades is judged and may be answered again by larger tiers first.
        Cancelled (the client left), its generation is aborted and it is logged cancelled."""
        opened = await self.open(chat)
        chat, state = opened.chat, opened.state
        try:
            if opened.chunks is not None:
                async for _ in opened.chunks:
                    pass
            while chat.cascade is not None \
                    and (answer := await self.cascade.step(chat, state, self.queue_timeout_s)) is not None:
                state = answer
        except BaseException as exc:
            record_failure(state, exc)
            if not isinstance(exc, Exception):
                raise
            raise api_error(exc, chat.ctx.request_id) from exc
        finally:
            if opened.chunks is not None:
                await opened.chunks.aclose()
            self._finish(chat, state)
        return completion_body(chat, state, self.accounting.costs(chat, state))

    async def stream(self, opened: Opened) -> AsyncIterator[str]:
        """Server-sent events: the role first, content deltas, a finish chunk per choice, usage if asked, [DONE].
        `opened` comes from `open`, so a request refused before its first token gets a plain HTTP error."""
        chat, state = opened.chat, opened.state
        include_usage = bool(chat.body.stream_options and chat.body.stream_options.include_usage)
        try:
            for i in range(len(chat.params)):
                yield sse(chunk_body(chat, i, {"role": "assistant", "content": ""}, None, include_usage))
            async for index, chunk in _chunks(opened):
                for event in stream_events(chat, index, chunk, include_usage):
                    yield event
            if include_usage:
                yield sse(usage_chunk_body(chat, state, self.accounting.costs(chat, state)))
            yield "data: [DONE]\n\n"
        except (asyncio.CancelledError, GeneratorExit):
            state.status, state.http_status = "cancelled", 499  # the client went away
            raise
        except Exception as exc:
            record_failure(state, exc)
            yield sse(api_error(exc, chat.ctx.request_id).body())
            yield "data: [DONE]\n\n"
        finally:
            if opened.chunks is not None:
                await opened.chunks.aclose()
            self._finish(chat, state)

    async def close_stream(self, opened: Opened) -> None:
        """Ends a streamed request however its response ended: one whose events were never read (the client left
        before the first byte) is aborted and logged cancelled. Does nothing once the request is accounted."""
        if opened.chat.ended:
            return
        opened.state.status, opened.state.http_status = "cancelled", 499
        try:
            if opened.chunks is not None:
                await opened.chunks.aclose()
        finally:
            self._finish(opened.chat, opened.state)

    def _finish(self, chat: PreparedChat, state: GenerationState) -> None:
        """Accounts the request once: its row, metrics and the key's slot (through the accounting)."""
        if chat.ended:
            return
        chat.ended = True
        self._in_flight -= 1
        self.queue.release(chat)
        self.accounting.finished(chat, state)


async def _chunks(opened: Opened) -> AsyncIterator[tuple[int, ChatChunk]]:
    """The opened generation's chunks, its first one included."""
    if opened.first is not None:
        yield opened.first
    if opened.chunks is not None:
        async for item in opened.chunks:
            yield item


async def _check_options(tier: Tier, options: ChatOptions) -> None:
    """Before anything is generated: a schema the tier cannot enforce is the client's 400."""
    try:
        await asyncio.to_thread(tier.check_options, options)
    except InvalidRequestError as exc:
        param = "tools" if options.tools and options.tool_choice != "auto" else "response_format"
        raise invalid_request(str(exc), param, code="invalid_schema") from exc


def _logprobs_asked(body: ChatCompletionRequest, judged: bool) -> int | None:
    """Top logprobs per token to ask the tier for: the client's, and for a judged answer at least the best
    alternative (the answer scorer reads the margin to it); the client sees only what it asked for."""
    client = (body.top_logprobs or 0) if body.logprobs else None
    return max(client or 0, JUDGED_TOP_LOGPROBS) if judged else client


def sampling_params(body: ChatCompletionRequest, max_tokens: int, choice: int, judged: bool = False) -> SamplingParams:
    """The engine's parameters for one choice; `judged`: the cascade reads the chosen tokens' logprobs, asked for
    even when the client did not ask (its response shows them only if it did)."""
    try:
        return SamplingParams(
            max_tokens=max_tokens, temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            seed=None if body.seed is None else body.seed + choice, stop=body.stop,
            top_k=body.top_k or 0, ignore_eos=bool(body.ignore_eos),
            logprobs=_logprobs_asked(body, judged),
            presence_penalty=body.presence_penalty or 0.0, frequency_penalty=body.frequency_penalty or 0.0,
            repetition_penalty=1.0 if body.repetition_penalty is None else body.repetition_penalty,
            min_tokens=body.min_tokens or 0,
            logit_bias={int(k): v for k, v in body.logit_bias.items()} if body.logit_bias else None)
    except InvalidRequestError as exc:
        raise invalid_request(str(exc)) from exc
