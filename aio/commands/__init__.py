"""Sub-commands of `aio` (registered in `aio.cli`)."""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from sqlalchemy.engine import Engine

if TYPE_CHECKING:
    from aio.settings import Settings

ConfigOption = typer.Option(None, "--config", "-c", metavar="FILE", help="a TOML settings file (AIO_* variables override it)",
                            dir_okay=False)


def fail(message: str) -> typer.Exit:
    """Print `message` as an error; `raise fail(...)` ends the command with status 1."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(1)


def describe_database(settings: Settings) -> str:
    """Which database the settings name, and why: so that a missing AIO_HOME is seen, not silently a fresh one."""
    from aio.db.database import safe_url

    if settings.database_url:
        return f"{safe_url(settings.database_url)} (database_url)"
    where = "AIO_HOME" if os.environ.get("AIO_HOME") else "the default home: AIO_HOME is not set"
    return f"{safe_url(settings.resolved_database_url)} (SQLite under {where})"


@contextmanager
def database(config: Path | None, *, ensure_schema: bool = True) -> Iterator[Engine]:
    """An engine for the configured database (migrated if embedded SQLite, checked otherwise); user-caused
    errors (bad settings, unreachable database, ...) end the command with a clear message."""
    from aio.db.database import DatabaseError, make_engine
    from aio.db.migrate import ensure_schema as _ensure_schema
    from aio.server.data_at_rest import restrict_data
    from aio.settings import ConfigError, load_settings

    try:
        settings = load_settings(config)
        restrict_data(settings.home, settings.resolved_database_url)  # as `aio serve` leaves them: this user's only
        engine = make_engine(settings.resolved_database_url)
    except (ConfigError, DatabaseError, OSError) as exc:
        raise fail(str(exc)) from None
    typer.echo(f"database: {describe_database(settings)}", err=True)
    try:
        if ensure_schema:
            _ensure_schema(engine)
        yield engine
    except DatabaseError as exc:
        raise fail(str(exc)) from None
    finally:
        engine.dispose()
