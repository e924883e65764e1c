"""Generation on the chosen tier: every choice runs concurrently; their chunks fill the GenerationState (text,
tokens, timings) as they come. Also how a failed generation reads to the client and in the log."""
from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

from aio.api.errors import APIError, invalid_request
from aio.chat.context import ChoiceState, GenerationState, PreparedChat
from aio.chat.openai_shapes import add_tool_call_delta, logprob_entries
from aio.chat.queue_admission import QUEUE_FULL_RETRY_AFTER_S
from aio.metrics import Metrics
from tiers.engine.sampling_params import InvalidRequestError
from tiers.engine.structured_output import GRAMMAR_FAILED
from tiers.serving.pool import ChatChunk, TierUnavailableError
from tiers.serving.tools.options import ChatOptions


async def generate(chat: PreparedChat, state: GenerationState,
                   metrics: Metrics) -> AsyncIterator[tuple[int, ChatChunk]]:
    """Runs every choice concurrently and yields (choice index, chunk) as they come."""
    queue: asyncio.Queue[tuple[int, ChatChunk | BaseException | None]] = asyncio.Queue()

    async def run(index: int) -> None:
        request_id = chat.ctx.request_id if len(chat.params) == 1 else f"{chat.ctx.request_id}-{index}"
        try:
            async for chunk in chat.tier.stream_chat(chat.messages, chat.params[index], request_id,
                                                     options=chat.options, tenant=chat.ctx.key_id):
                await queue.put((index, chunk))
            await queue.put((index, None))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            await queue.put((index, _schema_failure(chat.options, exc)))
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
            _time_chunk(chat, state, index, item, metrics)
            _apply(chat, state.choices[index], item)
            if item.num_prompt_tokens:
                state.num_prompt_tokens = item.num_prompt_tokens
            yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _time_chunk(chat: PreparedChat, state: GenerationState, index: int, chunk: ChatChunk, metrics: Metrics) -> None:
    """Queue time, first token, and the first choice's inter-token gaps (one observation per token)."""
    now = time.perf_counter()
    queue_time_s = getattr(chunk, "queue_time_s", None)
    if queue_time_s is not None and state.queue_ms is None:
        state.queue_ms = queue_time_s * 1000
    if not chunk.num_new_tokens:
        return
    if index == 0:
        if state.first_choice_started_at is None:
            state.first_choice_started_at = now
        else:
            state.first_choice_tokens_after_first += chunk.num_new_tokens
    if state.first_token_at is None:
        state.first_token_at = now
    elif index == 0 and state.last_token_at is not None:
        gap = (now - state.last_token_at) / chunk.num_new_tokens
        for _ in range(chunk.num_new_tokens):
            metrics.inter_token.labels(chat.tier.name, chat.tier.model).observe(gap)
    if index == 0:
        state.last_token_at = now


def _apply(chat: PreparedChat, choice: ChoiceState, chunk: ChatChunk) -> None:
    choice.text += chunk.delta_text
    for delta in chunk.tool_calls or []:
        add_tool_call_delta(choice.tool_calls, delta)
    choice.num_tokens += chunk.num_new_tokens
    choice.num_cached_tokens = max(choice.num_cached_tokens, chunk.num_cached_tokens)
    if chunk.logprobs:
        choice.token_logprobs.extend(lp.logprob for lp in chunk.logprobs)
        choice.token_margins.extend(_margin(lp) for lp in chunk.logprobs)
        if chat.body.logprobs:  # the cascade asks for them too, for itself: the client gets what it asked
            choice.logprobs.extend(logprob_entries(chat.tier, chunk, chat.body.top_logprobs or 0))
    if chunk.finish_reason is not None:
        choice.finish_reason = chunk.finish_reason


def _margin(entry) -> float | None:
    """The chosen token's logprob minus the best other token's (None when the tier gave no alternatives)."""
    others = [logprob for token, logprob in entry.top if token != entry.token_id]
    return float(entry.logprob - others[0]) if others else None


def record_failure(state: GenerationState, exc: BaseException) -> None:
    """How a generation that raised `exc` ends in the log: cancelled (the client left) or an error."""
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        state.status, state.http_status = "cancelled", 499
    else:
        state.status, state.error = "error", f"{type(exc).__name__}: {exc}"
        state.http_status = exc.status_code if isinstance(exc, APIError) \
            else 503 if isinstance(exc, TierUnavailableError) else 500


def open_failure(chat: PreparedChat, state: GenerationState, exc: BaseException,
                 queue_timeout_s: float) -> APIError | None:
    """How a generation that raised `exc` before its first chunk ends: recorded in `state`; returns the client's
    error (None when cancelled: the client left)."""
    if isinstance(exc, asyncio.TimeoutError):
        error = APIError(503, f"tier {chat.tier.name} did not start answering within {queue_timeout_s:g} s; retry "
                              "later", code="queue_timeout", retry_after_s=QUEUE_FULL_RETRY_AFTER_S)
    elif isinstance(exc, InvalidRequestError):
        error = invalid_request(str(exc))
    else:  # the request's own failure (the tier stays up), or the tier's when no other one could take it
        record_failure(state, exc)
        error = api_error(exc, chat.ctx.request_id) if isinstance(exc, Exception) else None
    if error is not None:
        state.status, state.http_status = "error", error.status_code
        state.error = state.error or error.message
    return error


def _schema_failure(options: ChatOptions | None, exc: BaseException) -> BaseException:
    """A grammar that gave up mid-generation (its library hit a limit, or refused a token its own mask allowed) is
    the schema's doing: the 400 of a refused schema, naming the parameter that set it. The engine hands the
    failure over as an InvalidRequestError that names it (tiers.engine.errors keeps the message, not the type)."""
    if not (isinstance(exc, InvalidRequestError) and str(exc).startswith(GRAMMAR_FAILED)):
        return exc
    forced = options is not None and bool(options.tools) \
        and (options.tool_choice == "required" or options.forced_function is not None)
    return invalid_request(str(exc), "tools" if forced else "response_format", code="invalid_schema")


def api_error(exc: BaseException, request_id: str) -> APIError:
    """What the client is told about a generation that raised `exc`: our own messages as they are; an internal
    failure's details stay in the server's log and the request log, under the request's id."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, TierUnavailableError):
        return APIError(503, f"the tier serving this request became unavailable (request id {request_id}); retry "
                             "later", code="tier_unavailable", retry_after_s=exc.retry_after_s)
    if isinstance(exc, InvalidRequestError):
        return invalid_request(str(exc))
    return APIError(500, f"generation failed with an internal error; the server's log has the details under request "
                         f"id {request_id}", code="generation_failed")
