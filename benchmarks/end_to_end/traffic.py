"""Sends workload tasks through a live `aio serve` with the openai SDK, a fixed number in flight, and keeps what
the client sees: the answer, its tokens, the chosen tokens' logprobs (when asked) and the request id that joins
the SQL log's row."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Sequence

import openai

from benchmarks.workload import Task


@dataclass
class Answer:
    task_id: str
    phase: str
    model: str  # what the request asked for: a tier name or "auto"
    request_id: str | None  # the server's id ("chatcmpl-" stripped); None when the request failed
    text: str
    prompt_tokens: int
    completion_tokens: int
    logprobs: list[float] | None  # the chosen tokens', when asked
    client_latency_s: float
    error: str | None = None
    margins: list[float | None] | None = None  # chosen logprob minus the best other token's, when top 2 were asked
    finish_reason: str | None = None


def _request_id(response_id: str) -> str:
    return response_id.removeprefix("chatcmpl-")


async def _send(client: openai.AsyncOpenAI, task: Task, phase: str, model: str, max_tokens: int,
                logprobs: bool, extra_body: dict[str, Any]) -> Answer:
    start = time.perf_counter()
    try:
        response = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": task.prompt}], max_tokens=max_tokens,
            temperature=0, logprobs=logprobs or None, top_logprobs=2 if logprobs else None,
            extra_body=extra_body or None)
    except openai.APIError as exc:
        return Answer(task.id, phase, model, None, "", 0, 0, None, time.perf_counter() - start,
                      f"{type(exc).__name__}: {exc}")
    choice = response.choices[0]
    content = choice.logprobs.content if choice.logprobs and choice.logprobs.content else None
    chosen = [c.logprob for c in content] if content else None
    margins = [_margin(c) for c in content] if content else None
    return Answer(task.id, phase, model, _request_id(response.id), choice.message.content or "",
                  response.usage.prompt_tokens, response.usage.completion_tokens, chosen,
                  time.perf_counter() - start, margins=margins, finish_reason=choice.finish_reason)


def _margin(entry) -> float | None:
    """As the server's answer scorer reads it: the chosen token's logprob minus the best other token's."""
    others = [t.logprob for t in (entry.top_logprobs or []) if t.token != entry.token]
    return entry.logprob - others[0] if others else None


async def _send_all(base_url: str, tasks: Sequence[Task], phase: str, model: str, concurrency: int,
                    max_tokens: int, logprobs: bool, extra_body: dict[str, Any]) -> list[Answer]:
    gate = asyncio.Semaphore(concurrency)
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", timeout=900, max_retries=0) as client:
        async def one(task: Task) -> Answer:
            async with gate:
                return await _send(client, task, phase, model, max_tokens, logprobs, extra_body)

        return list(await asyncio.gather(*(one(t) for t in tasks)))


def send_all(base_url: str, tasks: Sequence[Task], phase: str, model: str, *, concurrency: int = 4,
             max_tokens: int = 96, logprobs: bool = False, extra_body: dict[str, Any] | None = None) -> list[Answer]:
    """Every task once, `concurrency` requests in flight, greedy; answers in task order."""
    return asyncio.run(_send_all(base_url, tasks, phase, model, concurrency, max_tokens, logprobs, extra_body or {}))
