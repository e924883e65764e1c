"""Routing metrics (pure numpy): RouteLLM's two-tier PGR / CPT / APGR, and the three-tier cost-accuracy sweep.

Two tiers (RouteLLM, arXiv 2406.18665): each query has a score "needs the strong model" (for a classifier,
1 - P(label 0)). Routing the fraction `c` of queries with the highest scores to the strong model gives
quality(c) = mean correctness of the model each query went to (or its mean score: every two-tier function takes
real-valued per-query qualities, e.g. a judge's 1-10 ratings, as well as 0/1 correctness), and

    PGR(c)  = (quality(c) - quality(weak only)) / (quality(strong only) - quality(weak only))
    CPT(x)  = the smallest c (a multiple of 1/n) with PGR(c) >= x
    APGR    = mean PGR(c) at c = 0.1, 0.2, ..., 1.0

`c * n` queries go to the strong model, rounded to the nearest integer; equal scores keep their input order
(a stable sort), so results are deterministic.

Several tiers (AIO's router rule, `aio.routing.Router.decide`): with per-tier probabilities P(label = t), a
query goes to the cheapest tier t with P(label <= t) >= q; the last tier always accepts.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

APGR_POINTS: tuple[float, ...] = tuple(round(0.1 * k, 1) for k in range(1, 11))


def _as_1d(name: str, values, n: int | None = None) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if n is not None and len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} entries, expected {n}")
    return arr


def _two_tier_inputs(scores, weak_correct, strong_correct) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scores = _as_1d("scores", scores)
    weak = _as_1d("weak_correct", weak_correct, len(scores))
    strong = _as_1d("strong_correct", strong_correct, len(scores))
    if len(scores) == 0:
        raise ValueError("no queries")
    return scores, weak, strong


def strong_order(scores) -> np.ndarray:
    """Query indices from the highest score to the lowest (ties: input order)."""
    scores = _as_1d("scores", scores)
    return np.argsort(-scores, kind="stable")


def quality_at(scores, weak_correct, strong_correct, fraction: float) -> float:
    """Mean correctness when the `fraction` of queries with the highest scores go to the strong model."""
    scores, weak, strong = _two_tier_inputs(scores, weak_correct, strong_correct)
    n = len(scores)
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    k = int(round(fraction * n))
    chosen = weak.copy()
    top = strong_order(scores)[:k]
    chosen[top] = strong[top]
    return float(chosen.mean())


def pgr_curve(scores, weak_correct, strong_correct) -> tuple[np.ndarray, np.ndarray]:
    """(fractions k/n for k = 0..n, PGR at each): the whole curve in one pass."""
    scores, weak, strong = _two_tier_inputs(scores, weak_correct, strong_correct)
    n = len(scores)
    gap = strong.mean() - weak.mean()
    if gap <= 0:
        raise ValueError(f"PGR is undefined: the strong model ({strong.mean():.4f}) is not better than the weak "
                         f"one ({weak.mean():.4f})")
    gain = (strong - weak)[strong_order(scores)]
    quality = weak.mean() + np.concatenate([[0.0], np.cumsum(gain)]) / n
    return np.arange(n + 1) / n, (quality - weak.mean()) / gap


def pgr(scores, weak_correct, strong_correct, fraction: float) -> float:
    fractions, curve = pgr_curve(scores, weak_correct, strong_correct)
    return float(curve[int(round(fraction * (len(fractions) - 1)))])


def cpt(scores, weak_correct, strong_correct, target: float = 0.5) -> float:
    """Call-performance threshold: the smallest fraction of strong calls with PGR >= target."""
    fractions, curve = pgr_curve(scores, weak_correct, strong_correct)
    hits = np.nonzero(curve >= target - 1e-12)[0]
    return float(fractions[hits[0]]) if len(hits) else float("nan")


def apgr(scores, weak_correct, strong_correct, points: Sequence[float] = APGR_POINTS) -> float:
    """Average PGR at the given strong-call fractions (RouteLLM: 0.1 .. 1.0)."""
    return float(np.mean([pgr(scores, weak_correct, strong_correct, c) for c in points]))


def strong_scores(proba) -> np.ndarray:
    """A classifier's "needs the strong model" score: 1 - P(label 0)."""
    proba = np.asarray(proba, dtype=np.float64)
    return 1.0 - proba[:, 0]


# ----------------------------------------------------------------------------------------- several tiers


def route_tiers(proba, quality: float) -> np.ndarray:
    """Per row, the cheapest tier t with P(label <= t) >= quality (the last tier always accepts)."""
    proba = np.asarray(proba, dtype=np.float64)
    if proba.ndim != 2 or proba.shape[1] < 1:
        raise ValueError(f"proba must be (n, n_tiers), got shape {proba.shape}")
    cumulative = np.cumsum(proba, axis=1)
    ok = cumulative >= min(1.0, quality) - 1e-9
    ok[:, -1] = True
    return ok.argmax(axis=1)


def routed_outcome(tiers, correct, costs) -> tuple[float, float]:
    """(accuracy, mean cost per query) of routing each query i to tier tiers[i]; correct is (n, n_tiers)."""
    tiers = np.asarray(tiers, dtype=np.int64)
    correct = np.asarray(correct, dtype=np.float64)
    costs = np.asarray(costs, dtype=np.float64)
    if correct.shape != (len(tiers), len(costs)):
        raise ValueError(f"correct must be ({len(tiers)}, {len(costs)}), got {correct.shape}")
    rows = np.arange(len(tiers))
    return float(correct[rows, tiers].mean()), float(costs[tiers].mean())


def cost_accuracy_sweep(proba, correct, costs, qualities: Sequence[float]) -> list[dict[str, float]]:
    """For each quality knob q: accuracy, cost, both as fractions of always-the-last-tier, and tier shares."""
    proba = np.asarray(proba, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    costs = np.asarray(costs, dtype=np.float64)
    top_acc, top_cost = float(correct[:, -1].mean()), float(costs[-1])
    rows = []
    for q in qualities:
        tiers = route_tiers(proba, q)
        acc, cost = routed_outcome(tiers, correct, costs)
        row = {"quality": float(q), "accuracy": acc, "cost": cost,
               "accuracy_frac": acc / top_acc if top_acc > 0 else float("nan"), "cost_frac": cost / top_cost}
        for t in range(len(costs)):
            row[f"share_{t}"] = float(np.mean(tiers == t))
        rows.append(row)
    return rows


def best_operating_point(rows: Sequence[dict[str, float]], min_accuracy_frac: float = 0.98) -> dict | None:
    """The cheapest sweep row whose accuracy reaches `min_accuracy_frac` of always-large (None if none does)."""
    ok = [r for r in rows if r["accuracy_frac"] >= min_accuracy_frac - 1e-12]
    return min(ok, key=lambda r: (r["cost_frac"], -r["accuracy_frac"])) if ok else None
