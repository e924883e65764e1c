"""Alembic environment. The database comes from the Config the caller builds (see `aio.db.migrate`):
`config.attributes["connection"]` (an open Connection), else the `sqlalchemy.url` option, else `-x url=...`,
else the AIO settings (AIO_DATABASE_URL, default SQLite under AIO_HOME). No logging set-up: the app owns it."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from sqlalchemy.engine import Connection

from aio.db.migrate import PG_MIGRATION_LOCK  # replicas migrating the same PostgreSQL at once take turns on it
from aio.db.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or context.get_x_argument(as_dictionary=True).get("url")
    if url:
        return url
    from aio.settings import load_settings

    return load_settings().resolved_database_url


def _configure(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, compare_type=True,
                      render_as_batch=connection.dialect.name == "sqlite")  # SQLite cannot ALTER most things


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_MIGRATION_LOCK})
        context.run_migrations()


def run_migrations_offline() -> None:
    """`alembic upgrade --sql`: print the SQL instead of running it."""
    from aio.db.database import normalize_url

    context.configure(url=normalize_url(_url()), target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from aio.db.database import make_engine

    engine = make_engine(_url())
    try:
        with engine.begin() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
