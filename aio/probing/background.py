"""`aio serve`'s side of probing: each tier's fingerprint and measurement status (for /ready, the dashboard and the
start-up banner), the family demo's shipped measurement imported when its files match, and a background task that
measures the tiers nobody measured yet and fits routing to them, while the server serves."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sqlalchemy.engine import Engine

from aio.probing.fingerprint import tier_fingerprint
from aio.probing.measure import Measurement, measure
from aio.probing.runner import ProbeTarget
from aio.probing.shipped import import_shipped
from aio.probing.store import ProbeStore, RunStatus
from aio.settings import TierSettings
from tiers.serving.pool import TierPool

logger = logging.getLogger(__name__)

MEASURED, MEASURING, UNMEASURED, FAILED = "measured", "measuring", "unmeasured", "failed"


@dataclass
class TierMeasurements:
    db: Engine
    pool: TierPool
    tier_settings: dict[str, TierSettings]
    home: Path
    fingerprints: dict[str, str] = field(default_factory=dict)
    task: asyncio.Task | None = None

    async def prepare(self, shipped: bool = True) -> None:
        """Computes the fingerprints (hashing model files, cached under the home) and, with `shipped`, imports the
        shipped measurements that match them."""
        self.fingerprints = await asyncio.to_thread(
            lambda: {t.name: tier_fingerprint(self.tier_settings[t.name], self.home) for t in self.pool})
        if not shipped:
            return
        imported = await asyncio.to_thread(import_shipped, ProbeStore(self.db), self.fingerprints)
        if imported:
            logger.info("tiers %s: the measurement shipped with AIO for their model files is in the log",
                        ", ".join(imported))

    def status(self) -> dict[str, dict[str, Any]]:
        """Per tier: status (measured / measuring / unmeasured / failed), tasks done and planned, accuracy."""
        store = ProbeStore(self.db)
        out = {}
        for tier, fingerprint in self.fingerprints.items():
            run = store.status(fingerprint)
            out[tier] = _describe(run, self.task is not None and not self.task.done())
        return out

    def unmeasured(self) -> list[str]:
        return [tier for tier, s in self.status().items() if s["status"] != MEASURED]

    def start(self, tasks: Callable[[], list], budget_s: float, concurrency: int, max_remote_tasks: int,
              on_measured: Callable[[], None]) -> None:
        """Measures the unmeasured tiers in the background, then calls `on_measured` (which refits routing)."""
        async def run() -> None:
            try:
                probe_tasks = await asyncio.to_thread(tasks)
                store = ProbeStore(self.db)
                todo = [Measurement(ProbeTarget(t, self.fingerprints[t.name], self.tier_settings[t.name].prices),
                                    t.model, self.tier_settings[t.name].is_remote) for t in self.pool]
                statuses = await measure(todo, store, probe_tasks, budget_s, concurrency, max_remote_tasks)
                logger.info("tier measurement done: %s", {t: (s.status, s.done) for t, s in statuses.items() if s})
                await asyncio.to_thread(on_measured)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("measuring the tiers failed; routing stays as it is (retry: aio calibrate)")

        self.task = asyncio.create_task(run(), name="aio-probe")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


def _describe(run: RunStatus | None, background: bool) -> dict[str, Any]:
    if run is None:
        return {"status": MEASURING if background else UNMEASURED, "done": 0, "planned": 0}
    status = run.status if run.status in (MEASURED, FAILED) else (MEASURING if background else UNMEASURED)
    accuracy = run.correct / run.done if run.done else None
    return {"status": status, "done": run.done, "planned": run.planned, "accuracy": accuracy, "source": run.source,
            "model": run.model}
