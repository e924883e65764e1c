"""HTTP: `GET /dashboard` (the page; a sign-in form without a valid session), `POST /dashboard/login|logout`
(aio.dashboard.login), the page's static files, and the JSON API under `/api/dashboard/` (admin key as Bearer
header or the session cookie)."""
from __future__ import annotations

import asyncio
from typing import Annotated, Any, Callable

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from sqlalchemy.engine import Connection

from aio.routing.quality_estimate import quality_estimate
from aio.reports import service
from aio.dashboard.auth import COOKIE, require_admin, signed_in
from aio.dashboard.login import SECURITY_HEADERS, STATIC, login_page
from aio.dashboard.login import router as login_router
from aio.dashboard.engine_stats import engine_stats
from aio.reports.queries import BREAKDOWNS
from aio.reports.ranges import TimeRange, parse_range
from aio.http.deps import State
from aio.api.errors import APIError, invalid_request
from aio.http.auth import bearer_token
from aio.http.json_text import TextCheckedRoute

STATIC_FILES = {"chart.umd.js": "text/javascript", "dashboard.js": "text/javascript", "dashboard.css": "text/css",
                "chart.js.LICENSE.md": "text/plain"}

page = APIRouter(include_in_schema=False, route_class=TextCheckedRoute)
api = APIRouter(prefix="/api/dashboard", tags=["dashboard"], dependencies=[Depends(require_admin)],
                route_class=TextCheckedRoute)


# ---- the page ---------------------------------------------------------------------------------------------------

@page.get("/dashboard/")
async def dashboard_slash() -> Response:
    """A relative redirect: the Location never comes from the request's Host header."""
    return RedirectResponse("/dashboard", status_code=307)


@page.get("/dashboard")
async def dashboard(request: Request) -> Response:
    try:
        await signed_in(request)
    except APIError as exc:
        signed_out = bearer_token(request) is None and COOKIE not in request.cookies
        return login_page(exc.status_code, "Sign in with the admin key." if signed_out else exc.message)
    return HTMLResponse((STATIC / "index.html").read_text(), headers=SECURITY_HEADERS)


page.include_router(login_router)


@page.get("/dashboard/static/{name}")
async def static(name: str) -> Response:
    if name not in STATIC_FILES:
        raise APIError(404, f"no static file {name!r}")
    return FileResponse(STATIC / name, media_type=STATIC_FILES[name],
                        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})


# ---- the JSON API -------------------------------------------------------------------------------------------------

RangeParam = Annotated[str | None, Query(alias="range", description="24h, 7d, 30d, <N>h, <N>d or custom")]
StartParam = Annotated[str | None, Query(description="range=custom: ISO 8601 date or date-time (UTC if naive)")]
EndParam = Annotated[str | None, Query(description="range=custom: ISO 8601 date (inclusive) or date-time; "
                                                   "default now")]


def time_range(range_: RangeParam = None, start: StartParam = None, end: EndParam = None) -> TimeRange:
    return parse_range(range_, start, end)


Range = Annotated[TimeRange, Depends(time_range)]


async def _read(state: Any, work: Callable[[Connection], dict[str, Any]]) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        with state.db.connect() as connection:
            return work(connection)

    return await asyncio.to_thread(run)


@api.get("/summary")
async def summary(state: State, r: Range) -> dict[str, Any]:
    """KPI tiles, in total and per tier; whether the tiers are the demo tiers; the quality monitor's limits (the
    pass rate below which a tier's traffic is moved up, and the one at which it recovers)."""
    data = await _read(state, lambda c: service.summary(c, r))
    settings = state.settings
    data["demo_tiers"] = state.demo.note if state.demo is not None else None
    data["quality_limits"] = {"red_below": 1.0 - settings.quality_max_failure_rate,
                              "amber_below": 1.0 - settings.quality_recover_rate}
    fit = state.router.target_fit()
    data["quality_estimate"] = await _read(state, lambda c: quality_estimate(c, fit, r.start, r.end))
    return data


@api.get("/traffic")
async def traffic(state: State, r: Range) -> dict[str, Any]:
    """Requests and tokens per hour or day and tier, with the tiers' shares."""
    return await _read(state, lambda c: service.traffic(c, r))


@api.get("/cost")
async def cost(state: State, r: Range) -> dict[str, Any]:
    """Actual cost vs the all-large baseline, savings and cumulative savings."""
    return await _read(state, lambda c: service.cost(c, r))


@api.get("/breakdown")
async def breakdown(state: State, r: Range, by: Annotated[str | None, Query()] = None,
                    limit: Annotated[int, Query(ge=1, le=1000)] = service.DEFAULT_TOP_N) -> dict[str, Any]:
    """Cost by tier, API key, user and model (top N by cost); `by` picks one of them."""
    if by is not None and by not in BREAKDOWNS:
        raise invalid_request(f"invalid by {by!r}: one of {', '.join(BREAKDOWNS)}", "by", "invalid_value")
    dims = (by,) if by else BREAKDOWNS
    return await _read(state, lambda c: service.breakdown(c, r, dims, limit))


@api.get("/latency")
async def latency(state: State, r: Range) -> dict[str, Any]:
    """TTFT, inter-token, end-to-end and queue time per tier at p50/p95/p99, and the p99/p50 ratio."""
    return await _read(state, lambda c: service.latency(c, r))


@api.get("/quality")
async def quality(state: State, r: Range,
                  samples: Annotated[int, Query(ge=0, le=500)] = service.DEFAULT_SAMPLES) -> dict[str, Any]:
    """Pass rate per tier per day (Wilson 95% interval), failing samples, judge cost."""
    return await _read(state, lambda c: service.quality(c, r, samples))


@api.get("/router")
async def router(state: State, r: Range) -> dict[str, Any]:
    """Routing-score histogram and thresholds, escalations, threshold changes, classifier versions."""
    live = state.router
    return await _read(state, lambda c: service.router(c, r, live.quality, dict(live.offsets), list(live.tiers)))


@api.get("/engine")
async def engine(state: State) -> dict[str, Any]:
    """Live engine figures per tier (remote tiers: unavailable)."""
    return {"tiers": engine_stats(state.pool)}
