"""`aio db`: schema migrations."""
from __future__ import annotations

from pathlib import Path

import typer

from aio.commands import ConfigOption, database, fail

db_app = typer.Typer(help="The SQL database: migrations.", no_args_is_help=True, rich_markup_mode=None)


@db_app.command()
def upgrade(config: Path | None = ConfigOption,
            revision: str = typer.Option("head", metavar="REVISION", help="the revision to migrate to")) -> None:
    """Migrate the database schema (run once per deployment, before starting servers on a new version)."""
    from aio.db import migrate
    from aio.db.database import safe_url

    with database(config, ensure_schema=False) as engine:
        before, after = migrate.upgrade_from(engine, revision)
        where = safe_url(engine.url)
    if before == after:
        typer.echo(f"{where}: already at revision {after}")
    else:
        typer.echo(f"{where}: upgraded from {before or '(empty)'} to {after}")


@db_app.command()
def current(config: Path | None = ConfigOption,
            check: bool = typer.Option(False, "--check", help="exit with status 1 unless at the newest revision"),
            ) -> None:
    """Show the database's schema revision and whether it is the newest."""
    from aio.db import migrate

    with database(config, ensure_schema=False) as engine:
        revision = migrate.current_revision(engine)
    head = migrate.head_revision()
    if revision == head:
        typer.echo(f"{revision} (head)")
        return
    typer.echo(f"{revision or '(empty)'} (the newest is {head}: run `aio db upgrade`)")
    if check:
        raise fail("the database schema is not up to date")


@db_app.command()
def prune(config: Path | None = ConfigOption,
          days: int | None = typer.Option(None, "--days", min=1, metavar="DAYS",
                                          help="keep this many days of raw rows (default: raw_retention_days)")) -> None:
    """Delete raw request rows (and their verifications) older than the retention; daily aggregates stay."""
    from aio.db.retention import prune_raw_rows
    from aio.settings import ConfigError, load_settings

    try:
        retention = days or load_settings(config).raw_retention_days
    except ConfigError as exc:
        raise fail(str(exc)) from None
    if retention is None:
        raise fail("no retention: pass --days N or set raw_retention_days (AIO_RAW_RETENTION_DAYS)")
    with database(config) as engine:
        result = prune_raw_rows(engine, retention)
    typer.echo(f"deleted {result.requests} request rows and {result.verifications} verifications older than "
               f"{result.cutoff.isoformat()}; daily aggregates kept")
