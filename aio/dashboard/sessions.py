"""Dashboard sessions: what the sign-in cookie holds instead of a key.

A session is a random 256-bit token; the browser keeps it in the cookie and the `dashboard_sessions` table keeps
only its SHA-256, with a server-side expiry. A session is valid while it is neither expired nor logged out and the
key it was opened with is still an admin key: an admin-role API key that is revoked ends its sessions at once (the
check joins `api_keys`), and sessions opened with the configured admin key carry HMAC(admin key, token), so they end
when AIO_ADMIN_KEY changes. The table is shared by replicas (PostgreSQL), so any replica can check any session.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from aio.db.models import ApiKey, DashboardSession
from aio.db.records import utcnow

MAX_TOKEN_LENGTH = 128


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _admin_binding(admin_key: str, token: str) -> str:
    return hmac.new(admin_key.encode(), token.encode(), hashlib.sha256).hexdigest()


class SessionStore:
    """Opens, checks and ends dashboard sessions (blocking calls: run them in a thread from async code)."""

    def __init__(self, engine: Engine, admin_key: str, lifetime: timedelta) -> None:
        self._engine = engine
        self._admin_key = admin_key
        self.lifetime = lifetime

    def open(self, key_id: int | None, client: str | None = None, now: datetime | None = None) -> str:
        """A new session for the configured admin key (`key_id` None) or an admin-role API key; returns the token
        for the cookie. Sessions that expired are deleted on the way."""
        now = now or utcnow()
        token = secrets.token_urlsafe(32)
        binding = _admin_binding(self._admin_key, token) if key_id is None else None
        with self._engine.begin() as connection:
            connection.execute(sa.delete(DashboardSession).where(DashboardSession.expires_at <= now))
            connection.execute(sa.insert(DashboardSession).values(
                token_hash=token_hash(token), key_id=key_id, admin_binding=binding, created_at=now,
                expires_at=now + self.lifetime, client=client))
        return token

    def is_valid(self, token: str | None, now: datetime | None = None) -> bool:
        if not token or len(token) > MAX_TOKEN_LENGTH:
            return False
        now = now or utcnow()
        query = (sa.select(DashboardSession.key_id, DashboardSession.admin_binding, ApiKey.role, ApiKey.revoked_at)
                 .outerjoin(ApiKey, ApiKey.id == DashboardSession.key_id)
                 .where(DashboardSession.token_hash == token_hash(token), DashboardSession.revoked_at.is_(None),
                        DashboardSession.expires_at > now))
        with self._engine.connect() as connection:
            row = connection.execute(query).first()
        if row is None:
            return False
        if row.key_id is None:
            return row.admin_binding is not None and hmac.compare_digest(
                row.admin_binding, _admin_binding(self._admin_key, token))
        return row.role == "admin" and row.revoked_at is None

    def close(self, token: str | None) -> bool:
        """Logs the session out; False if there was no open session with this token."""
        if not token or len(token) > MAX_TOKEN_LENGTH:
            return False
        with self._engine.begin() as connection:
            result = connection.execute(
                sa.update(DashboardSession)
                .where(DashboardSession.token_hash == token_hash(token), DashboardSession.revoked_at.is_(None))
                .values(revoked_at=utcnow()))
        return result.rowcount > 0
