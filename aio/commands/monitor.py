"""`aio monitor`: the quality monitor as its own process against the deployment's database."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import typer

from aio.commands import ConfigOption, database, fail


def monitor(lookback: str = typer.Option("1h", help="verify answers of this recent window: 30m, 1h, 1d"),
            poll_interval: float = typer.Option(2.0, min=0.1, help="seconds between looks at the log"),
            once: bool = typer.Option(False, "--once", help="verify what is pending, then exit"),
            config: Path | None = ConfigOption) -> None:
    """Verify a sample of small/medium answers on the large tier (set monitor_mode = "external" on the servers
    so they do not verify the same answers)."""
    from aio.routing.retrain import RetrainError, parse_since
    from aio.settings import REFERENCE_TIER, load_settings

    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = load_settings(config)
    try:
        window = parse_since(lookback)
    except RetrainError as exc:
        raise fail(str(exc)) from None
    if settings.tiers and REFERENCE_TIER not in settings.tiers:
        raise fail("the quality monitor replays on the large tier, which is not configured")
    with database(config) as engine:
        verified = asyncio.run(_run(settings, engine, window, poll_interval, once))
    typer.echo(f"verified {verified} answers")


async def _run(settings, engine, window, poll_interval: float, once: bool) -> int:
    from aio.db.leases import holder_name
    from aio.monitoring import SqlVerdictStore, build_monitor, unverified_candidates
    from aio.routing import registry
    from aio.settings import REFERENCE_TIER
    from aio.tier_loader import build_tier

    random_weights = False
    if settings.tiers:
        tier_settings = settings.tiers[REFERENCE_TIER]
    else:
        from aio.demo import embedded_default

        embedded = embedded_default(settings.home, settings.demo_model)
        tier_settings, random_weights = embedded.tiers[REFERENCE_TIER], embedded.random_weights
    reference = await asyncio.to_thread(build_tier, REFERENCE_TIER, tier_settings, random_weights)
    store = SqlVerdictStore(engine, store_text=settings.log_prompts)
    quality_monitor = build_monitor(settings, reference, tier_settings.prices, store,
                                    holder=holder_name("aio-monitor"))
    quality_monitor.start()
    seen: set[str] = set()
    try:
        while True:
            state = await asyncio.to_thread(registry.router_state, engine)
            quality = settings.quality if state.quality is None else state.quality
            candidates = await asyncio.to_thread(unverified_candidates, engine, window, quality, state.offsets)
            for candidate in candidates:
                if candidate.request_id in seen:
                    continue
                if quality_monitor.queue.full():
                    break  # the rest waits for the next look
                seen.add(candidate.request_id)
                quality_monitor.offer(candidate)
            if once:
                await quality_monitor.drain()
                await asyncio.to_thread(quality_monitor.central.step)  # count the new verdicts if it leads
                return sum(quality_monitor.stats.verdicts.values())
            await asyncio.sleep(poll_interval)
    finally:
        await quality_monitor.stop()
        await reference.aclose()
