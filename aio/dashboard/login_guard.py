"""What guards the dashboard's sign-in form besides the failed-attempt limit (aio.http.auth): a cross-site check
(CSRF). Who the client is and whether it came over HTTPS come from the connection, which uvicorn rewrites from
X-Forwarded-* headers only for the proxies `trusted_proxies` names (aio.server.proxies)."""
from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import Request


def cross_site_reason(request: Request) -> str | None:
    """Why this form post looks cross-site (None: it does not). Current browsers send Sec-Fetch-Site, which
    decides; older ones only Origin (which is "null" under the page's no-referrer policy, so that is refused only
    then). A post with neither (curl, scripts) carries no ambient cookie risk and passes."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return None if site in ("same-origin", "none") else f"Sec-Fetch-Site is {site!r}"
    origin = request.headers.get("origin")
    if origin is None:
        return None
    host = request.headers.get("host", "")
    if origin == "null" or urlsplit(origin).netloc.lower() != host.lower():
        return f"Origin {origin!r} is not this server ({host!r})"
    return None
