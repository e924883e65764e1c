"""The `aio` command."""
from __future__ import annotations

import os
import time
from pathlib import Path

import typer

app = typer.Typer(help="AIO: the Adaptive Inference Orchestrator.", no_args_is_help=True)


@app.callback()
def main() -> None:
    """AIO command line."""


@app.command()
def serve(host: str = typer.Option("127.0.0.1", help="address to bind; non-loopback needs API keys"),
          port: int = typer.Option(8000, min=1, max=65535),
          config: Path | None = typer.Option(None, "--config", "-c", help="a TOML settings file (see README)"),
          log_level: str = typer.Option("info")) -> None:
    """Start the OpenAI-compatible server (the embedded demo tiers and SQLite when nothing is configured)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import logging
    import secrets

    import uvicorn

    from aio.db.database import DatabaseError
    from aio.server.app import StartupError, create_app, preflight
    from aio.settings import ConfigError, load_settings

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(config)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    try:
        preflight(settings, host)
    except (StartupError, DatabaseError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    admin_key = settings.admin_key
    if admin_key is None:
        admin_key = "aio-admin-" + secrets.token_urlsafe(24)
        typer.echo(f"AIO_ADMIN_KEY is not set; the admin key for this run (shown once): {admin_key}")
    if settings.uses_demo_tiers:
        typer.echo(f"no tiers configured: serving DEMO tiers with random weights (gibberish answers) from "
                   f"{settings.home / 'demo'}; the log is {settings.resolved_database_url}")
    typer.echo(f"OpenAI-compatible endpoint: http://{host}:{port}/v1  (model 'auto' routes)")
    uvicorn.run(create_app(settings, bind_host=host, admin_key=admin_key), host=host, port=port,
                log_level=log_level.lower(), timeout_graceful_shutdown=30)


@app.command()
def demo(prompt: str = typer.Option("Explain why the sky is blue.", help="the user message"),
         max_tokens: int = typer.Option(32, min=1), temperature: float = typer.Option(0.0, min=0.0)) -> None:
    """Build the small demo checkpoint (random weights, offline) and run one chat generation on the engine."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from aio.demo import demo_checkpoint_dir, demo_checkpoint_is_built, ensure_demo_checkpoint
    from aio.settings import TIER_ORDER, default_home
    from tiers import Engine, SamplingParams

    home, tier = default_home(), TIER_ORDER[0]
    path = demo_checkpoint_dir(home, tier)
    if not demo_checkpoint_is_built(path):
        typer.echo(f"building the demo checkpoint (random weights) in {path} ...")
    engine = Engine.from_pretrained(ensure_demo_checkpoint(home, tier))
    prompt_ids = engine.apply_chat_template([{"role": "user", "content": prompt}])
    start = time.perf_counter()
    out = engine.generate([prompt_ids], SamplingParams(max_tokens=max_tokens, temperature=temperature))[0]
    seconds = time.perf_counter() - start
    typer.echo("NOTE: demo tier with RANDOM weights: the text is gibberish; it shows the engine working.")
    typer.echo(f"prompt ({len(prompt_ids)} tokens): {prompt}")
    typer.echo(f"answer ({len(out.token_ids)} tokens, finish_reason={out.finish_reason}): {out.text!r}")
    typer.echo(f"{len(out.token_ids) / seconds:.1f} tokens/s; engine stats: {engine.stats()}")


def _register_subcommands() -> None:
    from aio.commands.classifier import classifier_app, router_app
    from aio.commands.db import db_app
    from aio.commands.keys import keys_app
    from aio.commands.monitor import monitor
    from aio.commands.report import report_app
    from aio.commands.retrain import retrain

    app.add_typer(db_app, name="db", help="database migrations")
    app.add_typer(keys_app, name="keys", help="API keys")
    app.add_typer(classifier_app, name="classifier", help="router classifier versions")
    app.add_typer(router_app, name="router", help="routing thresholds")
    app.add_typer(report_app, name="report", help="reports from the SQL log (cost)")
    app.command("retrain")(retrain)
    app.command("monitor")(monitor)


_register_subcommands()

if __name__ == "__main__":
    app()
