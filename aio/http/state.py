"""What the running server holds (app.state.aio): built by aio.server.app, read by the routes through deps."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aio.answer_cache import AnswerCache
from aio.chat.service import ChatService
from aio.db.keys import KeyStore
from aio.demo import EmbeddedDefault
from aio.db.log_writer import LogWriter
from aio.metrics import Metrics
from aio.probing.background import TierMeasurements
from aio.routing import Classifier, Router
from aio.http.auth import Authenticator
from aio.http.budget_guard import BudgetGuard
from aio.http.key_limits import KeyLimiter
from aio.settings import Settings, TierSettings
from tiers.serving.pool import TierPool


@dataclass
class AppState:
    settings: Settings
    tier_settings: dict[str, TierSettings]
    pool: TierPool
    router: Router
    service: ChatService
    log_writer: LogWriter
    keys: KeyStore
    auth: Authenticator
    metrics: Metrics
    db: object  # sqlalchemy Engine
    watch_task: asyncio.Task
    monitor: object | None = None  # quality_monitor.QualityMonitor
    prune_task: asyncio.Task | None = None  # deletes raw rows past raw_retention_days
    demo: EmbeddedDefault | None = None  # the embedded demo tiers, when no tiers are configured
    limiter: KeyLimiter = field(default_factory=KeyLimiter)  # per-key limits (this replica's share)
    measurements: TierMeasurements | None = None  # the tiers' probe measurements, and the background probe
    budgets: BudgetGuard | None = None  # key budgets: the spend rule at a request's start
    answer_cache: AnswerCache | None = None  # the exact answer cache (None: answer_cache = "off")

    @property
    def classifier(self) -> Classifier:
        return self.router.classifier  # may be swapped at run time
