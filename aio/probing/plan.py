"""How many probe tasks each tier answers within the time budget.

Policy: every tier first answers a pilot (the probe set's first `PILOT_TASKS`, a balanced sample); its seconds per
task, measured there, fix how many more fit. All local tiers answer the same prefix of the probe set, so their
outcomes are paired task by task (what relative accuracy needs): the prefix is as long as the remaining budget
allows for all of them together. A remote tier costs money, so it answers at most `max_remote_tasks`. A tier that
gets fewer tasks than the probe set has is measured with wider intervals, never skipped.
"""
from __future__ import annotations

from dataclasses import dataclass

PILOT_TASKS = 8
MIN_TASKS = 24  # below this no fit is made from a tier's outcomes


@dataclass(frozen=True)
class TierCost:
    tier: str
    seconds_per_task: float  # wall time per task at the probe's concurrency, from the pilot
    remote: bool = False


def planned_tasks(costs: list[TierCost], num_tasks: int, remaining_s: float, done: int,
                  max_remote_tasks: int) -> dict[str, int]:
    """Tasks per tier (the pilot's included): a common prefix for local tiers, capped for remote ones."""
    local = [c for c in costs if not c.remote]
    per_task = sum(c.seconds_per_task for c in local)
    extra = int(max(0.0, remaining_s) / per_task) if per_task > 0 else num_tasks
    common = max(min(num_tasks, done + extra), min(num_tasks, MIN_TASKS))
    return {c.tier: min(common, max_remote_tasks) if c.remote else common for c in costs}


def remote_token_estimate(prompts: list[str], max_new_tokens: int, chars_per_token: float = 4.0) -> tuple[int, int]:
    """(prompt tokens, completion tokens) at most, for showing an operator what probing a remote tier costs."""
    prompt_tokens = sum(int(len(p) / chars_per_token) + 8 for p in prompts)
    return prompt_tokens, len(prompts) * max_new_tokens
