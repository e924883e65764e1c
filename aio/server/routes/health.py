"""Liveness, readiness, Prometheus metrics, and `/` (a browser lands on the dashboard)."""
from __future__ import annotations

import asyncio
import dataclasses

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse, RedirectResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from aio.db.migrate import is_up_to_date
from aio.server.deps import State

router = APIRouter()


@router.get("/", include_in_schema=False)
async def root() -> RedirectResponse:
    return RedirectResponse("/dashboard", status_code=307)


@router.get("/health")
async def health() -> dict:
    return {"status": "ok"}


def _check_database(state) -> tuple[bool, str]:
    try:
        with state.db.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        return False, f"unreachable: {type(exc).__name__}"
    try:
        return (True, "ok") if is_up_to_date(state.db) else (False, "migrations pending: run `aio db upgrade`")
    except Exception as exc:
        return False, f"cannot read the schema version: {type(exc).__name__}"


@router.get("/ready")
async def ready(state: State) -> JSONResponse:
    db_ok, db_detail = await asyncio.to_thread(_check_database, state)
    tiers = {t.name: ("ok" if t.is_available() else "unavailable") for t in state.pool}
    checks = {"database": db_detail, "tiers": tiers,
              "classifier": state.classifier.version,
              "log_writer": dataclasses.asdict(state.log_writer.stats())}
    ok = db_ok and all(v == "ok" for v in tiers.values())
    return JSONResponse({"status": "ready" if ok else "not ready", "checks": checks}, status_code=200 if ok else 503)


@router.get("/metrics")
async def metrics(state: State) -> Response:
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
