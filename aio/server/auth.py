"""API keys on the chat endpoint and the admin key on admin endpoints (FastAPI dependencies)."""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import time
from dataclasses import dataclass

from fastapi import Request

from aio.api.errors import APIError
from aio.db.database import DatabaseError
from aio.db.keys import ApiKeyInfo, KeyStore

OPEN_CHECK_TTL_S = 2.0  # how long "no keys exist" is believed before the DB is asked again


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key") or None


@dataclass
class Authenticator:
    keys: KeyStore
    admin_key: str
    bind_host: str
    _open_until: float = 0.0

    async def endpoint_is_open(self) -> bool:
        """No user keys exist and the server listens on loopback only."""
        if not is_loopback(self.bind_host):
            return False
        if time.monotonic() < self._open_until:
            return True
        if await asyncio.to_thread(self.keys.count_active, "user") == 0:
            self._open_until = time.monotonic() + OPEN_CHECK_TTL_S
            return True
        return False

    def is_admin_key(self, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.admin_key.encode())

    async def user(self, request: Request) -> ApiKeyInfo | None:
        try:
            return await self._user(request)
        except DatabaseError as exc:
            raise APIError(503, f"cannot check the API key: {exc}", code="database_unavailable",
                           retry_after_s=5) from exc

    async def _user(self, request: Request) -> ApiKeyInfo | None:
        if await self.endpoint_is_open():
            return None  # as vLLM without --api-key: whatever key the client sends is ignored
        token = bearer_token(request)
        if token is None:
            raise APIError(401, "missing API key: send it as 'Authorization: Bearer <key>'", code="invalid_api_key")
        if self.is_admin_key(token):
            return None
        info = await asyncio.to_thread(self.keys.verify, token)
        if info is None:
            raise APIError(401, "invalid API key", code="invalid_api_key")
        return info

    async def admin(self, request: Request) -> None:
        await self.admin_token(bearer_token(request))

    async def admin_token(self, token: str | None) -> None:
        """Passes for the admin key or an admin-role API key; 401 for none or an unknown key, 403 for a chat key."""
        if token is not None and self.is_admin_key(token):
            return
        try:
            info = await asyncio.to_thread(self.keys.verify, token) if token else None
        except DatabaseError as exc:
            raise APIError(503, f"cannot check the key: {exc}", code="database_unavailable", retry_after_s=5) from exc
        if info is None:
            raise APIError(401, "admin endpoints need the admin key (AIO_ADMIN_KEY)", code="invalid_api_key")
        if info.role != "admin":
            raise APIError(403, "this API key may use the chat endpoints, not admin endpoints",
                           code="insufficient_permissions")
