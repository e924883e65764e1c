"""`aio retrain`: weekly, from the SQL log (see aio/routing/retrain.py)."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from aio.commands import ConfigOption, database, fail


def retrain(since: str | None = typer.Option(None, help="use log verdicts of this window only: 7d, 36h, 2w"),
            dry_run: bool = typer.Option(False, "--dry-run", help="train and compare; store and promote nothing"),
            if_due: bool = typer.Option(False, "--if-due", help="do nothing unless the last training is a week old"),
            margin: float = typer.Option(0.0, min=0.0, help="promote even if the held-out log loss is worse by this"),
            seed_data: Path | None = typer.Option(None, help="a CSV (text,label[,source]) instead of the shipped "
                                                             "seed data", exists=True, dir_okay=False),
            no_seed: bool = typer.Option(False, "--no-seed", help="train on the log's verdicts alone"),
            as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
            config: Path | None = ConfigOption) -> None:
    """Train a classifier from the quality monitor's verdicts plus the seed data; promote it if it is not worse
    than the one in service on held-out data. Safe to run daily with --if-due."""
    from aio.routing import load_classifier
    from aio.routing.retrain import RetrainError, parse_since
    from aio.routing.retrain import retrain as run_retrain
    from aio.settings import load_settings

    settings = load_settings(config)
    try:
        window = parse_since(since) if since else None
    except RetrainError as exc:
        raise fail(str(exc)) from None
    with database(config) as engine:
        current = load_classifier(None, engine)
        try:
            report = run_retrain(engine, current, settings.home / "classifiers", since=window, margin=margin,
                                 dry_run=dry_run, if_due=if_due, seed_path=seed_data, use_seed=not no_seed)
        except RetrainError as exc:
            raise fail(f"{exc}; {current.version} stays in service") from None
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2, default=str))
        return
    typer.echo(f"{report.status}: {report.reason}")
    if report.candidate_version:
        typer.echo(f"candidate {report.candidate_version}: {report.candidate_metrics}")
        typer.echo(f"current   {report.current_version}: {report.current_metrics}")
        typer.echo(f"data: {report.data_counts}")
        if report.path:
            typer.echo(f"saved in {report.path} ({report.seconds:.0f} s)")
