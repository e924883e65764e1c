"""One threshold controller per deployment: replicas each verify their own sample and store the verdicts; the
process holding the lease reads every stored verdict (all replicas') in order and moves thresholds.

Each change is a delta applied to the offsets the store holds at that moment (`VerdictStore.shift`), never the
controller's own copy written back, so a manual change (`aio router thresholds --reset`) is built on, not undone.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from quality_monitor.controller import ThresholdController
from quality_monitor.interfaces import Leadership, ThresholdChange, VerdictStore

logger = logging.getLogger(__name__)


class CentralControl:
    def __init__(self, controller: ThresholdController, store: VerdictStore, leadership: Leadership,
                 tiers: tuple[str, ...], interval_s: float = 2.0,
                 on_change: Callable[[ThresholdChange, dict[str, float]], None] | None = None) -> None:
        self.controller = controller
        self.store = store
        self.leadership = leadership
        self.tiers = tiers
        self.interval_s = interval_s
        self.on_change = on_change
        self.is_leader = False
        self._cursor: int | None = None  # the last verdict id this leader has counted

    def step(self) -> list[ThresholdChange]:
        """One pass (blocking: run it in a thread): keep or take the lease; as leader, count new verdicts."""
        if not self.leadership.hold():
            if self.is_leader:
                logger.info("quality monitor: another process controls the thresholds now")
            self.is_leader, self._cursor = False, None
            return []
        if not self.is_leader:
            self._take_over()  # the window's verdicts were acted on by the last leader; new ones count
        verdicts, self._cursor = self.store.verdicts_after(self._cursor)
        if not verdicts:
            return []
        self.controller.offsets = dict(self.store.offsets())
        changes = []
        for tier, passed in verdicts:
            changes += self._apply(self.controller.record(tier, passed))
        return changes

    def _take_over(self) -> None:
        """Becoming the leader: the last window of every tier's verdicts, from all replicas."""
        logger.info("quality monitor: this process controls the routing thresholds")
        self.controller.reset()
        for tier in self.tiers:
            self.controller.warm_start(tier, self.store.recent_outcomes(tier, self.controller.settings.window))
        _, self._cursor = self.store.verdicts_after(None)
        self.is_leader = True

    def _apply(self, change: ThresholdChange | None) -> list[ThresholdChange]:
        if change is None:
            return []
        logger.warning("quality monitor: %s", change.reason)
        offsets = self.store.shift(change, self.controller.settings.max_offset)
        self.controller.offsets = dict(offsets)
        if self.on_change is not None:
            self.on_change(change, dict(offsets))
        return [change]

    async def run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.step)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database may be away: try again next time
                logger.warning("quality monitor control pass failed: %s", exc)
            await asyncio.sleep(self.interval_s)

    def release(self) -> None:
        if self.is_leader:
            self.leadership.release()
            self.is_leader = False
