"""Answers probe tasks on one tier, as a user's request would be answered (the user message alone, the tier's chat
template, greedy decoding), at the engine priority of background work, a few at a time; scores each answer against
the task's computed truth and stores it."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from aio.probing.store import ProbeOutcome, ProbeStore
from aio.settings import Prices
from probes import Task
from tiers.engine.sampling_params import SamplingParams
from tiers.serving.pool import Tier

PROBE_PRIORITY = 10  # the quality monitor's replays' priority: behind every live request
MAX_NEW_TOKENS = 96
MAX_CODE_TOKENS = 192  # a function takes more room than a final answer
TOP_LOGPROBS = 2  # the best alternative per token, for the answer scorer's margins


@dataclass
class ProbeTarget:
    tier: Tier
    fingerprint: str
    prices: Prices


async def answer(target: ProbeTarget, task: Task, max_tokens: int | None = None) -> ProbeOutcome:
    """The tier's scored answer to `task` (raises what the tier raises)."""
    max_tokens = max_tokens or (MAX_CODE_TOKENS if task.kind == "code" else MAX_NEW_TOKENS)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, logprobs=TOP_LOGPROBS)
    text, logprobs, margins = [], [], []
    finish, prompt_tokens, completion_tokens = None, 0, 0
    start = time.perf_counter()
    async for chunk in target.tier.stream_chat([{"role": "user", "content": task.prompt}], params,
                                               f"probe-{task.id}-{time.monotonic_ns()}", priority=PROBE_PRIORITY):
        text.append(chunk.delta_text)
        completion_tokens += chunk.num_new_tokens
        for entry in chunk.logprobs or ():
            logprobs.append(float(entry.logprob))
            others = [lp for token, lp in entry.top if token != entry.token_id]
            margins.append(float(entry.logprob - others[0]) if others else float("nan"))
        if chunk.finish_reason is not None:
            finish, prompt_tokens = chunk.finish_reason, chunk.num_prompt_tokens or prompt_tokens
    reply = "".join(text)
    return ProbeOutcome(
        fingerprint=target.fingerprint, tier=target.tier.name, task_id=task.id, category=task.category,
        difficulty=task.difficulty, prompt=task.prompt, answer=reply, correct=task.is_right(reply),
        finish_reason=finish, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
        cost_usd=target.prices.cost(prompt_tokens, completion_tokens),
        latency_ms=(time.perf_counter() - start) * 1000, token_logprobs=logprobs or None,
        token_margins=[m if m == m else None for m in margins] or None)


class ProbeFailed(RuntimeError):
    """The tier failed `MAX_FAILURES` probe tasks in a row: it is left unmeasured, with the last error."""


MAX_FAILURES = 3


async def probe_tier(target: ProbeTarget, tasks: Sequence[Task], store: ProbeStore, concurrency: int = 2,
                     deadline: float | None = None, on_done: Callable[[ProbeOutcome], None] | None = None) -> int:
    """Answers the tasks not yet stored for the target's fingerprint, `concurrency` at a time, until `deadline`
    (time.monotonic()) if given; returns how many it stored. A task whose request fails is left for a later run;
    `MAX_FAILURES` failures in a row raise ProbeFailed."""
    done = await asyncio.to_thread(store.done_task_ids, target.fingerprint)
    queue = [task for task in tasks if task.id not in done]
    stored, failures = 0, 0

    async def worker() -> None:
        nonlocal stored, failures
        while queue and (deadline is None or time.monotonic() < deadline):
            task = queue.pop(0)
            try:
                outcome = await answer(target, task)
            except Exception as exc:  # noqa: BLE001 - the tier's failure: counted, the task stays unanswered
                failures += 1
                if failures >= MAX_FAILURES:
                    queue.clear()
                    raise ProbeFailed(f"tier {target.tier.name} failed {failures} probe tasks in a row: "
                                      f"{type(exc).__name__}: {exc}") from exc
                continue
            failures = 0
            if await asyncio.to_thread(store.add, outcome):
                stored += 1
                if on_done is not None:
                    on_done(outcome)

    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    return stored
