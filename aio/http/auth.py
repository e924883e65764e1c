"""API keys on the chat endpoint and the admin key on admin endpoints (FastAPI dependencies).

The chat endpoint needs a key unless the deployment asks for open mode explicitly (`open_endpoint = true`, loopback
binds only): no database query decides whether the endpoint is open, so neither a database outage nor revoking
the last key changes who may call it.

Failed admin checks (Bearer headers and the dashboard's sign-in form alike) count in one limiter per client
address; a locked address gets 429 for anything but the configured admin key. That key is never locked out: it is
at least 32 random characters, beyond guessing at any rate, and it is the operator's way back in (it is on the
host, in AIO_ADMIN_KEY or $AIO_HOME/admin-key). Admin-role API keys and wrong keys are not even checked while
the address is locked.
"""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
from dataclasses import dataclass, field

from fastapi import Request

from aio.api.errors import APIError
from aio.db.database import DatabaseError
from aio.db.keys import ApiKeyInfo, KeyStore
from aio.http.throttle import FailureLimiter

logger = logging.getLogger(__name__)

MIN_ADMIN_KEY_LENGTH = 32
MIN_ADMIN_KEY_DISTINCT = 12  # distinct characters: "aaaa…" or "12121212…" is not a random key
KEY_CHECK_UNAVAILABLE = "cannot check the API key right now; retry later"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def weak_admin_key_reason(key: str, what: str = "the admin key") -> str | None:
    """Why `key` is too weak to guard the admin endpoints (or /metrics), or None."""
    if len(key) < MIN_ADMIN_KEY_LENGTH:
        return f"{what} has {len(key)} characters; it needs at least {MIN_ADMIN_KEY_LENGTH} random ones"
    if len(set(key)) < MIN_ADMIN_KEY_DISTINCT:
        return f"{what} repeats a few characters ({len(set(key))} distinct); use a random one"
    return None


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key") or None


def client_address(request: Request) -> str:
    """The peer's address (the original client's behind a trusted proxy: aio.server.proxies)."""
    return request.client.host if request.client is not None else "unknown"


@dataclass
class Authenticator:
    keys: KeyStore
    admin_key: str
    bind_host: str
    open_endpoint: bool = False  # the explicit setting; only honoured on a loopback bind
    # failed admin checks per address: admin Bearer headers and the dashboard's sign-in form
    admin_throttle: FailureLimiter = field(default_factory=lambda: FailureLimiter(max_failures=10, window_s=300.0))

    metrics_auth: str = "none"  # the setting: "none", "admin" or "key"
    metrics_key: str | None = None

    @property
    def endpoint_is_open(self) -> bool:
        return self.open_endpoint and is_loopback(self.bind_host)

    def is_admin_key(self, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.admin_key.encode())

    async def user(self, request: Request) -> ApiKeyInfo | None:
        if self.endpoint_is_open:
            return None  # as vLLM without --api-key: whatever key the client sends is ignored
        token = bearer_token(request)
        if token is None:
            raise APIError(401, "missing API key: send it as 'Authorization: Bearer <key>'", code="invalid_api_key")
        if self.is_admin_key(token):
            return None
        info = await self._verify(token)
        if info is None:
            raise APIError(401, "invalid API key", code="invalid_api_key")
        return info

    async def _verify(self, token: str) -> ApiKeyInfo | None:
        """The key's info (from the cache while the database is away); 503 when it cannot be checked."""
        try:
            return await asyncio.to_thread(self.keys.verify, token)
        except DatabaseError as exc:
            logger.warning("API key check failed: %s", exc)  # the details stay in the server's log
            raise APIError(503, KEY_CHECK_UNAVAILABLE, code="database_unavailable", retry_after_s=5) from exc

    async def admin(self, request: Request) -> None:
        await self.throttled_admin_token(bearer_token(request), client_address(request))

    async def metrics_reader(self, request: Request) -> None:
        """Passes who may read /metrics under the `metrics_auth` setting."""
        if self.metrics_auth == "none":
            return
        token = bearer_token(request)
        if self.metrics_key and token is not None and hmac.compare_digest(token.encode(), self.metrics_key.encode()):
            return
        await self.admin(request)

    async def throttled_admin_token(self, token: str | None, client: str) -> None:
        """admin_token behind the failed-attempt limit of `client`'s address (see the module's docstring)."""
        if token is not None and self.is_admin_key(token):
            self.admin_throttle.succeeded(client)
            return
        retry_after = self.admin_throttle.retry_after(client)
        if retry_after is not None:
            raise APIError(429, "too many failed admin key checks from this address; retry later",
                           code="too_many_failures", retry_after_s=retry_after)
        try:
            await self.admin_token(token)
        except APIError as exc:
            if exc.status_code == 401:  # a 403 is a valid chat key: no guess
                self.admin_throttle.failed(client)
            raise
        self.admin_throttle.succeeded(client)

    async def admin_token(self, token: str | None) -> None:
        """Passes for the admin key or an admin-role API key; 401 for none or an unknown key, 403 for a chat key."""
        if token is not None and self.is_admin_key(token):
            return
        info = await self._verify(token) if token else None
        if info is None:
            raise APIError(401, "admin endpoints need the admin key (AIO_ADMIN_KEY)", code="invalid_api_key")
        if info.role != "admin":
            raise APIError(403, "this API key may use the chat endpoints, not admin endpoints",
                           code="insufficient_permissions")
