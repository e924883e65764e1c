"""Who may see the dashboard: the admin key (or an admin-role API key), as a Bearer header (scripts, the JSON API)
or in the HttpOnly cookie that the login form sets (the browser). Chat keys get 403, no key 401.

Why a cookie: the page itself must refuse a browser that has no key, and a browser sends no Authorization header
on navigation. The key travels once, in a POST body (never in a URL, so never in access logs or history); the
cookie is HttpOnly (page scripts, injected or not, cannot read it), SameSite=Strict (other sites cannot use it) and
Secure on HTTPS.
"""
from __future__ import annotations

from fastapi import Request

from aio.server.auth import bearer_token

COOKIE = "aio_dashboard"
COOKIE_MAX_AGE_S = 12 * 3600


def presented_key(request: Request) -> str | None:
    return bearer_token(request) or request.cookies.get(COOKIE) or None


async def require_admin(request: Request) -> None:
    """FastAPI dependency of every /api/dashboard endpoint (raises the OpenAI-shaped 401/403)."""
    await request.app.state.aio.auth.admin_token(presented_key(request))
