"""Keeps a running server's router in step with the database: the active classifier version (hot swap, no
restart), the thresholds `aio router calibrate` / the quality monitor set, and the active routing fit (the quality
target's), used only when it was made for the tiers served (their fingerprints) and the classifier in service;
when the classifier changed, `refit` makes a fit for it from the stored outcomes."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from sqlalchemy.engine import Engine

from typing import Callable

from aio.routing import registry
from aio.routing.fit_store import load_active
from aio.routing.loader import load_version
from aio.routing.router import Router

logger = logging.getLogger(__name__)


class RouterWatcher:
    def __init__(self, router: Router, db: Engine, default_quality: float, poll_interval_s: float = 10.0,
                 pinned: bool = False, cache_dir: Path | None = None, quality_is_set: bool = False,
                 fingerprints: dict[str, str] | None = None, refit: Callable[[], None] | None = None) -> None:
        self.router = router
        self.db = db
        self.default_quality = default_quality
        self.poll_interval_s = poll_interval_s
        self.pinned = pinned  # classifier_path is set: the classifier never changes at run time
        self.cache_dir = cache_dir  # where stored models are unpacked
        self._failed_version: str | None = None
        self.quality_is_set = quality_is_set  # `quality` in the settings: the knob wins over the target
        self.fingerprints = fingerprints  # tier -> fingerprint of the tiers served (None: not known yet)
        self.refit = refit
        self._fit_id: int | None = None
        self._refitted_for: str | None = None

    def poll_once(self) -> None:
        """Reads the database and applies what changed; a failure keeps the router as it is."""
        state = registry.router_state(self.db)
        self.router.quality = self.default_quality if state.quality is None else state.quality
        self.router.offsets = dict(state.offsets)
        self.router.knob_override = self.quality_is_set or state.quality is not None
        self._switch_classifier()
        self._load_fit()

    def _switch_classifier(self) -> None:
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

    def _load_fit(self) -> None:
        found = load_active(self.db)
        if found is None or self.fingerprints is None:
            self.router.fit = None
            return
        fit_id, fit = found
        if fit.fingerprints != {t: self.fingerprints.get(t) for t in fit.tiers}:
            self.router.fit = None
            return
        version = self.router.classifier.version
        if fit.classifier_version != version and self.refit is not None and self._refitted_for != version:
            self._refitted_for = version
            logger.info("routing fit %d was made for classifier %s: fitting again for %s", fit_id,
                        fit.classifier_version, version)
            self.refit()
            return self._load_fit()
        if fit_id != self._fit_id:
            logger.info("routing fit %d in force: quality target %.2f, estimated %.1f%% of always-%s at %.0f%% of "
                        "its cost", fit_id, fit.target, 100 * fit.estimate.relative_accuracy, fit.tiers[-1],
                        100 * fit.estimate.cost_share)
        self._fit_id, self.router.fit = fit_id, fit

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                await asyncio.to_thread(self.poll_once)
            except Exception as exc:  # the database may be down for a while: keep routing as before
                logger.warning("router settings poll failed: %s", exc)
