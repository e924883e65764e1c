"""Measures the tiers that have no measurement for their fingerprint: a pilot on each, a plan that fits the time
budget (`plan`), then each tier answers its share of the probe set. Resumable: answered tasks are stored as they
come, and a later run answers only what is missing."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from aio.probing.plan import PILOT_TASKS, TierCost, planned_tasks
from aio.probing.runner import ProbeFailed, ProbeTarget, probe_tier
from aio.probing.store import FAILED, MEASURED, ProbeStore, RunStatus
from aio.routing.progress import NoProgress, Progress
from probes import Task

logger = logging.getLogger(__name__)

PROBE_SET_VERSION = "probe-v2"  # v2: knowledge and code tasks joined
DEFAULT_BUDGET_S = 540.0  # every tier together; leaves room under 10 minutes for start-up and the fit
DEFAULT_MAX_REMOTE_TASKS = 40


@dataclass
class Measurement:
    target: ProbeTarget
    model: str
    remote: bool = False


async def measure(measurements: list[Measurement], store: ProbeStore, tasks: list[Task],
                  budget_s: float = DEFAULT_BUDGET_S, concurrency: int = 2,
                  max_remote_tasks: int = DEFAULT_MAX_REMOTE_TASKS, max_tasks: int | None = None,
                  progress: Progress | None = None) -> dict[str, RunStatus]:
    """Measures every unmeasured tier of `measurements`; returns each tier's run status."""
    progress = progress or NoProgress()
    tasks = tasks[:max_tasks] if max_tasks is not None else tasks
    deadline = time.monotonic() + budget_s
    pending = [m for m in measurements if not _measured(store, m)]
    for m in pending:
        store.begin(m.target.fingerprint, m.target.tier.name, m.model, PROBE_SET_VERSION, len(tasks))
    failed: dict[str, str] = {}
    started = list(pending)
    progress.stage("probing: pilot", total=PILOT_TASKS * len(pending))
    for m in list(pending):
        if not await _run(m, tasks[:PILOT_TASKS], store, concurrency, deadline, progress, failed):
            pending.remove(m)
    plan = planned_tasks([_cost(store, m, concurrency) for m in pending], len(tasks),
                         deadline - time.monotonic(), PILOT_TASKS, max_remote_tasks)
    for m in pending:
        store.begin(m.target.fingerprint, m.target.tier.name, m.model, PROBE_SET_VERSION, plan[m.target.tier.name])
    remaining = sum(max(0, plan[m.target.tier.name] - PILOT_TASKS) for m in pending)
    progress.stage(f"probing: {', '.join(f'{t} {n} tasks' for t, n in plan.items())}", total=remaining)
    for m in pending:
        await _run(m, tasks[:plan[m.target.tier.name]], store, concurrency, deadline, progress, failed)
    for m in started:
        _close(store, m, failed)
    progress.close()
    return {m.target.tier.name: store.status(m.target.fingerprint) for m in measurements}


def _measured(store: ProbeStore, m: Measurement) -> bool:
    status = store.status(m.target.fingerprint)
    return status is not None and status.measured


async def _run(m: Measurement, tasks: list[Task], store: ProbeStore, concurrency: int, deadline: float,
               progress: Progress, failed: dict[str, str]) -> bool:
    try:
        await probe_tier(m.target, tasks, store, concurrency, deadline, on_done=lambda _: progress.advance())
        return True
    except ProbeFailed as exc:
        logger.warning("%s", exc)
        failed[m.target.fingerprint] = str(exc)
        return False


def _cost(store: ProbeStore, m: Measurement, concurrency: int) -> TierCost:
    latencies = [r.latency_ms for r in store.results(m.target.fingerprint) if r.latency_ms]
    seconds = (sum(latencies) / len(latencies) / 1000 / max(1, concurrency)) if latencies else 1.0
    return TierCost(m.target.tier.name, seconds, m.remote)


def _close(store: ProbeStore, m: Measurement, failed: dict[str, str]) -> None:
    fingerprint = m.target.fingerprint
    if fingerprint in failed:
        store.finish(fingerprint, FAILED, failed[fingerprint])
        return
    status = store.status(fingerprint)
    if status is not None and status.done >= status.planned:
        store.finish(fingerprint, MEASURED)
    else:
        logger.info("tier %s: %d of %d probe tasks answered within the budget; the rest at the next run",
                    m.target.tier.name, status.done if status else 0, status.planned if status else 0)


