"""The FastAPI application: lifespan (database, migrations, tiers, classifier, log writer) and routers."""
from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from functools import partial
from typing import AsyncIterator

from fastapi import FastAPI

from aio.chat.cascade import CascadeSettings
from aio.chat.service import ChatService
from aio.db.database import make_engine
from aio.db.keys import KeyStore
from aio.db.log_writer import LogWriter
from aio.answer_cache import AnswerCache, MemoryStore, SqlStore
from aio.http.budget_guard import BudgetGuard
from aio.db.migrate import ensure_schema
from aio.demo import EmbeddedDefault
from aio.http.auth import Authenticator, is_loopback
from aio.http.state import AppState
from aio.http.throttle import FailureLimiter
from aio.metrics import Metrics
from aio.probing.background import TierMeasurements
from aio.probing.fitting import refit_routing
from aio.routing import Router, RouterWatcher, load_classifier
from aio.server.body_limit import BodyLimitMiddleware
from aio.server.errors import install_error_handlers
from aio.server.host_check import HostCheckMiddleware, host_check
from aio.server.no_store import NoStoreMiddleware
from aio.settings import REFERENCE_TIER, Settings, TierSettings
from aio.tier_loader import build_pool
from tiers.serving.pool import TierPool

logger = logging.getLogger("aio.server")


class StartupError(RuntimeError):
    """The server cannot start with these settings: the message says why and what to do."""


def _prepare_database(settings: Settings):
    url = settings.resolved_database_url
    db = make_engine(url)
    try:
        ensure_schema(db)  # the embedded SQLite upgrades itself; a shared server must be at head already
    except BaseException:
        db.dispose()
        raise
    return db


def _tier_settings(settings: Settings) -> tuple[dict[str, TierSettings], EmbeddedDefault | None]:
    """The configured tiers, or the embedded demo tiers (and what they are)."""
    if settings.tiers:
        return dict(settings.tiers), None
    from aio.demo import embedded_default

    demo = embedded_default(settings.home, settings.demo_model)
    return demo.tiers, demo


def _check_access(keys: KeyStore, bind_host: str, open_endpoint: bool) -> None:
    """Open mode only on loopback; otherwise at least one key must exist."""
    if open_endpoint:
        if not is_loopback(bind_host):
            raise StartupError(f"open_endpoint = true serves without API keys and is for loopback only; refusing to "
                               f"listen on {bind_host}: create a key with `aio keys create --name NAME` and turn "
                               "open_endpoint off")
        return
    if keys.count_active(None) == 0:
        raise StartupError("no API keys: create one with `aio keys create --name NAME`, or serve without keys on "
                           "loopback with `aio serve --open` (open_endpoint = true)")


def preflight(settings: Settings, bind_host: str) -> None:
    """The checks `aio serve` runs before it starts: database reachable and migrated, keys unless open mode."""
    db = _prepare_database(settings)
    try:
        _check_access(KeyStore(db), bind_host, settings.open_endpoint)
    finally:
        db.dispose()


async def _start(settings: Settings, bind_host: str, admin_key: str) -> AppState:
    db = await asyncio.to_thread(_prepare_database, settings)
    keys = KeyStore(db)
    auth = Authenticator(keys, admin_key, bind_host, settings.open_endpoint,
                         FailureLimiter(settings.login_max_failures, settings.login_window_s),
                         settings.metrics_auth, settings.metrics_key)
    await asyncio.to_thread(_check_access, keys, bind_host, settings.open_endpoint)
    tier_settings, demo = await asyncio.to_thread(_tier_settings, settings)
    if demo is not None:
        logger.warning("no tiers configured: serving the embedded %s", demo.note)
    pool = await asyncio.to_thread(build_pool, tier_settings, demo is not None and demo.random_weights)
    try:
        cache_dir = settings.home / "classifiers"
        classifier = await asyncio.to_thread(load_classifier, settings.classifier_path, db, cache_dir)
        router = Router(classifier, [t.name for t in pool], settings.quality)
        measurements = TierMeasurements(db, pool, tier_settings, settings.home)
        await measurements.prepare(settings.probe_shipped)
        refit = partial(refit_routing, db, router, measurements.fingerprints, settings.quality_target)
        watcher = RouterWatcher(router, db, settings.quality, settings.classifier_poll_interval_s,
                                pinned=settings.classifier_path is not None, cache_dir=cache_dir,
                                quality_is_set="quality" in settings.model_fields_set,
                                fingerprints=measurements.fingerprints, refit=refit)
        await asyncio.to_thread(watcher.poll_once)
        log_writer = LogWriter(db, batch_size=settings.log_batch_size, flush_interval_s=settings.log_flush_interval_s,
                               max_buffer=settings.log_buffer_size, spill_dir=settings.home / "log-spill",
                               journal=True, replica=settings.replica)
        log_writer.start()
    except BaseException:
        await pool.aclose()
        raise
    metrics = Metrics(lambda: [(t.name, t.model, t.load()) for t in pool])
    service = ChatService(pool, router, tier_settings, log_writer, metrics, settings.log_prompts,
                          settings.max_concurrent_requests, settings.queue_timeout_s, settings.tier_retry_after_s,
                          settings.structured_min_tier,
                          CascadeSettings(settings.cascade, settings.cascade_threshold, settings.cascade_confidence))
    monitor = _start_monitor(settings, pool, service, router, db, log_writer, metrics)
    if router.fit is None and not measurements.unmeasured():  # measured (or shipped) but never fitted here
        await asyncio.to_thread(_fit_now, watcher)
    watch_task = asyncio.create_task(watcher.run(), name="aio-router-watch")
    _start_probing(settings, measurements, watcher)
    prune_task = None
    if settings.raw_retention_days is not None:
        from aio.db.retention import prune_periodically

        prune_task = asyncio.create_task(prune_periodically(db, settings.raw_retention_days), name="aio-prune")
    return AppState(settings, tier_settings, pool, router, service, log_writer, keys, auth, metrics, db, watch_task,
                    monitor, prune_task, demo, measurements=measurements,
                    budgets=BudgetGuard(db, replica=settings.replica), answer_cache=_answer_cache(settings, db))


