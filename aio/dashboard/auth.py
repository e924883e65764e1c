"""Who may see the dashboard: the admin key (or an admin-role API key) as a Bearer header (scripts, the JSON API),
or a browser with a session cookie from the sign-in form. Chat keys get 403, nothing valid 401.

The cookie holds a random session token, never a key (aio.dashboard.sessions): HttpOnly (page scripts cannot read
it), SameSite=Strict, Secure on HTTPS (`cookie_secure`), and sent only to the dashboard's paths. The key travels
once, in the sign-in POST body (never in a URL, so never in access logs or history).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from fastapi import Request

from aio.api.errors import APIError
from aio.dashboard.sessions import SessionStore
from aio.http.auth import bearer_token

COOKIE = "aio_dashboard"
COOKIE_PATHS = ("/dashboard", "/api/dashboard")  # the page (and its forms) and its JSON API


@dataclass
class DashboardGuard:
    sessions: SessionStore
    cookie_secure: str | bool  # "auto": when the request came over HTTPS (from a trusted proxy: as it says)

    def secure_cookie(self, request: Request) -> bool:
        return request.url.scheme == "https" if self.cookie_secure == "auto" else bool(self.cookie_secure)


def guard(request: Request) -> DashboardGuard:
    """The app's DashboardGuard, built on first use from the running server's settings and database."""
    existing = getattr(request.app.state, "dashboard_guard", None)
    if existing is not None:
        return existing
    state = request.app.state.aio
    settings = state.settings
    built = DashboardGuard(
        SessionStore(state.db, state.auth.admin_key, timedelta(hours=settings.dashboard_session_hours)),
        settings.cookie_secure)
    request.app.state.dashboard_guard = built
    return built


async def signed_in(request: Request) -> None:
    """Passes for an admin Bearer key or a valid session cookie; raises the OpenAI-shaped 401/403 otherwise."""
    import asyncio

    token = bearer_token(request)
    if token is not None:
        await request.app.state.aio.auth.admin_token(token)
        return
    session = request.cookies.get(COOKIE)
    if session is None:
        raise APIError(401, "sign in at /dashboard, or send the admin key as 'Authorization: Bearer <key>'",
                       code="invalid_api_key")
    if not await asyncio.to_thread(guard(request).sessions.is_valid, session):
        raise APIError(401, "the dashboard session has expired or was signed out: sign in again at /dashboard",
                       code="session_expired")


async def require_admin(request: Request) -> None:
    """FastAPI dependency of every /api/dashboard endpoint."""
    await signed_in(request)
