"""`aio report cost`: the dashboard's KPI numbers (per tier and in total) in the terminal; `aio report keys`: spend
and budget state per API key."""
from __future__ import annotations

import csv
import io
import json
import re
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from aio.commands import ConfigOption, database, fail

report_app = typer.Typer(help="Reports from the SQL log.", no_args_is_help=True, rich_markup_mode=None)

COLUMNS = ("tier", "requests", "errors", "error_rate", "prompt_tokens", "completion_tokens", "tokens", "cost_usd",
           "baseline_cost_usd", "savings_usd", "savings_pct", "quality_pass_rate", "quality_verdicts",
           "judge_cost_usd", "ttft_p95_ms", "cascades", "cascade_cost_usd")


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


def _rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    rejected = {"requests": summary["total"].get("rejected", 0)}  # refused before a tier: requests only
    return [{"tier": tier, **{c: values.get(c) for c in COLUMNS[1:]}}
            for tier, values in [*summary["tiers"].items(), ("rejected", rejected), ("total", summary["total"])]]


def _cell(column: str, value: Any) -> str:
    if value is None:
        return "-"
    if column.endswith("_usd"):
        return f"${value:,.4f}"
    if column in ("error_rate", "quality_pass_rate"):
        return f"{100 * value:.1f}%"
    if column == "savings_pct":
        return f"{value:.1f}%"
    if column.endswith("_ms"):
        return f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _table(summary: dict[str, Any]) -> str:
    shown = ("tier", "requests", "tokens", "cost_usd", "baseline_cost_usd", "savings_usd", "savings_pct",
             "quality_pass_rate", "error_rate", "ttft_p95_ms", "judge_cost_usd")
    headers = ("tier", "requests", "tokens", "cost", "all-large", "savings", "savings %", "pass rate", "errors",
               "p95 TTFT ms", "judge cost")
    cells = [list(headers)] + [[_cell(c, row[c]) for c in shown] for row in _rows(summary)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))) for r in cells]
    r, total = summary["range"], summary["total"]
    return "\n".join([f"cost report {r['start']} → {r['end']} ({r['source']})", *lines,
                      "judge cost (quality-monitor replays) is not part of the cost or the savings",
                      f"cascaded: {_cell('cascades', total['cascades'])} requests answered again on a larger tier; "
                      f"their replaced answers cost {_cell('cascade_cost_usd', total['cascade_cost_usd'])} "
                      "(part of the cost)"])


def _csv(summary: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(_rows(summary))
    return out.getvalue().rstrip("\n")


def _range(since: str, until: str | None):
    from aio.reports.ranges import parse_range

    if re.fullmatch(r"\d+[hd]", since.strip().lower()) and until is None:
        return parse_range(since)
    return parse_range("custom", since, until)


@report_app.command()
def cost(since: str = typer.Option("7d", "--since", metavar="WHEN", help="24h, 7d, 30d, <N>h, <N>d, or a date / date-time"),
         until: str | None = typer.Option(None, "--until", metavar="WHEN", help="with a date --since: the end (default now)"),
         output: Format = typer.Option(Format.table, "--format", help="table, csv or json"),
         config: Path | None = ConfigOption) -> None:
    """What was spent, what all-large would have cost, the savings, quality, errors, p95 TTFT and the confidence
    cascade's requests and extra cost, per tier."""
    from aio.api.errors import APIError
    from aio.reports import service

    try:
        r = _range(since, until)
    except APIError as exc:
        raise fail(exc.message) from None
    from aio.routing.fit_store import load_active
    from aio.routing.quality_estimate import quality_estimate

    with database(config) as engine, engine.connect() as connection:
        summary = service.summary(connection, r)
        active = load_active(engine)
        summary["quality_estimate"] = quality_estimate(connection, active[1] if active else None, r.start, r.end)
    if output is Format.json:
        typer.echo(json.dumps(summary, indent=2))
    elif output is Format.csv:
        typer.echo(_csv(summary))
    else:
        typer.echo(_table(summary) + "\n" + _estimate_line(summary["quality_estimate"]))


def _estimate_line(estimate: dict | None) -> str:
    """The routing fit's estimate of the quality bought, beside the savings above."""
    if estimate is None:
        return "quality vs always-large: not estimated (the tiers are not measured: aio calibrate)"
    return (f"quality vs always-large (estimated): {estimate['relative_accuracy']:.1%} "
            f"[{estimate['low']:.1%}, {estimate['high']:.1%}] (90%), target {estimate['target']:.0%}, "
            f"on {estimate['num_prompts']} {estimate['on']}")


@report_app.command()
def keys(since: str = typer.Option("30d", "--since", metavar="WHEN", help="the spend column's range: 24h, 7d, 30d, "
                                                                          "<N>h, <N>d, or a date / date-time"),
         output: Format = typer.Option(Format.table, "--format", help="table or json"),
         config: Path | None = ConfigOption) -> None:
    """Spend per API key over --since, and each budget's state: spent in its period, left, the next reset, and
    whether the soft limit is passed."""
    from aio.api.errors import APIError
    from aio.db.budgets import budget_states
    from aio.db.keys import KeyStore
    from aio.db.records import utcnow
    from aio.reports import service

    try:
        r = _range(since, None)
    except APIError as exc:
        raise fail(exc.message) from None
    with database(config) as engine:
        active = KeyStore(engine).list(include_revoked=False)
        with engine.connect() as connection:
            spend = service.breakdown(connection, r, ("key",), limit=10_000)["breakdowns"]["key"]["rows"]
            budgets = budget_states(connection, utcnow())
    by_key = {row["key"]: row for row in spend}
    rows = [{"id": k.id, "name": k.name, "requests": by_key.get(k.id, {}).get("requests", 0),
             "cost_usd": by_key.get(k.id, {}).get("cost_usd", 0.0),
             "budget": budgets[k.id].as_json() if k.id in budgets else None} for k in active]
    if output is Format.json:
        typer.echo(json.dumps({"range": r.as_json(), "keys": rows}, indent=2))
        return
    from aio.commands.keys import shown

    lines = [f"{'id':>4}  {'name':<20} {'requests':>9} {'cost_usd':>11}  {'budget':<16} {'spent':>10} {'left':>10}  "
             f"{'next reset (UTC)':<16}  flag"]
    for row in rows:
        b = row["budget"]
        budget = f"${b['budget_usd']:g}/{b['period']}" if b else "-"
        spent = f"{b['spent_usd']:.4f}" if b else "-"
        left = f"{b['left_usd']:.4f}" if b else "-"
        reset = b["next_reset"][:16].replace("T", " ") if b and b["next_reset"] else "-"
        flag = ("exceeded" if b["exceeded"] else "soft limit" if b["soft_exceeded"] else "") if b else ""
        lines.append(f"{row['id']:>4}  {shown(row['name'])[:20]:<20} {row['requests']:>9} {row['cost_usd']:>11.4f}  "
                     f"{budget:<16} {spent:>10} {left:>10}  {reset:<16}  {flag}")
    typer.echo("\n".join(lines))
