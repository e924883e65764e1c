"""Liveness, readiness, Prometheus metrics, and `/` (a browser lands on the dashboard)."""
from __future__ import annotations

import asyncio
import dataclasses

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from aio.db.migrate import is_up_to_date
from aio.http.deps import State
from aio.http.json_text import TextCheckedRoute

router = APIRouter(route_class=TextCheckedRoute)


@router.get("/", include_in_schema=False)
async def root() -> RedirectResponse:
    return RedirectResponse("/dashboard", status_code=307)


@router.get("/health")
async def health() -> dict:
    return {"status": "ok"}


def _check_database(state) -> tuple[str, str]:
    """("ok" | "degraded" | "failed", detail). Unreachable is only degraded: requests are still answered and
    their rows wait in the log's journal. A schema this code does not match is a failure."""
    try:
        with state.db.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        return "degraded", f"unreachable: {type(exc).__name__}; requests are served and logged once it is back"
    try:
        return ("ok", "ok") if is_up_to_date(state.db) else ("failed", "schema mismatch: run `aio db upgrade`")
    except Exception as exc:
        return "degraded", f"cannot read the schema version: {type(exc).__name__}"


@router.get("/ready")
async def ready(state: State) -> JSONResponse:
    """Whether this replica can serve: its tiers are up and its schema matches. A database outage is reported
    ("degraded") but keeps it ready, so a load balancer does not drain every replica at once."""
    db_state, db_detail = await asyncio.to_thread(_check_database, state)
    tiers = {t.name: ("ok" if t.is_available() else "unavailable") for t in state.pool}
    checks = {"database": db_detail, "tiers": tiers, "replica": state.settings.replica,
              "classifier": state.classifier.version,
              "log_writer": dataclasses.asdict(state.log_writer.stats()),
              "routing": await asyncio.to_thread(_routing, state)}
    ok = db_state != "failed" and all(v == "ok" for v in tiers.values())
    status = ("degraded" if db_state == "degraded" else "ready") if ok else "not ready"
    return JSONResponse({"status": status, "checks": checks}, status_code=200 if ok else 503)


def _routing(state) -> dict:
    """Which tiers are measured (a measurement in progress does not make a replica unready: it serves meanwhile),
    and the rule `auto` routes with."""
    try:
        measured = state.measurements.status() if state.measurements is not None else {}
    except Exception as exc:  # the database is down: /ready stays up and says so
        measured = {"unknown": {"status": f"database unreachable: {type(exc).__name__}"}}
    fit = state.router.target_fit()
    rule = {"rule": "quality_target", "target": fit.target, "estimate": fit.estimate.to_dict()} if fit is not None \
        else {"rule": "quality_knob", "quality": state.router.quality}
    return {"tiers_measured": {t: m["status"] for t, m in measured.items()}, "measurements": measured, **rule}


@router.get("/metrics")
async def metrics(request: Request, state: State) -> Response:
    """Prometheus text; behind the admin key or `metrics_key` when `metrics_auth` says so."""
    await state.auth.metrics_reader(request)
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
