"""Routing policies scored on per-tier answers: every evaluation task was answered by every tier (greedy), so a
policy that picks tier t for task i scores `correct[i, t]` at `cost[i, t]`. `auto` at a quality value picks with
the product's own `Router.decide` on the classifier's logged per-tier scores; the cascade escalates, as
aio.chat.cascade does, while the answer's confidence is below the threshold, paying for every answer it made.

Figures carry 90% bootstrap intervals over tasks (the same resampled tasks for every policy)."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from aio.routing.router import Router

TIERS = ("small", "medium", "large")
QUALITY_GRID = tuple(round(q, 3) for q in np.linspace(0.0, 1.0, 101))
TARGET = 0.98  # of always-large accuracy


@dataclass
class TierAnswers:
    """Per task (rows) and tier (columns: small, medium, large)."""
    correct: np.ndarray  # bool
    cost: np.ndarray  # USD, as logged
    confidence: np.ndarray  # the answer's confidence (mean chosen-token logprob); NaN when unknown

    def __post_init__(self) -> None:
        assert self.correct.shape == self.cost.shape == self.confidence.shape and self.correct.shape[1] == 3

    def __len__(self) -> int:
        return self.correct.shape[0]

    def take(self, rows: np.ndarray) -> TierAnswers:
        return TierAnswers(self.correct[rows], self.cost[rows], self.confidence[rows])


@dataclass
class Choice:
    """A policy's outcome per task: the tier whose answer is served and what all its attempts cost."""
    tier: np.ndarray  # int
    cost: np.ndarray

    def accuracy(self, answers: TierAnswers) -> float:
        return float(answers.correct[np.arange(len(self.tier)), self.tier].mean())

    def cost_fraction(self, answers: TierAnswers) -> float:
        return float(self.cost.sum() / answers.cost[:, 2].sum())


def fixed(answers: TierAnswers, tier: int) -> Choice:
    return Choice(np.full(len(answers), tier), answers.cost[:, tier].copy())


def oracle(answers: TierAnswers) -> Choice:
    """The cheapest tier that is right; the cheapest of all when none is."""
    right = answers.correct
    tier = np.where(right.any(axis=1), right.argmax(axis=1), 0)
    return Choice(tier, answers.cost[np.arange(len(tier)), tier])


def routed_tiers(scores: np.ndarray, quality: float) -> np.ndarray:
    """The tier `auto` picks per task at `quality`, offsets zero (the monitor's moves are not the router's)."""
    router = Router(SimpleNamespace(version="logged"), TIERS, quality)
    return np.array([TIERS.index(router.decide(row, quality).tier) for row in scores])


def auto(answers: TierAnswers, scores: np.ndarray, quality: float) -> Choice:
    tier = routed_tiers(scores, quality)
    return Choice(tier, answers.cost[np.arange(len(tier)), tier])


def cascade(answers: TierAnswers, start: np.ndarray, threshold: float) -> Choice:
    """From each task's routed tier up, while the answer's confidence is known and below `threshold`; every
    answer made is paid for."""
    rows = np.arange(len(start))
    tier = start.copy()
    cost = answers.cost[rows, tier].copy()
    while True:
        confidence = answers.confidence[rows, tier]
        escalate = (tier < 2) & ~np.isnan(confidence) & (confidence < threshold)
        if not escalate.any():
            return Choice(tier, cost)
        tier = np.where(escalate, tier + 1, tier)
        cost = cost + np.where(escalate, answers.cost[rows, tier], 0.0)
