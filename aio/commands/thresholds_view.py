"""What `aio router thresholds` prints: the quality in force and where it comes from, each tier's threshold
(quality + offset), and why the offsets are what they are (the last change that set them)."""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from aio.db.models import RouterSettings, ThresholdChange
from aio.routing.registry import RouterState
from aio.settings import TIER_ORDER, Settings


def _quality_source(settings: Settings, state: RouterState) -> tuple[float, str]:
    if state.quality is not None:
        return state.quality, (f"set in the database by {state.updated_by} (overrides the settings' "
                               f"{settings.quality:.4f}; `aio router thresholds --quality Q` changes it)")
    if "quality" in settings.model_fields_set:
        return settings.quality, "from the settings (quality in the config file or AIO_QUALITY)"
    return settings.quality, "the shipped default (docs/routing.md: calibrated on the seed data)"


def seed_split_text(quality: float, tiers: list[str]) -> str:
    """The tier split `quality` gives on the seed data's held-out prompts with the shipped classifier."""
    from aio.routing_default import shipped

    calibration = shipped()
    if calibration is None:
        return "no shipped calibration (aio/routing_default.json is missing)"
    split = calibration.split(quality, tuple(tiers))
    return (", ".join(f"{tier} {share:.0%}" for tier, share in split.items())
            + f" of {calibration.data} with {calibration.classifier_version}")


def startup_routing_line(settings: Settings) -> str:
    """What `aio serve` prints about routing before it starts."""
    tiers = sorted(settings.tiers or TIER_ORDER, key=TIER_ORDER.index)
    source = "from the settings" if "quality" in settings.model_fields_set else "the shipped default"
    return (f"routing: quality {settings.quality:.4f} ({source}; `aio router thresholds` shows a database "
            f"override and the monitor's offsets): {seed_split_text(settings.quality, tiers)}")


def thresholds_text(settings: Settings, state: RouterState, engine: Engine) -> str:
    quality, source = _quality_source(settings, state)
    tiers = sorted(settings.tiers or TIER_ORDER, key=TIER_ORDER.index)
    lines = [f"quality in force: {quality:.4f}, {source}",
             "a request goes to the cheapest tier whose P(answers well) reaches that tier's threshold:"]
    for tier in tiers[:-1]:
        offset = state.offsets.get(tier, 0.0)
        threshold = min(1.0, quality + offset)
        lines.append(f"  {tier:7} {threshold:.4f} = quality {quality:.4f} + offset {offset:+.4f}")
    lines.append(f"  {tiers[-1]:7} -      (the largest tier takes whatever the cheaper ones do not)")
    lines.append(f"at this quality (no offsets): {seed_split_text(quality, tiers)}")
    with engine.connect() as connection:
        note = connection.scalar(sa.select(RouterSettings.note))
        last = connection.execute(sa.select(ThresholdChange).order_by(ThresholdChange.changed_at.desc(),
                                                                      ThresholdChange.id.desc()).limit(1)).first()
    shown = ", ".join(f"{tier} {value:+.4f}" for tier, value in state.offsets.items() if value) or "none"
    lines.append(f"offsets: {shown} (the quality monitor raises a tier's offset when its answers fail too often, "
                 "and lowers it again when they recover)")
    if last is not None:
        lines.append(f"last change: {last.changed_at:%Y-%m-%d %H:%M} UTC by {last.updated_by}"
                     + (f": {last.note}" if last.note else ""))
    if note and (last is None or note != last.note):
        lines.append(f"latest note: {note}")
    if state.retrain_due_at is not None:
        lines.append(f"retrain due since {state.retrain_due_at:%Y-%m-%d %H:%M} UTC: {state.retrain_due_reason}")
    return "\n".join(lines)
