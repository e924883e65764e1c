"""`aio keys`: API keys for the endpoint."""
from __future__ import annotations

from datetime import datetime
from enum import Enum
from pathlib import Path

import typer

from aio.commands import ConfigOption, database, fail

keys_app = typer.Typer(help="API keys: create, list, update limits, revoke.", no_args_is_help=True,
                       rich_markup_mode=None)

RpmOption = typer.Option(None, "--rpm", min=0, metavar="N", help="requests per minute per replica (0: no limit)")
TpmOption = typer.Option(None, "--tpm", min=0, metavar="N",
                         help="prompt + completion tokens per minute per replica (0: no limit)")
StreamsOption = typer.Option(None, "--max-streams", min=0, metavar="N",
                             help="requests in flight at once per replica (0: no limit)")


def _limits(rpm: int | None, tpm: int | None, max_streams: int | None) -> dict[str, int | None]:
    """The limits given on the command line; 0 means none."""
    given = {"rpm_limit": rpm, "tpm_limit": tpm, "max_streams": max_streams}
    return {name: value or None for name, value in given.items() if value is not None}


def _describe(info) -> str:
    parts = [f"{info.rpm_limit} rpm" if info.rpm_limit else "", f"{info.tpm_limit} tpm" if info.tpm_limit else "",
             f"{info.max_streams} streams" if info.max_streams else ""]
    return ", ".join(p for p in parts if p) or "no limits"


class Role(str, Enum):
    user = "user"
    admin = "admin"


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment is not None else "-"


@keys_app.command()
def create(name: str = typer.Option(..., "--name", metavar="NAME", help="who or what the key is for"),
           role: Role = typer.Option(Role.user, "--role", help="admin keys can also use the admin endpoints"),
           rpm: int | None = RpmOption, tpm: int | None = TpmOption, max_streams: int | None = StreamsOption,
           config: Path | None = ConfigOption) -> None:
    """Create a key and print it once (on stdout; the notes go to stderr)."""
    from aio.db.keys import KeyLimits, KeyStore

    with database(config) as engine:
        try:
            info, key = KeyStore(engine).create(name, role.value, KeyLimits(**_limits(rpm, tpm, max_streams)))
        except ValueError as exc:
            raise fail(str(exc)) from None
    typer.echo(f"created API key {info.id} {info.name!r} (role {info.role}, {_describe(info)}). Store it now: it is "
               "shown only once and cannot be recovered.", err=True)
    typer.echo(key)


@keys_app.command("list")
def list_keys(config: Path | None = ConfigOption,
              all_keys: bool = typer.Option(False, "--all", help="include revoked keys")) -> None:
    """List keys (never the keys themselves: their first characters)."""
    from aio.db.keys import KeyStore

    with database(config) as engine:
        keys = KeyStore(engine).list(include_revoked=all_keys)
    if not keys:
        typer.echo("no API keys: `aio serve` needs one, or open_endpoint = true on loopback" if not all_keys
                   else "no API keys")
        return
    typer.echo(f"{'id':>4}  {'name':<20} {'role':<6} {'prefix':<13} {'created':<16}  {'last used':<16}  "
               f"{'status':<24}  limits")
    for k in keys:
        status = "active" if k.active else f"revoked {_when(k.revoked_at)}"
        typer.echo(f"{k.id:>4}  {k.name:<20} {k.role:<6} {k.prefix + '…':<13} {_when(k.created_at):<16}  "
                   f"{_when(k.last_used_at):<16}  {status:<24}  {_describe(k)}")


@keys_app.command()
def update(name_or_id: str = typer.Argument(..., metavar="NAME_OR_ID", help="the key's name or id"),
           rpm: int | None = RpmOption, tpm: int | None = TpmOption, max_streams: int | None = StreamsOption,
           config: Path | None = ConfigOption) -> None:
    """Change a key's limits (servers apply them within seconds); options not given stay as they are."""
    from aio.db.keys import KeyStore

    changes = _limits(rpm, tpm, max_streams)
    if not changes:
        raise fail("nothing to change: give --rpm, --tpm or --max-streams")
    with database(config) as engine:
        store = KeyStore(engine)
        info = store.update_limits(int(name_or_id), changes) if name_or_id.isdigit() else None
        info = info or store.update_limits(name_or_id, changes)
    if info is None:
        raise fail(f"no active key with the name or id {name_or_id!r}")
    typer.echo(f"key {info.id} {info.name!r}: {_describe(info)}")


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
