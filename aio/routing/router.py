"""Routing: the classifier's per-tier probabilities and a quality knob pick the cheapest tier that will do.

The classifier's label for a text is the index of the cheapest tier that answers it well (0 = small), so
P(tier t answers well) = P(label <= t). The router picks the cheapest configured tier whose probability reaches
the threshold `quality` (0 = always the cheapest, 1 = always the largest), raised per tier by `offsets` (the
quality monitor moves traffic up by raising them). The server scores texts through `aio.routing.batcher` and
decides with `Router.decide`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from aio.settings import TIER_ORDER


class Classifier(Protocol):
    version: str

    def predict_proba(self, texts: list[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class RoutingDecision:
    tier: str
    reason: str  # "classifier" | "explicit" | "escalation" | "fallback" | "sticky" | "recent-failure" | "cascade"
    score: float | None = None  # P(the chosen tier answers well)
    scores: tuple[float, ...] | None = None  # the classifier's per-tier probabilities
    classifier_version: str | None = None


class Router:
    def __init__(self, classifier: Classifier, tiers: Sequence[str], quality: float = 0.5,
                 offsets: dict[str, float] | None = None) -> None:
        unknown = [t for t in tiers if t not in TIER_ORDER]
        if unknown or not tiers:
            raise ValueError(f"tiers must be a non-empty subset of {TIER_ORDER}, got {list(tiers)}")
        self.classifier = classifier
        self.tiers = sorted(tiers, key=TIER_ORDER.index)  # cheapest first
        self.quality = quality
        self.offsets = dict(offsets or {})

    def thresholds(self, quality: float | None = None) -> dict[str, float]:
        """The threshold in force per tier: the quality knob plus the tier's offset, capped at 1 (the largest
        tier accepts everything: 0)."""
        q = self.quality if quality is None else quality
        out = {tier: min(1.0, q + self.offsets.get(tier, 0.0)) for tier in self.tiers}
        out[self.tiers[-1]] = 0.0
        return out

    def good_enough(self, proba: np.ndarray) -> dict[str, float]:
        """P(tier answers well) = P(label <= tier) per configured tier."""
        cumulative = np.cumsum(np.asarray(proba, dtype=np.float64))
        return {t: float(cumulative[min(TIER_ORDER.index(t), len(cumulative) - 1)]) for t in self.tiers}

    def decide(self, proba: np.ndarray, quality: float | None = None,
               classifier: Classifier | None = None) -> RoutingDecision:
        """The decision for one row of `predict_proba` (of `classifier`, by default the router's own)."""
        version = (classifier or self.classifier).version
        scores = tuple(float(p) for p in proba)
        thresholds = self.thresholds(quality)
        for tier, p_good in self.good_enough(proba).items():
            if p_good >= thresholds[tier] - 1e-9 or tier == self.tiers[-1]:
                return RoutingDecision(tier, "classifier", p_good, scores, version)
        raise AssertionError("unreachable: the largest tier always accepts")
