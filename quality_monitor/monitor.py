"""The quality monitor: samples finished low-tier answers, replays them on the reference tier at low priority,
compares, stores the verdict and moves routing thresholds when a tier's failure rate climbs.

`offer` is called on the request path and never blocks: it samples, checks the bounded queue and the hourly
token budget, and enqueues. Workers (at most `max_concurrent` replays at once) do the rest in the background.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from quality_monitor.control import CentralControl
from quality_monitor.controller import ThresholdController
from quality_monitor.interfaces import Candidate, Leadership, Replayer, Verdict, VerdictStore
from quality_monitor.sampling import Sampler
from quality_monitor.similarity import AnswerComparer

logger = logging.getLogger(__name__)


@dataclass
class MonitorStats:
    offered: int = 0
    sampled: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  # by reason: queue_full, budget
    verdicts: dict[tuple[str, bool], int] = field(default_factory=dict)
    failures: int = 0  # replays or stores that raised
    judge_cost_usd: float = 0.0
    judge_tokens: int = 0


class QualityMonitor:
    def __init__(self, replayer: Replayer, store: VerdictStore, *, reference_tier: str = "large",
                 sampler: Sampler | None = None, comparer: AnswerComparer | None = None,
                 controller: ThresholdController | None = None, pass_threshold: float = 0.85,
                 queue_size: int = 64, budget_tokens_per_hour: int = 200_000, max_concurrent: int = 1,
                 on_change=None, leadership: Leadership | None = None, control_interval_s: float = 2.0) -> None:
        self.replayer = replayer
        self.store = store
        self.reference_tier = reference_tier
        self.sampler = sampler or Sampler(0.05)
        self.comparer = comparer or AnswerComparer()
        self.controller = controller or ThresholdController()
        self.pass_threshold = pass_threshold
        self.budget_tokens_per_hour = budget_tokens_per_hour
        self.max_concurrent = max_concurrent
        self.on_change = on_change  # called with each ThresholdChange (e.g. to update the router at once)
        # With a lease: only its holder moves thresholds, from every stored verdict (all replicas'); without one,
        # this monitor counts its own verdicts.
        self.central = CentralControl(self.controller, store, leadership, self.sampler.tiers, control_interval_s,
                                      on_change) if leadership is not None else None
        self.queue: asyncio.Queue[Candidate] = asyncio.Queue(maxsize=queue_size)
        self.stats = MonitorStats()
        self._spent: deque[tuple[float, int]] = deque()  # (time, tokens) of the last hour's replays
        self._workers: list[asyncio.Task] = []
        self._idle = asyncio.Event()
        self._idle.set()
        self._in_flight = 0

    # ---- the request path ---------------------------------------------------------------------------------

    def tokens_spent_last_hour(self) -> int:
        horizon = time.monotonic() - 3600
        while self._spent and self._spent[0][0] < horizon:
            self._spent.popleft()
        return sum(tokens for _, tokens in self._spent)

    def offer(self, candidate: Candidate) -> bool:
        """True if the answer was queued for verification."""
        self.stats.offered += 1
        if candidate.tier == self.reference_tier or not self.sampler.should_sample(
                candidate.request_id, candidate.tier, candidate.routing_score, candidate.threshold):
            return False
        if self.tokens_spent_last_hour() >= self.budget_tokens_per_hour:
            return self._drop("budget")
        try:
            self.queue.put_nowait(candidate)
        except asyncio.QueueFull:
            return self._drop("queue_full")
        self._idle.clear()
        self.stats.sampled[candidate.tier] = self.stats.sampled.get(candidate.tier, 0) + 1
        return True

    def _drop(self, reason: str) -> bool:
        self.stats.dropped[reason] = self.stats.dropped.get(reason, 0) + 1
        return False

    # ---- the workers --------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.central is None:
            for tier in self.sampler.tiers:
                try:
                    self.controller.warm_start(tier, self.store.recent_outcomes(tier, self.controller.settings.window))
                except Exception as exc:
                    logger.warning("cannot read past verdicts for %s: %s", tier, exc)
        self._workers = [asyncio.create_task(self._work(), name=f"quality-monitor-{i}")
                         for i in range(self.max_concurrent)]
        if self.central is not None:
            self._workers.append(asyncio.create_task(self.central.run(), name="quality-monitor-control"))

    async def stop(self) -> None:
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        if self.central is not None:
            try:
                await asyncio.to_thread(self.central.release)
            except Exception as exc:
                logger.warning("cannot release the quality monitor lease: %s", exc)

    async def drain(self, timeout: float | None = None) -> bool:
        """Waits until the queue is empty and no replay is running (tests, shutdown)."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def _work(self) -> None:
        while True:
            candidate = await self.queue.get()
            self._in_flight += 1
            try:
                await self.verify(candidate)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.stats.failures += 1
                logger.exception("verifying request %s failed", candidate.request_id)
            finally:
                self._in_flight -= 1
                self.queue.task_done()
                if self.queue.empty() and self._in_flight == 0:
                    self._idle.set()

    async def verify(self, candidate: Candidate) -> Verdict:
        replay = await self.replayer(candidate)
        tokens = replay.prompt_tokens + replay.completion_tokens
        self._spent.append((time.monotonic(), tokens))
        self.stats.judge_tokens += tokens
        self.stats.judge_cost_usd += replay.cost_usd
        comparison = await asyncio.to_thread(self.comparer.compare, candidate.answer, replay.text)
        passed = comparison.similarity >= self.pass_threshold
        verdict = Verdict(candidate, self.reference_tier, replay, comparison.similarity, comparison.method, passed)
        await asyncio.to_thread(self.store.save, verdict)
        key = (candidate.tier, passed)
        self.stats.verdicts[key] = self.stats.verdicts.get(key, 0) + 1
        if self.central is None:
            await asyncio.to_thread(self._control_locally, candidate.tier, passed)
        return verdict

    def _control_locally(self, tier: str, passed: bool) -> None:
        """No lease: this monitor's own verdicts move thresholds, as deltas on what the store holds now."""
        self.controller.offsets = dict(self.store.offsets())
        change = self.controller.record(tier, passed)
        if change is None:
            return
        logger.warning("quality monitor: %s", change.reason)
        offsets = self.store.shift(change, self.controller.settings.max_offset)
        self.controller.offsets = dict(offsets)
        if self.on_change is not None:
            self.on_change(change, dict(offsets))
