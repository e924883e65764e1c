"""`aio keys`: API keys for the endpoint."""
from __future__ import annotations

from datetime import datetime
from enum import Enum
from pathlib import Path

import typer

from aio.commands import ConfigOption, database, fail

keys_app = typer.Typer(help="API keys: create, list, revoke.", no_args_is_help=True, rich_markup_mode=None)


class Role(str, Enum):
    user = "user"
    admin = "admin"


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment is not None else "-"


@keys_app.command()
def create(name: str = typer.Option(..., "--name", metavar="NAME", help="who or what the key is for"),
           role: Role = typer.Option(Role.user, "--role", help="admin keys can also use the admin endpoints"),
           config: Path | None = ConfigOption) -> None:
    """Create a key and print it once (on stdout; the notes go to stderr)."""
    from aio.db.keys import KeyStore

    with database(config) as engine:
        try:
            info, key = KeyStore(engine).create(name, role.value)
        except ValueError as exc:
            raise fail(str(exc)) from None
    typer.echo(f"created API key {info.id} {info.name!r} (role {info.role}). Store it now: it is shown only once "
               "and cannot be recovered.", err=True)
    typer.echo(key)


@keys_app.command("list")
def list_keys(config: Path | None = ConfigOption,
              all_keys: bool = typer.Option(False, "--all", help="include revoked keys")) -> None:
    """List keys (never the keys themselves: their first characters)."""
    from aio.db.keys import KeyStore

    with database(config) as engine:
        keys = KeyStore(engine).list(include_revoked=all_keys)
    if not keys:
        typer.echo("no API keys: the endpoint is open to anyone who can reach it" if not all_keys else "no API keys")
        return
    typer.echo(f"{'id':>4}  {'name':<20} {'role':<6} {'prefix':<13} {'created':<16}  {'last used':<16}  status")
    for k in keys:
        status = "active" if k.active else f"revoked {_when(k.revoked_at)}"
        typer.echo(f"{k.id:>4}  {k.name:<20} {k.role:<6} {k.prefix + '…':<13} {_when(k.created_at):<16}  "
                   f"{_when(k.last_used_at):<16}  {status}")


@keys_app.command()
def revoke(name_or_id: str = typer.Argument(..., metavar="NAME_OR_ID", help="the key's name or id"),
           config: Path | None = ConfigOption) -> None:
    """Revoke a key: it stops working within seconds on every server."""
    from aio.db.keys import KeyStore

    with database(config) as engine:
        store = KeyStore(engine)
        revoked = name_or_id.isdigit() and store.revoke(int(name_or_id))  # an id first, then a name
        revoked = revoked or store.revoke(name_or_id)
    if not revoked:
        raise fail(f"no active key with the name or id {name_or_id!r}")
    typer.echo(f"revoked {name_or_id}")
