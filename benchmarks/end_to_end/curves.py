"""Cost-accuracy curves over the quality knob, the cost at a target accuracy read off them, bootstrap intervals,
and the cascade threshold fitted on the train part."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from benchmarks.end_to_end.policies import QUALITY_GRID, Choice, TierAnswers


@dataclass(frozen=True)
class CurvePoint:
    quality: float
    accuracy: float
    cost_fraction: float


def curve(answers: TierAnswers, choose: Callable[[float], Choice]) -> list[CurvePoint]:
    points = []
    for quality in QUALITY_GRID:
        choice = choose(quality)
        points.append(CurvePoint(quality, choice.accuracy(answers), choice.cost_fraction(answers)))
    return points


def cost_at(points: list[CurvePoint], accuracy: float) -> float:
    """The lowest cost (fraction of always-large) at which the curve reaches `accuracy`; NaN if it never does."""
    costs = [p.cost_fraction for p in points if p.accuracy >= accuracy - 1e-12]
    return min(costs) if costs else float("nan")


def intervals(n: int, statistic: Callable[[np.ndarray], dict[str, float]], resamples: int = 1000,
              seed: int = 0, level: float = 0.90) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap over the n tasks: each figure's (low, high) at `level`; NaNs (a target never reached
    in a resample) are counted as +inf, so an interval may be open above."""
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {}
    for _ in range(resamples):
        for name, value in statistic(rng.integers(0, n, n)).items():
            draws.setdefault(name, []).append(np.inf if np.isnan(value) else value)
    tail = (1 - level) / 2 * 100
    return {name: (float(np.percentile(v, tail, method="inverted_cdf")),
                   float(np.percentile(v, 100 - tail, method="inverted_cdf"))) for name, v in draws.items()}


def fit_threshold(confidence: np.ndarray, wrong: np.ndarray) -> float:
    """The confidence below which an answer is called wrong that maximises Youden's J (true-positive rate minus
    false-positive rate) on these answers: fitted on the train part only. Unknown confidences are left out."""
    known = ~np.isnan(confidence)
    confidence, wrong = confidence[known], wrong[known].astype(bool)
    if not wrong.any() or wrong.all():
        raise ValueError("the answers are all right or all wrong: no threshold separates them")
    values = np.unique(confidence)
    candidates = np.concatenate([[values[0] - 1e-6], (values[1:] + values[:-1]) / 2, [values[-1] + 1e-6]])
    best, best_j = candidates[0], -np.inf
    for threshold in candidates:
        flagged = confidence < threshold
        j = flagged[wrong].mean() - flagged[~wrong].mean()
        if j > best_j:
            best, best_j = threshold, j
    return float(best)
