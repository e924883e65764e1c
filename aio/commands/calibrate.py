"""`aio calibrate`: measure the tiers with the built-in probe set and fit routing to them (aio/probing)."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer

from aio.commands import ConfigOption, database, fail


def calibrate(budget: float | None = typer.Option(None, min=1, metavar="SECONDS", help="time for probing every tier "
                                                  "together (default: the setting probe_budget_s, 540)"),
              max_tasks: int | None = typer.Option(None, min=1, metavar="N", help="probe at most N tasks per tier"),
              concurrency: int | None = typer.Option(None, min=1, max=64, metavar="N", help="probe requests in flight "
                                                     "per tier (default: the setting probe_concurrency)"),
              yes: bool = typer.Option(False, "--yes", "-y", help="probe remote tiers without asking (they cost money)"),
              refit: bool = typer.Option(False, "--refit", help="fit routing to the stored outcomes; probe nothing"),
              per_cell: int = typer.Option(8, min=1, metavar="N", help="generated probe tasks per category and "
                                           "difficulty (the probe set's size; 24 made the shipped measurement)"),
              crux: int = typer.Option(40, min=0, metavar="N", help="CRUXEval-O probe tasks (120 for the shipped one)"),
              as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
              config: Path | None = ConfigOption) -> None:
    """Send the built-in probe set (questions whose answers a program computes) to every tier, store each tier's
    outcomes in the SQL log, and fit routing to them: per-tier probabilities, the thresholds for quality_target and
    the answer scorer. Resumes where a killed run stopped; a measured tier is not probed again."""
    from aio.settings import load_settings

    settings = load_settings(config)
    with database(config) as engine:
        from aio.commands.calibrate_run import run

        try:
            report = asyncio.run(run(settings, engine, budget=budget or settings.probe_budget_s, max_tasks=max_tasks,
                                     concurrency=concurrency or settings.probe_concurrency, confirm_remote=_confirm(yes),
                                     probe=not refit, progress=not as_json, per_cell=per_cell, crux=crux))
        except (ValueError, RuntimeError) as exc:
            raise fail(str(exc)) from None
    typer.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.table())


def _confirm(yes: bool):
    def ask(message: str) -> bool:
        if yes:
            return True
        typer.echo(message, err=True)
        return typer.confirm("probe the remote tiers?", default=False, err=True)

    return ask
