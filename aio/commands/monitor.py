"""`aio monitor`: the quality monitor as its own process against the deployment's database."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import typer

from aio.commands import ConfigOption, database, fail


def monitor(lookback: str = typer.Option("1h", metavar="DURATION", help="verify answers of this recent window: 30m, 1h, 1d"),
            poll_interval: float = typer.Option(2.0, min=0.1, metavar="SECONDS", help="seconds between looks at the log"),
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
    if settings.monitor_mode == "serve":
        typer.echo("note: monitor_mode is \"serve\": the servers verify answers themselves; this process verifies "
                   "only what they have not (set monitor_mode = \"external\" on the servers to leave it to "
                   "`aio monitor`)", err=True)
    from aio.part_wheels import AssemblyError

    with database(config) as engine:
        try:
            outcome = asyncio.run(_run(settings, engine, window, poll_interval, once))
        except AssemblyError as exc:  # AIO_DEMO_MODEL=family without its wheels
            raise fail(f"AIO_DEMO_MODEL={settings.demo_model}: {exc}") from None
    typer.echo(f"verified {outcome.verified} answers" + ("" if outcome.verified else f": {outcome.why_none(lookback)}"))


@dataclass
class Outcome:
    verified: int
    pending: int  # unverified small/medium answers found in the window
    offered: int
    sampled: int
    dropped: dict[str, int]
    settings: object

    def why_none(self, lookback: str) -> str:
        s = self.settings
        if self.pending == 0:
            redacted = "" if s.log_prompts else " (log_prompts = false: no prompt is stored, so none can be replayed)"
            already = " the servers' own monitor (monitor_mode = \"serve\") may have verified them already;" \
                if s.monitor_mode == "serve" else ""
            return (f"no unverified small/medium answers with a logged prompt in the last {lookback}{redacted};"
                    f"{already} widen --lookback to look further back")
        if self.sampled == 0 and not self.dropped:
            return (f"{self.pending} unverified answers found, none drawn by the sample (quality_sample_rate = "
                    f"{s.quality_sample_rate}); raise AIO_QUALITY_SAMPLE_RATE to verify more")
        if self.dropped:
            reasons = ", ".join(f"{n} {reason}" for reason, n in self.dropped.items())
            return f"{self.pending} found, {self.sampled} sampled, dropped: {reasons} (quality_budget_tokens_per_hour)"
        return f"{self.sampled} sampled, but no verdict came back (see the log above for the replay errors)"


async def _run(settings, engine, window, poll_interval: float, once: bool) -> Outcome:
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
    store = SqlVerdictStore(engine, store_text=settings.log_prompts, demo_tiers=settings.demo_tiers_alike)
    quality_monitor = build_monitor(settings, reference, tier_settings.prices, store,
                                    holder=holder_name("aio-monitor"))
    quality_monitor.start()
    seen: set[str] = set()
    pending = 0
    try:
        while True:
            state = await asyncio.to_thread(registry.router_state, engine)
            quality = settings.quality if state.quality is None else state.quality
            candidates = await asyncio.to_thread(unverified_candidates, engine, window, quality, state.offsets)
            pending = len(candidates)
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
                stats = quality_monitor.stats
                return Outcome(sum(stats.verdicts.values()), pending, stats.offered, sum(stats.sampled.values()),
                               dict(stats.dropped), settings)
            await asyncio.sleep(poll_interval)
    finally:
        await quality_monitor.stop()
        await reference.aclose()
