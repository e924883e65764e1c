"""What guards the dashboard's sign-in form besides the failed-attempt limit (aio.server.throttle): a cross-site
check (CSRF), and who the client is and whether it came over HTTPS, believing X-Forwarded-* headers only from the
proxies the `trusted_proxies` setting names."""
from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from fastapi import Request

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(proxies: list[str]) -> list[Network]:
    return [ipaddress.ip_network(p, strict=False) for p in proxies]


def _in(host: str | None, networks: list[Network]) -> bool:
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return False
    return any(address in network for network in networks)


def client_address(request: Request, trusted: list[Network]) -> str:
    """The peer's address; behind a trusted proxy, the nearest address in X-Forwarded-For that is not a trusted
    proxy itself."""
    peer = request.client.host if request.client else "unknown"
    if not _in(peer, trusted):
        return peer
    hops = [h.strip() for h in request.headers.get("x-forwarded-for", "").split(",") if h.strip()]
    for hop in reversed(hops):
        if not _in(hop, trusted):
            return hop
    return peer


def is_https(request: Request, trusted: list[Network]) -> bool:
    peer = request.client.host if request.client else None
    if _in(peer, trusted):
        forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
        if forwarded:
            return forwarded == "https"
    return request.url.scheme == "https"


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
