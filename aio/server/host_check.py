"""Which `Host` a request may name (DNS rebinding): a web page whose name resolves to 127.0.0.1 reaches a loopback
server from the victim's browser, same-origin with the page, so it could read its answers. The browser still sends
the page's own name as Host, so an open-mode server (no API keys) answers only loopback names (`localhost`,
IPv4 127.0.0.0/8, `[::1]`, any port, any case) and the names in the setting `allowed_hosts`; anything else,
a missing Host included, gets an OpenAI-shaped 400 (`host_not_allowed`) before the body is read. A server with
API keys answers any Host unless `allowed_hosts` is set: a rebinding page has no key, and the dashboard's session
cookie belongs to the real name, not the page's.
"""
from __future__ import annotations

import ipaddress
import json

from starlette.types import ASGIApp, Receive, Scope, Send

from aio.api.errors import APIError

LOOPBACK_NAMES = ("localhost",)


def host_name(host_header: str) -> str:
    """The name part of a Host header, lower-case, without the port or an IPv6 literal's brackets."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostCheckMiddleware:
    """Refuses requests whose Host is not allowed (see the module's docstring); `loopback`: loopback names too."""

    def __init__(self, app: ASGIApp, allowed: list[str], loopback: bool) -> None:
        self.app = app
        self.allowed = {host_name(h) for h in allowed}
        self.loopback = loopback

    def allows(self, host_header: str | None) -> bool:
        if host_header is None:
            return False
        name = host_name(host_header)
        return name in self.allowed or self.loopback and _is_loopback(name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for k, v in scope.get("headers") or [] if k == b"host"), None)
        if self.allows(host):
            await self.app(scope, receive, send)
            return
        allowed = ", ".join(([*LOOPBACK_NAMES, "127.0.0.1", "[::1]"] if self.loopback else []) + sorted(self.allowed))
        shown = repr(host[:100]) if host is not None else "missing"
        error = APIError(400, f"the Host header ({shown}) is not one this server answers ({allowed}); list other "
                              "names in the setting allowed_hosts", code="host_not_allowed")
        body = json.dumps(error.body()).encode()
        await send({"type": "http.response.start", "status": 400,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def host_check(open_endpoint: bool, allowed_hosts: list[str]) -> dict | None:
    """HostCheckMiddleware's options for these settings, or None when every Host is answered (keys, no list)."""
    if not open_endpoint and not allowed_hosts:
        return None
    return {"allowed": list(allowed_hosts), "loopback": open_endpoint}
