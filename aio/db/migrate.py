"""Schema migrations (Alembic; the scripts are `aio/db/migrations/`, package data of `aio`) run from code: `aio db
upgrade` and embedded SQLite."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Engine

from aio.db.database import DatabaseError, make_engine, safe_url

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Alembic's INFO lines (context impl, each revision run) are noise in CLI output and the server log; callers say
# what was migrated themselves (`aio db upgrade`).
logging.getLogger("alembic").setLevel(logging.WARNING)
# Any fixed number: processes migrating the same PostgreSQL at once take turns on this advisory lock.
PG_MIGRATION_LOCK = 0x41494F  # "AIO"
T = TypeVar("T")


def _config(connection: Connection | None = None) -> Config:
    config = Config()  # no ini file: everything is set here
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision the code ships."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no migrations found in {MIGRATIONS_DIR}: a broken installation")
    return head


@contextmanager
def _engine(url_or_engine: str | Engine) -> Iterator[Engine]:
    if isinstance(url_or_engine, Engine):
        yield url_or_engine
        return
    engine = make_engine(url_or_engine)
    try:
        yield engine
    finally:
        engine.dispose()


def _with_connection(url_or_engine: str | Engine, work: Callable[[Connection], T], *, write: bool) -> T:
    """Run `work` on a connection (in a committed transaction when `write`); connection errors become
    a DatabaseError naming the database without its password."""
    with _engine(url_or_engine) as engine:
        try:
            with (engine.begin() if write else engine.connect()) as connection:
                return work(connection)
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            reason = str(exc.orig).strip() if exc.orig is not None else str(exc)
            raise DatabaseError(f"cannot use the database {safe_url(engine.url)}: {reason}") from exc
        except CommandError as exc:  # e.g. an unknown revision, or a database migrated by a newer aio
            raise DatabaseError(f"cannot migrate the database {safe_url(engine.url)}: {exc}") from exc


def current_revision(engine: str | Engine) -> str | None:
    """The revision the database is at; None for an empty (never migrated) database."""
    return _with_connection(engine, lambda c: MigrationContext.configure(c).get_current_revision(), write=False)


def is_up_to_date(engine: str | Engine) -> bool:
    return current_revision(engine) == head_revision()


def upgrade(url_or_engine: str | Engine, revision: str = "head") -> str | None:
    """Migrate the database up to `revision`; returns the revision it is at afterwards."""
    def run(connection: Connection) -> str | None:
        command.upgrade(_config(connection), revision)
        return MigrationContext.configure(connection).get_current_revision()

    return _with_connection(url_or_engine, run, write=True)


def upgrade_from(url_or_engine: str | Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """Like `upgrade`, returning (revision before, revision after). On PostgreSQL "before" is read once this
    process holds the migration lock, so of several concurrent runs only the one that migrated reports a change."""
    def run(connection: Connection) -> tuple[str | None, str | None]:
        if connection.dialect.name == "postgresql":
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_MIGRATION_LOCK})
        before = MigrationContext.configure(connection).get_current_revision()
        command.upgrade(_config(connection), revision)
        return before, MigrationContext.configure(connection).get_current_revision()

    return _with_connection(url_or_engine, run, write=True)


def downgrade(url_or_engine: str | Engine, revision: str = "-1") -> str | None:
    """Migrate the database down to `revision` ("base": drop everything); returns the revision afterwards."""
    def run(connection: Connection) -> str | None:
        command.downgrade(_config(connection), revision)
        return MigrationContext.configure(connection).get_current_revision()

    return _with_connection(url_or_engine, run, write=True)


def ensure_schema(engine: Engine) -> None:
    """Make the schema usable: an embedded SQLite database is migrated in place; a shared server (PostgreSQL) is
    only checked, since its migrations are a deployment step (`aio db upgrade`), not something each replica does."""
    if engine.dialect.name == "sqlite":
        upgrade(engine)
        return
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise DatabaseError(f"the database {safe_url(engine.url)} is at revision {current or '(empty)'}, this aio "
                            f"needs {head}: run `aio db upgrade`")
