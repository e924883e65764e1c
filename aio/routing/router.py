"""Routing: the classifier's per-tier probabilities pick the cheapest tier that will do, by one of two rules.

- The quality target (once the tiers are measured: `fit`, an `outcome_fit.RoutingFit`): the classifier's scores
  become P(tier right) for the tiers actually served, and a prompt goes to the tier that keeps the target share
  of always-largest's accuracy at the least estimated cost (`quality_target`). The quality monitor's `offsets`
  lower a tier's estimated accuracy.
- The quality knob (the expert override, and the rule before any measurement): the classifier's label for a text
  is the index of the cheapest tier that answers it well (0 = small), so P(tier t answers well) = P(label <= t);
  the router picks the cheapest configured tier whose probability reaches the threshold `quality` (0 = always the
  cheapest, 1 = always the largest), raised per tier by `offsets`. A knob set in the settings, by
  `aio router calibrate` or per request (`aio_quality`) wins over the target (`knob_override`).

The server scores texts through `aio.routing.batcher` and decides with `Router.decide`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from aio.routing.outcome_fit import RoutingFit
from aio.routing.reasons import Reason
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
                 offsets: dict[str, float] | None = None, fit: RoutingFit | None = None,
                 knob_override: bool = False) -> None:
        unknown = [t for t in tiers if t not in TIER_ORDER]
        if unknown or not tiers:
            raise ValueError(f"tiers must be a non-empty subset of {TIER_ORDER}, got {list(tiers)}")
        self.classifier = classifier
        self.tiers = sorted(tiers, key=TIER_ORDER.index)  # cheapest first
        self.quality = quality
        self.offsets = dict(offsets or {})
        self.fit = fit
        self.knob_override = knob_override

    def target_fit(self, classifier: Classifier | None = None) -> RoutingFit | None:
        """The fit the quality target routes with, when it applies: made for this classifier and these tiers, and no
        knob overrides it."""
        fit = self.fit
        version = (classifier or self.classifier).version
        if fit is None or self.knob_override or fit.classifier_version != version or list(fit.tiers) != self.tiers:
            return None
        return fit

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

    def decide(self, proba: np.ndarray, quality: float | None = None, classifier: Classifier | None = None,
               verify: bool = False) -> RoutingDecision:
        """The decision for one row of `predict_proba` (of `classifier`, by default the router's own); `verify`:
        the answer will be judged (the cascade), so the first tier is the route-then-verify rule's."""
        version = (classifier or self.classifier).version
        scores = tuple(float(p) for p in proba)
        fit = self.target_fit(classifier) if quality is None else None
        if fit is not None:
            offsets = np.array([self.offsets.get(t, 0.0) for t in self.tiers])
            p_right = fit.p_right(np.asarray(proba))[0]
            rule = fit.escalation.rule if verify and fit.escalation is not None else fit.rule
            chosen = int(rule.choose((p_right - offsets)[None, :])[0])
            return RoutingDecision(self.tiers[chosen], Reason.CLASSIFIER, float(p_right[chosen]), scores, version)
        thresholds = self.thresholds(quality)
        for tier, p_good in self.good_enough(proba).items():
            if p_good >= thresholds[tier] - 1e-9 or tier == self.tiers[-1]:
                return RoutingDecision(tier, Reason.CLASSIFIER, p_good, scores, version)
        raise AssertionError("unreachable: the largest tier always accepts")
