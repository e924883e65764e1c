"""API keys on the chat endpoint and the admin key on admin endpoints (FastAPI dependencies).

The chat endpoint needs a key unless the deployment asks for open mode explicitly (`open_endpoint = true`, loopback
binds only): no database query decides whether the endpoint is open, so neither a database outage nor revoking
the last key changes who may call it. Admin Bearer checks are throttled per client address after failures.
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
from aio.server.throttle import FailureLimiter

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


def weak_admin_key_reason(key: str) -> str | None:
    """Why `key` is too weak to guard the admin endpoints, or None."""
    if len(key) < MIN_ADMIN_KEY_LENGTH:
        return f"the admin key has {len(key)} characters; it needs at least {MIN_ADMIN_KEY_LENGTH} random ones"
    if len(set(key)) < MIN_ADMIN_KEY_DISTINCT:
        return f"the admin key repeats a few characters ({len(set(key))} distinct); use a random one"
    return None


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key") or None


def client_address(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


@dataclass
class Authenticator:
    keys: KeyStore
    admin_key: str
    bind_host: str
    open_endpoint: bool = False  # the explicit setting; only honoured on a loopback bind
    admin_throttle: FailureLimiter = field(default_factory=lambda: FailureLimiter(max_failures=10, window_s=60.0))

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
        client = client_address(request)
        retry_after = self.admin_throttle.retry_after(client)
        if retry_after is not None:
            raise APIError(429, "too many failed admin key checks from this address; retry later",
                           code="too_many_failures", retry_after_s=retry_after)
        try:
            await self.admin_token(bearer_token(request))
        except APIError as exc:
            if exc.status_code == 401:
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
