"""`POST /dashboard/login` and `/dashboard/logout`: a session cookie for the admin key, checked against cross-site
posts and brute force (aio.dashboard.login_guard)."""
from __future__ import annotations

import asyncio
import html
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from aio.api.errors import APIError
from aio.dashboard.auth import COOKIE, COOKIE_PATHS, guard
from aio.dashboard.login_guard import cross_site_reason
from aio.http.auth import client_address
from aio.http.json_text import TextCheckedRoute

STATIC = Path(__file__).parent / "static"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}

router = APIRouter(include_in_schema=False, route_class=TextCheckedRoute)


def login_page(status_code: int, message: str, headers: dict[str, str] | None = None) -> HTMLResponse:
    text = (STATIC / "login.html").read_text().replace("{{message}}", html.escape(message))
    return HTMLResponse(text, status_code=status_code, headers={**SECURITY_HEADERS, **(headers or {})})


async def _key_id(request: Request, key: str, client: str) -> int | None:
    """None for the configured admin key, else the admin-role API key's id (raises APIError for anything else,
    429 while the client's address is locked after failures)."""
    auth = request.app.state.aio.auth
    await auth.throttled_admin_token(key, client)
    if auth.is_admin_key(key):
        return None
    info = await asyncio.to_thread(auth.keys.verify, key)
    assert info is not None and info.role == "admin"  # admin_token passed
    return info.id


@router.post("/dashboard/login")
async def login(request: Request) -> Response:
    reason = cross_site_reason(request)
    if reason is not None:
        return login_page(403, f"Sign-in refused: the form was posted from another site ({reason}).")
    dashboard = guard(request)
    client = client_address(request)
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    key = (form.get("key") or [""])[0].strip()
    if not key:
        return login_page(401, "Enter the admin key.")
    try:
        key_id = await _key_id(request, key, client)
    except APIError as exc:
        if exc.status_code == 429:
            wait_s = exc.retry_after_s or 1.0
            return login_page(429, f"Too many failed sign-ins from {client}: try again in {wait_s:.0f} s.",
                              {"Retry-After": str(max(1, round(wait_s)))})
        return login_page(exc.status_code, exc.message)
    token = await asyncio.to_thread(dashboard.sessions.open, key_id, client)
    response = RedirectResponse("/dashboard", status_code=303)
    secure = dashboard.secure_cookie(request)
    for path in COOKIE_PATHS:
        response.set_cookie(COOKIE, token, max_age=int(dashboard.sessions.lifetime.total_seconds()), httponly=True,
                            samesite="strict", secure=secure, path=path)
    return response


@router.post("/dashboard/logout")
async def logout(request: Request) -> Response:
    reason = cross_site_reason(request)
    if reason is not None:
        return login_page(403, f"Sign-out refused: the form was posted from another site ({reason}).")
    token = request.cookies.get(COOKIE)
    if token:
        await asyncio.to_thread(guard(request).sessions.close, token)
    response = RedirectResponse("/dashboard", status_code=303)
    for path in (*COOKIE_PATHS, "/"):  # "/": the cookie of versions that kept the key itself there
        response.delete_cookie(COOKIE, path=path, httponly=True, samesite="strict")
    return response
