"""API keys: created by `aio keys create`, checked on every request.

A key is "aio-" + 43 random URL-safe characters (256 bits). The table keeps its first 12 characters (`prefix`,
to find the row) and its SHA-256; with that much entropy a plain hash is enough (no slow KDF needed), and the
plaintext is never stored. Lookups are cached for a few seconds, so a revoked key stops working everywhere within
`cache_ttl_s` (at once in the process that revoked it). While the database is unreachable, a key seen before is
still accepted from the cache however old the entry (requests keep being served through an outage); a key never
seen cannot be checked (DatabaseError).
"""
from __future__ import annotations

import builtins
import hashlib
import hmac
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from aio.db.budgets import Budget
from aio.db.database import DatabaseError, safe_url, session_factory
from aio.db.models import ApiKey
from aio.db.records import utcnow

logger = logging.getLogger(__name__)

KEY_START = "aio-"
PREFIX_LENGTH = 12
MAX_KEY_LENGTH = 256
ROLES = ("user", "admin")
MAX_NAME_LENGTH = 100
MAX_ID = (1 << 63) - 1  # the column is a 64-bit integer: a larger id names no key
_MAX_CACHED = 10_000


@dataclass(frozen=True)
class ApiKeyInfo:
    id: int
    name: str
    prefix: str
    role: str  # "user" | "admin"
    created_at: datetime
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None  # updated at most once a minute
    rpm_limit: int | None = None  # requests per minute (per replica); None: no limit
    tpm_limit: int | None = None  # tokens per minute (per replica)
    max_streams: int | None = None  # requests in flight at once (per replica)
    budget_usd: float | None = None  # spend cap per budget_period (aio.db.budgets); None: no cap
    budget_period: str | None = None  # day | week | month | total
    budget_soft: float | None = None  # share of the budget past which the key is flagged

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def key_name_problem(name: str) -> str | None:
    """Why `name` cannot name a key, or None. Printable text only: a name is shown in listings (`aio keys list`,
    the dashboard), where a line break or an escape sequence could forge a row."""
    if not name.strip():
        return "a key needs a name"
    if len(name) > MAX_NAME_LENGTH:
        return f"a key's name may have at most {MAX_NAME_LENGTH} characters, got {len(name)}"
    if not name.isprintable():
        return (f"a key's name must be printable text: no control characters (C0, C1, DEL), line breaks, format "
                f"characters or lone surrogates; got {name!r}")
    return None


def _match(key: int | str):
    """The WHERE clause for a key's id (int) or name (str); an id outside the column's range matches nothing."""
    if isinstance(key, int):
        return ApiKey.id == key if 0 < key <= MAX_ID else sa.false()
    return ApiKey.name == key


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _info(row: ApiKey) -> ApiKeyInfo:
    return ApiKeyInfo(id=row.id, name=row.name, prefix=row.prefix, role=row.role, created_at=row.created_at,
                      revoked_at=row.revoked_at, last_used_at=row.last_used_at, rpm_limit=row.rpm_limit,
                      tpm_limit=row.tpm_limit, max_streams=row.max_streams, budget_usd=row.budget_usd,
                      budget_period=row.budget_period, budget_soft=row.budget_soft)