def _answer_cache(settings: Settings, db) -> AnswerCache | None:
    if settings.answer_cache == "off":
        return None
    store = MemoryStore(settings.answer_cache_max_entries) if settings.answer_cache == "memory" else SqlStore(db)
    return AnswerCache(store, settings.answer_cache_scope, settings.answer_cache_opt_in, settings.raw_retention_days)


def _fit_now(watcher: RouterWatcher) -> None:
    try:
        watcher.refit()
        watcher.poll_once()
    except Exception:  # routing keeps the knob; `aio calibrate --refit` says why
        logger.exception("fitting routing to the measured tiers failed")


def _start_probing(settings: Settings, measurements: TierMeasurements, watcher: RouterWatcher) -> None:
    """Measures in the background the tiers whose model was never measured (settings probe_*), then fits routing."""
    unmeasured = measurements.unmeasured()
    if not unmeasured:
        return
    if not settings.probe_on_start:
        logger.warning("tiers %s are not measured and probe_on_start is off: `auto` uses the quality knob until "
                       "`aio calibrate` measures them", ", ".join(unmeasured))
        return
    remote = [n for n in unmeasured if measurements.tier_settings[n].is_remote]
    if remote and not settings.probe_remote:
        logger.warning("remote tiers %s are not measured: they are probed only with probe_remote = true or by "
                       "`aio calibrate` (it shows what it costs first)", ", ".join(remote))
    logger.info("measuring tiers %s in the background (at most %.0f s); serving meanwhile", ", ".join(unmeasured),
                settings.probe_budget_s)

    def on_measured() -> None:
        _fit_now(watcher)

    from probes.probe_set import probe_set

    measurements.start(lambda: probe_set()[:settings.probe_max_tasks], settings.probe_budget_s, settings.probe_concurrency,
                       settings.probe_max_remote_tasks if settings.probe_remote else 0, on_measured)


def _start_monitor(settings: Settings, pool: TierPool, service: ChatService, router: Router, db, log_writer,
                   metrics: Metrics):
    """The quality monitor inside the server (monitor_mode = "serve"): replays on the largest tier."""
    reference = pool.tiers[-1]
    if settings.monitor_mode != "serve" or len(pool) < 2 or reference.name != REFERENCE_TIER:
        return None
    from aio.monitoring import MonitorCollector, SqlVerdictStore, build_monitor

    def on_change(change, offsets) -> None:
        router.offsets = dict(offsets)  # this replica at once; the others within their poll interval

    from aio.routing.context_routing import FailureFeed

    store = FailureFeed(SqlVerdictStore(db, flush_log=log_writer.flush, store_text=settings.log_prompts,
                                        demo_tiers=settings.demo_tiers_alike),
                        service.context_routing, lambda: router.classifier)  # failures route near-duplicates up
    monitor = build_monitor(settings, reference, service.prices[reference.name], store, on_change)
    monitor.start()
    service.monitor = monitor
    metrics.registry.register(MonitorCollector(monitor))
    return monitor


async def _stop(state: AppState) -> None:
    state.watch_task.cancel()
    if state.measurements is not None:
        await state.measurements.stop()
    if state.prune_task is not None:
        state.prune_task.cancel()
    if state.monitor is not None:
        state.service.monitor = None
        await state.monitor.stop()
    await state.pool.aclose()
    await asyncio.to_thread(state.log_writer.close)
    state.db.dispose()


def create_app(settings: Settings, bind_host: str = "127.0.0.1", admin_key: str | None = None) -> FastAPI:
    """The app for `settings`; everything heavy starts in the lifespan."""
    import secrets

    from aio.dashboard import routes as dashboard
    from aio.server.routes import admin, chat, health, models

    admin_key = admin_key or settings.admin_key or secrets.token_urlsafe(32)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.aio = await _start(settings, bind_host, admin_key)
        try:
            yield
        finally:
            await _stop(app.state.aio)

    # No redirect builds its Location from the Host header (redirect_slashes); the API docs only when asked for.
    docs = {} if settings.api_docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="AIO", summary="Adaptive Inference Orchestrator: one OpenAI-compatible chat endpoint",
                  version="0.1.0", lifespan=lifespan, redirect_slashes=False, **docs)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes,
                       body_timeout_s=settings.body_timeout_s)
    hosts = host_check(settings.open_endpoint, settings.allowed_hosts)
    if hosts is not None:  # before the body is read
        app.add_middleware(HostCheckMiddleware, **hosts)
    app.add_middleware(NoStoreMiddleware)
    install_error_handlers(app)
    for router in (chat.router, models.router, health.router, admin.router, dashboard.api, dashboard.page):
        app.include_router(router)
    return app
