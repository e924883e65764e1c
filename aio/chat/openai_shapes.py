"""OpenAI's response shapes: the chat completion body, the stream's chunks and server-sent events."""
from __future__ import annotations

import json
from typing import Any

from aio.chat.context import ChoiceState, GenerationState, PreparedChat
from tiers.serving.pool import ChatChunk, Tier
from tiers.serving.tools.options import ToolCallDelta


def finish_reason(reason: str) -> str:
    return "stop" if reason in ("stop", "abort") else reason


def add_tool_call_delta(calls: list[dict[str, Any]], delta: ToolCallDelta) -> None:
    """Folds a streamed piece into message.tool_calls: a new call at a new index, else its arguments grow."""
    while len(calls) <= delta.index:
        calls.append({"id": None, "type": "function", "function": {"name": None, "arguments": ""}})
    call = calls[delta.index]
    if delta.id is not None:
        call["id"] = delta.id
    if delta.name is not None:
        call["function"]["name"] = delta.name
    call["function"]["arguments"] += delta.arguments


def message(choice: ChoiceState) -> dict[str, Any]:
    """The answer's message: its text, and its tool calls when it made some (then text may be null)."""
    if not choice.tool_calls:
        return {"role": "assistant", "content": choice.text}
    return {"role": "assistant", "content": choice.text or None, "tool_calls": choice.tool_calls}


def answer_text(choice: ChoiceState) -> str:
    """The answer as one text (the SQL log, the quality monitor): its content, then its tool calls as JSON."""
    if not choice.tool_calls:
        return choice.text
    calls = json.dumps([{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                        for c in choice.tool_calls], ensure_ascii=False)
    return f"{choice.text}\n{calls}" if choice.text else calls


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def logprob_entries(tier: Tier, chunk: ChatChunk, top: int) -> list[dict[str, Any]]:
    """OpenAI's logprobs content for the chunk's tokens, with the `top` alternatives the client asked for (the
    server may have asked the tier for more, for its answer scorer)."""
    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        text = tier.token_text(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return [{**entry(lp.token_id, lp.logprob), "top_logprobs": [entry(t, p) for t, p in lp.top[:top]]}
            for lp in chunk.logprobs or []]


def usage(chat: PreparedChat, state: GenerationState) -> dict[str, Any]:
    cached = max((c.num_cached_tokens for c in state.choices), default=0)
    prompt_tokens = state.prompt_tokens(chat)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": state.completion_tokens,
            "total_tokens": prompt_tokens + state.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached}}


def aio_fields(chat: PreparedChat, state: GenerationState, costs: tuple[float, float]) -> dict[str, Any]:
    """AIO's own `aio` object: where the request went and what it cost against the all-large baseline; for a
    request the confidence cascade judged, the answer's confidence and the tier whose answer it replaced."""
    cost, baseline = costs
    return {"tier": chat.tier.name, "routing_reason": chat.decision.reason, "routing_score": chat.decision.score,
            "cost_usd": cost, "baseline_cost_usd": baseline, "demo_weights": chat.tier.is_demo,
            "confidence": state.confidence(chat), "cascade_from": chat.cascaded.from_tier if chat.cascaded else None}


def completion_body(chat: PreparedChat, state: GenerationState, costs: tuple[float, float]) -> dict[str, Any]:
    choices = [{"index": i, "message": message(c),
                "logprobs": {"content": c.logprobs} if chat.body.logprobs else None,
                "finish_reason": finish_reason(c.finish_reason or "stop")}
               for i, c in enumerate(state.choices)]
    return {"id": chat.response_id, "object": "chat.completion", "created": chat.created, "model": chat.tier.model,
            "choices": choices, "usage": usage(chat, state), "system_fingerprint": None,
            "aio": aio_fields(chat, state, costs)}


def chunk_body(chat: PreparedChat, index: int, delta: dict[str, Any], reason: str | None, include_usage: bool,
               logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    chunk = {"id": chat.response_id, "object": "chat.completion.chunk", "created": chat.created,
             "model": chat.tier.model,
             "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason}]}
    if include_usage:
        chunk["usage"] = None
    return chunk


def usage_chunk_body(chat: PreparedChat, state: GenerationState, costs: tuple[float, float]) -> dict[str, Any]:
    return {"id": chat.response_id, "object": "chat.completion.chunk", "created": chat.created,
            "model": chat.tier.model, "choices": [], "usage": usage(chat, state),
            "aio": aio_fields(chat, state, costs)}


def stream_events(chat: PreparedChat, index: int, chunk: ChatChunk, include_usage: bool) -> list[str]:
    """The events one tier chunk makes: a content delta (with its logprobs) and the choice's finish."""
    events = []
    if chunk.delta_text or chunk.logprobs:
        logprobs = {"content": logprob_entries(chat.tier, chunk, chat.body.top_logprobs or 0)} \
            if chunk.logprobs and chat.body.logprobs else None
        events.append(sse(chunk_body(chat, index, {"content": chunk.delta_text}, None, include_usage, logprobs)))
    if chunk.tool_calls:
        delta = {"tool_calls": [d.to_openai() for d in chunk.tool_calls]}
        events.append(sse(chunk_body(chat, index, delta, None, include_usage)))
    if chunk.finish_reason is not None:
        events.append(sse(chunk_body(chat, index, {}, finish_reason(chunk.finish_reason), include_usage)))
    return events
