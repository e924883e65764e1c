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
BudgetOption = typer.Option(None, "--budget-usd", min=0.0, metavar="USD",
                            help="spend cap in USD per --budget-period (0: no budget)")
PeriodOption = typer.Option(None, "--budget-period", metavar="PERIOD",
                            help="day, week, month (UTC calendar) or total (never resets); default month")
SoftOption = typer.Option(None, "--budget-soft", metavar="SHARE",
                          help="warn (server log, dashboard) past this share of the budget, e.g. 0.8")


def _budget_changes(budget_usd: float | None, period: str | None, soft: float | None) -> dict[str, object]:
    """The budget settings given on the command line; --budget-usd 0 removes the budget."""
    changes: dict[str, object] = {}
    if budget_usd is not None:
        changes["budget_usd"] = budget_usd or None
    if period is not None:
        changes["budget_period"] = period
    if soft is not None:
        changes["budget_soft"] = soft or None
    return changes


def _limits(rpm: int | None, tpm: int | None, max_streams: int | None) -> dict[str, int | None]:
    """The limits given on the command line; 0 means none."""
    given = {"rpm_limit": rpm, "tpm_limit": tpm, "max_streams": max_streams}
    return {name: value or None for name, value in given.items() if value is not None}


def _describe(info) -> str:
    parts = [f"{info.rpm_limit} rpm" if info.rpm_limit else "", f"{info.tpm_limit} tpm" if info.tpm_limit else "",
             f"{info.max_streams} streams" if info.max_streams else "", _budget_text(info)]
    return ", ".join(p for p in parts if p) or "no limits"


def _budget_text(info) -> str:
    if info.budget_usd is None:
        return ""
    soft = f" (soft {info.budget_soft:g})" if info.budget_soft else ""
    return f"budget ${info.budget_usd:g}/{info.budget_period}{soft}"


class Role(str, Enum):
    user = "user"
    admin = "admin"


def shown(text: str) -> str:
    """User-supplied text as the terminal should show it: non-printable characters (ESC, CR, LF, C1, bidi controls,
    lone surrogates) escaped as in Python's repr, so a key's name cannot forge output."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment is not None else "-"


@keys_app.command()
def create(name: str = typer.Option(..., "--name", metavar="NAME", help="who or what the key is for"),
           role: Role = typer.Option(Role.user, "--role", help="admin keys can also use the admin endpoints"),
           rpm: int | None = RpmOption, tpm: int | None = TpmOption, max_streams: int | None = StreamsOption,
           budget_usd: float | None = BudgetOption, budget_period: str | None = PeriodOption,
           budget_soft: float | None = SoftOption, config: Path | None = ConfigOption) -> None:
    """Create a key and print it once (on stdout; the notes go to stderr)."""
    from aio.db.budgets import Budget
    from aio.db.keys import KeyLimits, KeyStore

    try:
        budget = Budget(budget_usd, budget_period or "month", budget_soft or None) if budget_usd else None
    except ValueError as exc:
        raise fail(str(exc)) from None
    if budget is None and (budget_period is not None or budget_soft is not None):
        raise fail("--budget-period and --budget-soft need --budget-usd")
    with database(config) as engine:
        try:
            info, key = KeyStore(engine).create(name, role.value, KeyLimits(**_limits(rpm, tpm, max_streams)),
                                                budget)
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
        typer.echo(f"{k.id:>4}  {shown(k.name):<20} {k.role:<6} {k.prefix + '…':<13} {_when(k.created_at):<16}  "
                   f"{_when(k.last_used_at):<16}  {status:<24}  {_describe(k)}")


NameOrIdArgument = typer.Argument(None, metavar="NAME_OR_ID", show_default=False,
                                  help="the key's name or id (ambiguous: use --id or --name)")
IdOption = typer.Option(None, "--id", min=1, metavar="ID", help="the key's id")
NameOption = typer.Option(None, "--name", metavar="NAME", help="the key's name")


def _find(store, name_or_id: str | None, key_id: int | None, name: str | None):
    """The active key the arguments name: exactly one of NAME_OR_ID, --id and --name. A NAME_OR_ID of digits that is
    one key's id and another key's name is refused rather than guessed."""
    if sum(x is not None for x in (name_or_id, key_id, name)) != 1:
        raise fail("name the key once: NAME_OR_ID, --id ID or --name NAME")
    if key_id is not None:
        found = store.find_active(key_id)
        what = f"id {key_id}"
    elif name is not None:
        found = store.find_active(name)
        what = f"the name {name!r}"
    else:
        by_name = store.find_active(name_or_id)
        by_id = store.find_active(int(name_or_id)) if name_or_id.isascii() and name_or_id.isdigit() else None
        if by_id is not None and by_name is not None and by_id.id != by_name.id:
            raise fail(f"{name_or_id!r} is the id of key {by_id.id} {by_id.name!r} and the name of key {by_name.id}: "
                       f"say --id {name_or_id} or --name {name_or_id}")
        found = by_id or by_name
        what = f"the name or id {name_or_id!r}"
    if found is None:
        raise fail(f"no active key with {what}")
    return found


@keys_app.command()
def update(name_or_id: str | None = NameOrIdArgument, key_id: int | None = IdOption, name: str | None = NameOption,
           rpm: int | None = RpmOption, tpm: int | None = TpmOption, max_streams: int | None = StreamsOption,
           budget_usd: float | None = BudgetOption, budget_period: str | None = PeriodOption,
           budget_soft: float | None = SoftOption, config: Path | None = ConfigOption) -> None:
    """Change a key's limits and budget (servers apply them within seconds); options not given stay as they are."""
    from aio.db.keys import KeyStore

    changes = {**_limits(rpm, tpm, max_streams), **_budget_changes(budget_usd, budget_period, budget_soft)}
    if not changes:
        raise fail("nothing to change: give --rpm, --tpm, --max-streams, --budget-usd, --budget-period or "
                   "--budget-soft")
    with database(config) as engine:
        store = KeyStore(engine)
        try:
            info = store.update_limits(_find(store, name_or_id, key_id, name).id, changes)
        except ValueError as exc:
            raise fail(str(exc)) from None
    if info is None:
        raise fail("the key was revoked meanwhile")
    typer.echo(f"key {info.id} {info.name!r}: {_describe(info)}")


@keys_app.command()
def revoke(name_or_id: str | None = NameOrIdArgument, key_id: int | None = IdOption, name: str | None = NameOption,
           config: Path | None = ConfigOption) -> None:
    """Revoke a key: it stops working within seconds on every server."""
    from aio.db.keys import KeyStore

    with database(config) as engine:
        store = KeyStore(engine)
        info = _find(store, name_or_id, key_id, name)
        revoked = store.revoke(info.id)
    if not revoked:
        raise fail(f"key {info.id} {info.name!r} was revoked meanwhile")
    typer.echo(f"revoked key {info.id} {info.name!r}")
