"""`aio retrain`: weekly, from the SQL log (see aio/routing/retrain.py)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from aio.commands import ConfigOption, database, fail


def retrain(since: str | None = typer.Option(None, metavar="DURATION", help="use log verdicts of this window only: 7d, 36h, 2w"),
            dry_run: bool = typer.Option(False, "--dry-run", help="train and compare; store and promote nothing"),
            if_due: bool = typer.Option(False, "--if-due", help="do nothing unless the last training is a week old"),
            margin: float = typer.Option(0.0, min=0.0, metavar="LOSS", help="promote even if the held-out log loss is worse by this"),
            seed_data: Path | None = typer.Option(None, metavar="CSV", help="a CSV (text,label[,source]) instead of the shipped "
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
    from aio.commands.progress_bar import progress_for_stderr
    from aio.routing.embedding_cache import EmbeddingCache
    from classifier.encoder import RECIPE_ENCODER
    from classifier.seed_embeddings import SHIPPED_PATH

    with database(config) as engine:
        current = load_classifier(None, engine)
        cache = None if os.environ.get("AIO_RETRAIN_NO_CACHE") else \
            EmbeddingCache.for_encoder(settings.home / "embeddings", RECIPE_ENCODER, shipped=SHIPPED_PATH)
        try:
            report = run_retrain(engine, current, settings.home / "classifiers", since=window, margin=margin,
                                 dry_run=dry_run, if_due=if_due, seed_path=seed_data, use_seed=not no_seed,
                                 embeddings=cache, progress=None if as_json else progress_for_stderr())
        except RetrainError as exc:
            raise fail(f"{exc}; {current.version} stays in service") from None
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2, default=str))
        return
    typer.echo(summary_table(report))


def summary_table(report) -> str:
    """The data counts, the held-out metrics of the current classifier and the candidate, the decision and why."""
    lines = [f"{report.status}: {report.reason}"]
    if not report.candidate_version:
        return "\n".join(lines)
    counts = report.data_counts
    log_keys = ("verified", "passed", "failed", "redacted", "demo_tiers", "unknown_tier")
    lines += ["", "data", f"  training examples  {counts.get('train', 0):>7}",
              f"  held-out examples  {counts.get('holdout', 0):>7}"]
    for source in sorted(k for k in counts if k.startswith("train_")):
        lines.append(f"    {source[len('train_'):]:30} {counts[source]:>7} train, "
                     f"{counts.get('holdout_' + source[len('train_'):], 0):>5} held out")
    lines.append("  log verdicts       " + ", ".join(f"{k} {counts.get('log_' + k, 0)}" for k in log_keys)
                 + "  (demo_tiers: answers of the demo tiers, never used as labels)")
    if report.embedded:
        lines.append(f"  embedded           {report.embedded.get('new', 0)} new, "
                     f"{report.embedded.get('cached', 0)} from the cache, "
                     f"{report.embedded.get('shipped', 0)} shipped with the seed data")
    if report.shipped_embeddings not in (None, "used"):
        lines.append(f"  shipped seed embeddings not used: {report.shipped_embeddings}")
    lines += ["", f"held-out        {'log loss':>9} {'accuracy':>9}  version"]
    for name, version, metrics in (("current", report.current_version, report.current_metrics),
                                   ("candidate", report.candidate_version, report.candidate_metrics)):
        lines.append(f"  {name:13} {metrics.get('log_loss', float('nan')):>9.4f} "
                     f"{metrics.get('accuracy', float('nan')):>9.3f}  {version}")
    lines += ["", "time            " + ", ".join(f"{name.split(' ')[0]} {s:.1f} s"
                                                for name, s in report.stage_seconds.items())
              + f"; total {report.seconds:.1f} s"]
    if report.path:
        lines.append(f"saved in {report.path}")
    return "\n".join(lines)
