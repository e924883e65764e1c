"""Sub-commands of `aio` (registered in `aio.cli`)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from sqlalchemy.engine import Engine

ConfigOption = typer.Option(None, "--config", "-c", help="a TOML settings file (AIO_* variables override it)",
                            dir_okay=False)


def fail(message: str) -> typer.Exit:
    """Print `message` as an error; `raise fail(...)` ends the command with status 1."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(1)


@contextmanager
def database(config: Path | None, *, ensure_schema: bool = True) -> Iterator[Engine]:
    """An engine for the configured database (migrated if embedded SQLite, checked otherwise); user-caused
    errors (bad settings, unreachable database, ...) end the command with a clear message."""
    from aio.db.database import DatabaseError, make_engine
    from aio.db.migrate import ensure_schema as _ensure_schema
    from aio.settings import ConfigError, load_settings

    try:
        engine = make_engine(load_settings(config).resolved_database_url)
    except (ConfigError, DatabaseError) as exc:
        raise fail(str(exc)) from None
    try:
        if ensure_schema:
            _ensure_schema(engine)
        yield engine
    except DatabaseError as exc:
        raise fail(str(exc)) from None
    finally:
        engine.dispose()
