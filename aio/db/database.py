"""Engines and sessions for the SQL log: SQLite (embedded, the default) or PostgreSQL (shared by replicas)."""
from __future__ import annotations

import re
import os
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

SQLITE_BUSY_TIMEOUT_MS = 5000
PG_CONNECT_TIMEOUT_S = 10


class DatabaseError(Exception):
    """The database cannot be used (bad URL, unreachable server, ...): the message says which and why."""


def safe_url(url: str | sa.URL) -> str:
    """`url` without its password, for messages and logs."""
    if isinstance(url, sa.URL):
        return url.render_as_string(hide_password=True)
    try:
        return make_url(normalize_url(url)).render_as_string(hide_password=True)
    except ArgumentError:
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def normalize_url(url: str) -> str:
    """Plain PostgreSQL URLs (`postgres://`, `postgresql://`, as Heroku & co. give them) use psycopg 3."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme):]
    return url


def make_engine(url: str) -> Engine:
    """An engine for `url`. SQLite gets its folder created, WAL, a busy timeout and cross-thread connections."""
    try:
        parsed = make_url(normalize_url(url))
    except ArgumentError as exc:
        raise DatabaseError(f"invalid database URL {safe_url(url)!r}: {exc}") from exc
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    is_sqlite = parsed.get_backend_name() == "sqlite"
    if is_sqlite:
        kwargs["connect_args"] = {"check_same_thread": False}
        database = parsed.database or ""
        if database in ("", ":memory:") or "mode=memory" in database:
            kwargs["poolclass"] = StaticPool  # one shared connection, or each would see its own empty database
        elif not database.startswith("file:"):
            try:
                _create_private(Path(database))
            except OSError as exc:
                folder = Path(database).parent
                raise DatabaseError(f"cannot create the folder {folder} for the database {safe_url(parsed)}: "
                                    f"{exc}") from exc
    elif parsed.drivername in ("postgresql+psycopg", "postgresql+psycopg2") and "connect_timeout" not in parsed.query:
        kwargs["connect_args"] = {"connect_timeout": PG_CONNECT_TIMEOUT_S}  # not the OS's minutes for a lost host
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise DatabaseError(f"cannot use the database URL {safe_url(parsed)!r}: {exc}") from exc
    if is_sqlite:
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _create_private(database: Path) -> None:
    """A new SQLite file, and a new folder for it, readable by this user only (the log holds key hashes, prompts and
    answers), whichever command creates it first. SQLite gives the -wal and -shm files the database's mode."""
    if not database.parent.exists():
        database.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    if not database.exists():
        os.close(os.open(database, os.O_CREAT | os.O_WRONLY, 0o600))


def _sqlite_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")  # readers do not block the log writer, nor it them
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable at checkpoints; the WAL default
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to `engine`; objects stay readable after commit."""
    return sessionmaker(engine, expire_on_commit=False)
