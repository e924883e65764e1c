"""The shipped default of the quality knob, and the tier split it gives.

The default is calibrated so that about `large_share` (20%) of the seed data's held-out prompts (a mix of chat,
maths, coding and knowledge questions from the routing data sets) go to the large tier with the shipped classifier;
`python -m aio.routing.build_default_quality` computes it and writes `routing_default.json` next to this file,
with each held-out prompt's P(small answers well) and P(small or medium answers well), so that the split at any
quality can be shown at start. No imports from the rest of aio: the settings read it.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_FILE = Path(__file__).with_name("routing_default.json")
FALLBACK_QUALITY = 0.5  # when the file is missing (a broken install): the midpoint
DEFAULT_TARGET = 0.90  # quality_target: the share of always-largest's accuracy kept, once the tiers are measured (chosen by cross-validation on the family's probe outcomes: docs/routing.md)


@dataclass(frozen=True)
class RoutingDefault:
    quality: float
    large_share: float
    classifier_version: str
    data: str
    p_small: tuple[float, ...]  # per held-out prompt: P(the small tier answers well)
    p_medium: tuple[float, ...]  # P(small or medium answers well)

    def split(self, quality: float, tiers: tuple[str, ...] = ("small", "medium", "large")) -> dict[str, float]:
        """The share of the held-out prompts each configured tier gets at `quality` (no offsets)."""
        counts = {tier: 0 for tier in tiers}
        for small, medium in zip(self.p_small, self.p_medium):
            p_good = {"small": small, "medium": medium, "large": 1.0}
            chosen = next((t for t in tiers[:-1] if p_good[t] >= min(1.0, quality) - 1e-9), tiers[-1])
            counts[chosen] += 1
        n = max(1, len(self.p_small))
        return {tier: count / n for tier, count in counts.items()}


@functools.cache
def shipped() -> RoutingDefault | None:
    try:
        raw = json.loads(DEFAULT_FILE.read_text())
        return RoutingDefault(float(raw["quality"]), float(raw["large_share"]), str(raw["classifier_version"]),
                              str(raw["data"]), tuple(raw["p_small"]), tuple(raw["p_medium"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def default_quality() -> float:
    found = shipped()
    return found.quality if found is not None else FALLBACK_QUALITY
