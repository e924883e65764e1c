"""`aio classifier list | promote VERSION | rollback` and `aio router calibrate`."""
from __future__ import annotations

from pathlib import Path

import typer

from aio.commands import ConfigOption, database, fail

classifier_app = typer.Typer(help="Router classifier versions.", no_args_is_help=True, rich_markup_mode=None)
router_app = typer.Typer(help="Routing thresholds.", no_args_is_help=True, rich_markup_mode=None)


@classifier_app.command("list")
def list_versions(config: Path | None = ConfigOption) -> None:
    """Every classifier version, newest first; * marks the active one."""
    from aio.routing import registry

    with database(config) as engine:
        versions = registry.list_versions(engine)
    if not versions:
        typer.echo("no classifier versions yet (the server registers the shipped one at its first start)")
        return
    row = "{:1} {:40} {:11} {:13} {:16} {:>8} {:>14}"
    typer.echo(row.format("", "VERSION", "STATUS", "KIND", "CREATED (UTC)", "EXAMPLES", "HELD-OUT LOSS"))
    for v in versions:
        holdout = v.metrics.get("holdout", {})
        loss = f"{holdout['log_loss']:.4f}" if "log_loss" in holdout else "-"
        typer.echo(row.format("*" if v.active else "", v.version, v.status, v.kind, f"{v.created_at:%Y-%m-%d %H:%M}",
                              v.num_train_examples, loss))
    typer.echo("* = active")


@classifier_app.command()
def promote(version: str, config: Path | None = ConfigOption) -> None:
    """Make VERSION the active classifier (running servers switch within their poll interval)."""
    from aio.routing import registry

    with database(config) as engine:
        try:
            info = registry.promote(engine, version)
        except registry.RegistryError as exc:
            raise fail(str(exc)) from None
    typer.echo(f"{info.version} is active")


@classifier_app.command()
def rollback(config: Path | None = ConfigOption) -> None:
    """Re-activate the version that was active before the current one."""
    from aio.routing import registry

    with database(config) as engine:
        try:
            info = registry.rollback(engine)
        except registry.RegistryError as exc:
            raise fail(str(exc)) from None
    typer.echo(f"rolled back: {info.version} is active")


@router_app.command()
def calibrate(large_share: float = typer.Option(..., "--large-share", min=0.0, max=1.0, metavar="SHARE",
                                                help="the share of routed traffic the large tier should get"),
              since: str = typer.Option("7d", metavar="DURATION", help="the traffic window: 7d, 36h, 2w"),
              dry_run: bool = typer.Option(False, "--dry-run", help="print, store nothing"),
              config: Path | None = ConfigOption) -> None:
    """Set the quality threshold so that about --large-share of recent traffic goes to the large tier."""
    from aio.routing.calibrate import CalibrationError, calibrate_large_share
    from aio.routing.retrain import RetrainError, parse_since

    try:
        window = parse_since(since)
    except RetrainError as exc:
        raise fail(str(exc)) from None
    with database(config) as engine:
        router = _current_router(config, engine)
        try:
            report = calibrate_large_share(engine, router, large_share, window, apply=not dry_run)
        except CalibrationError as exc:
            raise fail(str(exc)) from None
    shares = ", ".join(f"{t} {s:.1%}" for t, s in report.shares.items())
    typer.echo(f"{'would set' if dry_run else 'set'} quality = {report.quality:.4f} from {report.num_requests} "
               f"requests ({report.num_rescored} re-scored by {router.classifier.version}): {shares}")


def _current_router(config: Path | None, engine):
    from aio.routing import Router, load_classifier, registry
    from aio.settings import TIER_ORDER, load_settings

    settings = load_settings(config)
    tiers = sorted(settings.tiers or TIER_ORDER, key=TIER_ORDER.index)
    state = registry.router_state(engine)
    return Router(load_classifier(settings.classifier_path, engine), tiers, settings.quality, state.offsets)


@router_app.command()
def thresholds(small: float | None = typer.Option(None, metavar="OFFSET",
                                                  help="set the small tier's threshold offset (0 = none)"),
               medium: float | None = typer.Option(None, metavar="OFFSET",
                                                   help="set the medium tier's threshold offset"),
               quality: float | None = typer.Option(None, min=0.0, max=1.0, metavar="Q",
                                                    help="set the deployment's quality"),
               reset: bool = typer.Option(False, "--reset", help="clear every offset"),
               config: Path | None = ConfigOption) -> None:
    """Show the routing thresholds, or override them by hand (the quality monitor moves the offsets too)."""
    from aio.commands.thresholds_view import thresholds_text
    from aio.routing import registry
    from aio.settings import TIER_ORDER, load_settings

    given = {tier: value for tier, value in zip(TIER_ORDER, (small, medium)) if value is not None}
    with database(config) as engine:
        state = registry.router_state(engine)
        offsets = {} if reset else dict(state.offsets)
        for tier, value in given.items():
            if not -1.0 <= value <= 1.0:
                raise fail(f"--{tier} must be in [-1, 1], got {value}")
            offsets[tier] = value
        if reset or given or quality is not None:
            try:
                state = registry.set_router_state(engine, quality=quality, offsets=offsets,
                                                  updated_by="aio router thresholds", note="set by hand")
            except registry.RegistryError as exc:
                raise fail(str(exc)) from None
        text = thresholds_text(load_settings(config), state, engine)
    typer.echo(text)