@dataclass(frozen=True)
class KeyLimits:
    """Per-key limits; None: no limit."""
    rpm_limit: int | None = None
    tpm_limit: int | None = None
    max_streams: int | None = None

    def __post_init__(self) -> None:
        for name in ("rpm_limit", "tpm_limit", "max_streams"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer (or unset), got {value!r}")


LIMIT_FIELDS = ("rpm_limit", "tpm_limit", "max_streams")
BUDGET_FIELDS = ("budget_usd", "budget_period", "budget_soft")


def _budget_columns(budget: Budget | None) -> dict[str, object]:
    return {"budget_usd": budget.usd if budget else None, "budget_period": budget.period if budget else None,
            "budget_soft": budget.soft if budget else None}


def _merged_budget(row: ApiKey, changes: dict[str, object]) -> Budget | None:
    """The key's budget after `changes` (ValueError if invalid); a budget_usd of None removes it."""
    values = {name: changes.get(name, getattr(row, name)) for name in BUDGET_FIELDS}
    if values["budget_usd"] is None:
        if changes.get("budget_period") is not None or changes.get("budget_soft") is not None:
            raise ValueError("budget_period and budget_soft need a budget_usd (the key has none)")
        return None
    return Budget(values["budget_usd"], values["budget_period"] or "month", values["budget_soft"])


class KeyStore:
    """API keys in the `api_keys` table. Thread-safe."""

    def __init__(self, engine: Engine, *, cache_ttl_s: float = 5.0, touch_interval_s: float = 60.0) -> None:
        self._engine = engine
        self._sessions = session_factory(engine)
        self._cache_ttl_s = cache_ttl_s
        self._touch_interval_s = touch_interval_s
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, tuple[ApiKeyInfo, str] | None]] = {}  # prefix -> (expiry, row or None)
        self._last_touch: dict[int, float] = {}
        self._stale: dict[str, tuple[ApiKeyInfo, str]] = {}  # prefix -> the last row seen, for database outages
        self._db_down_until = 0.0  # after a failed lookup, stale entries are used without asking until then

    def create(self, name: str, role: str = "user", limits: KeyLimits = KeyLimits(),
               budget: Budget | None = None) -> tuple[ApiKeyInfo, str]:
        """A new key named `name`; returns its info and the plaintext key, which cannot be recovered later."""
        problem = key_name_problem(name)
        if problem is not None:
            raise ValueError(problem)
        name = name.strip()
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}: roles are {list(ROLES)}")
        with self._sessions.begin() as session:
            if session.scalar(sa.select(ApiKey.id).where(ApiKey.name == name, ApiKey.revoked_at.is_(None))):
                raise ValueError(f"an active key named {name!r} exists: revoke it first, or pick another name")
            while True:  # a prefix collision (48 random bits) is all but impossible, but cheap to rule out
                key = KEY_START + secrets.token_urlsafe(32)
                if session.scalar(sa.select(ApiKey.id).where(ApiKey.prefix == key[:PREFIX_LENGTH])) is None:
                    break
            row = ApiKey(name=name, prefix=key[:PREFIX_LENGTH], key_hash=hash_key(key), role=role, created_at=utcnow(),
                         rpm_limit=limits.rpm_limit, tpm_limit=limits.tpm_limit, max_streams=limits.max_streams,
                         **_budget_columns(budget))
            session.add(row)
            session.flush()
            info = _info(row)
        self._forget([info.prefix])
        return info, key

    def verify(self, key: str) -> ApiKeyInfo | None:
        """The key's info if `key` is a valid, unrevoked key; else None. Raises DatabaseError when the key is not
        cached and the database cannot be reached."""
        if not isinstance(key, str) or not key.startswith(KEY_START) or not PREFIX_LENGTH < len(key) <= MAX_KEY_LENGTH:
            return None
        found = self._lookup(key[:PREFIX_LENGTH])
        if found is None:
            return None
        info, key_hash = found
        if not hmac.compare_digest(key_hash, hash_key(key)) or not info.active:
            return None
        self._touch(info.id)
        return info

    def list(self, include_revoked: bool = True) -> builtins.list[ApiKeyInfo]:
        query = sa.select(ApiKey).order_by(ApiKey.id)
        if not include_revoked:
            query = query.where(ApiKey.revoked_at.is_(None))
        with self._sessions() as session:
            return [_info(row) for row in session.scalars(query)]

    def find_active(self, key: int | str) -> ApiKeyInfo | None:
        """The active key with this id (int) or name (str), or None."""
        with self._sessions() as session:
            row = session.scalar(sa.select(ApiKey).where(_match(key), ApiKey.revoked_at.is_(None)))
            return _info(row) if row is not None else None

    def revoke(self, key: int | str) -> bool:
        """Revoke the active key with this id (int) or name (str); False if there is none."""
        with self._sessions.begin() as session:
            rows = session.scalars(sa.select(ApiKey).where(_match(key), ApiKey.revoked_at.is_(None))).all()
            for row in rows:
                row.revoked_at = utcnow()
            prefixes = [row.prefix for row in rows]
        self._forget(prefixes)
        return bool(rows)

    def update_limits(self, key: int | str, changes: dict[str, object]) -> ApiKeyInfo | None:
        """Set some of rpm_limit / tpm_limit / max_streams (None: no limit) and budget_usd / budget_period /
        budget_soft (budget_usd None: no budget) on the active key with this id or name; None if there is none.
        ValueError for an unknown field or an invalid value. Servers see the change within `cache_ttl_s`."""
        unknown = set(changes) - set(LIMIT_FIELDS) - set(BUDGET_FIELDS)
        if unknown:
            raise ValueError(f"unknown key setting(s) {sorted(unknown)}")
        KeyLimits(**{k: v for k, v in changes.items() if k in LIMIT_FIELDS})  # validates
        with self._sessions.begin() as session:
            row = session.scalar(sa.select(ApiKey).where(_match(key), ApiKey.revoked_at.is_(None)))
            if row is None:
                return None
            for name, value in changes.items():
                if name in LIMIT_FIELDS:
                    setattr(row, name, value)
            if any(name in BUDGET_FIELDS for name in changes):
                for name, value in _budget_columns(_merged_budget(row, changes)).items():
                    setattr(row, name, value)
            session.flush()
            info = _info(row)
        self._forget([info.prefix])
        return info

    def count_active(self, role: str | None = "user") -> int:
        """Unrevoked keys with `role` (None: any role)."""
        query = sa.select(sa.func.count()).select_from(ApiKey).where(ApiKey.revoked_at.is_(None))
        if role is not None:
            query = query.where(ApiKey.role == role)
        with self._engine.connect() as connection:
            return connection.scalar(query) or 0

    def _lookup(self, prefix: str) -> tuple[ApiKeyInfo, str] | None:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(prefix)
            stale = self._stale.get(prefix)
        if cached is not None and cached[0] > now:
            return cached[1]
        if stale is not None and now < self._db_down_until:
            return stale  # the database failed a moment ago: do not wait for it on every request
        try:
            with self._sessions() as session:
                row = session.scalar(sa.select(ApiKey).where(ApiKey.prefix == prefix))
                found = (_info(row), row.key_hash) if row is not None else None
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            self._db_down_until = time.monotonic() + self._cache_ttl_s
            if stale is not None:
                logger.warning("the database is unreachable: API key %s accepted from the cache", prefix)
                return stale
            raise DatabaseError(f"cannot check the API key: the database {safe_url(self._engine.url)} "
                                f"is unreachable ({exc.orig})") from exc
        with self._lock:
            if len(self._cache) >= _MAX_CACHED:  # e.g. a flood of made-up keys
                self._cache.clear()
            if len(self._stale) >= _MAX_CACHED:
                self._stale.clear()
            self._cache[prefix] = (now + self._cache_ttl_s, found)
            if found is not None:
                self._stale[prefix] = found
            else:
                self._stale.pop(prefix, None)
        return found

    def _forget(self, prefixes: builtins.list[str]) -> None:
        with self._lock:
            for prefix in prefixes:
                self._cache.pop(prefix, None)
                self._stale.pop(prefix, None)

    def _touch(self, key_id: int) -> None:
        """Record the key's use, at most once per `touch_interval_s` (per process); failures are not fatal."""
        now = time.monotonic()
        if now < self._db_down_until:
            return
        with self._lock:
            last = self._last_touch.get(key_id)
            if last is not None and now - last < self._touch_interval_s:
                return
            self._last_touch[key_id] = now
        try:
            with self._engine.begin() as connection:
                connection.execute(sa.update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=utcnow()))
        except sa.exc.SQLAlchemyError as exc:
            self._db_down_until = time.monotonic() + self._cache_ttl_s
            logger.warning("could not record the use of API key %d: %s", key_id, exc)
