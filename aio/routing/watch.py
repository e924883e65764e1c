"""Keeps a running server's router in step with the database: the active classifier version (hot swap, no
restart) and the thresholds `aio router calibrate` / the quality monitor set."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from sqlalchemy.engine import Engine

from aio.routing import registry
from aio.routing.loader import load_version
from aio.routing.router import Router

logger = logging.getLogger(__name__)


class RouterWatcher:
    def __init__(self, router: Router, db: Engine, default_quality: float, poll_interval_s: float = 10.0,
                 pinned: bool = False, cache_dir: Path | None = None) -> None:
        self.router = router
        self.db = db
        self.default_quality = default_quality
        self.poll_interval_s = poll_interval_s
        self.pinned = pinned  # classifier_path is set: the classifier never changes at run time
        self.cache_dir = cache_dir  # where stored models are unpacked
        self._failed_version: str | None = None

    def poll_once(self) -> None:
        """Reads the database and applies what changed; a failure keeps the router as it is."""
        state = registry.router_state(self.db)
        self.router.quality = self.default_quality if state.quality is None else state.quality
        self.router.offsets = dict(state.offsets)
        if self.pinned:
            return
        active = registry.active_version(self.db)
        if active is None or active.version == self.router.classifier.version or active.version == self._failed_version:
            return
        try:
            classifier = load_version(active, self.db, self.cache_dir)
        except Exception as exc:
            self._failed_version = active.version
            logger.error("cannot switch to classifier %s (%s): %s stays in service", active.version, exc,
                         self.router.classifier.version)
            return
        previous, self.router.classifier = self.router.classifier.version, classifier
        self._failed_version = None
        logger.info("router classifier switched from %s to %s", previous, active.version)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                await asyncio.to_thread(self.poll_once)
            except Exception as exc:  # the database may be down for a while: keep routing as before
                logger.warning("router settings poll failed: %s", exc)
