"""Routing figures from out-of-fold probabilities, each with a bootstrap interval over queries.

`oof` is (repeats, n, n_tiers) from `classifier.cv.cross_val_proba`: a statistic is computed per repeat and
averaged over repeats, and the bootstrap resamples queries (the same resample for every repeat).
"""
from __future__ import annotations

import numpy as np

from classifier import routing_metrics as rm
from classifier.cv import bootstrap, fmt

PGR_SHARES = (0.2, 0.3, 0.5)
QUALITIES = tuple(np.round(np.linspace(0.0, 1.0, 201), 3))


def log_loss_of(oof: np.ndarray, labels: np.ndarray, idx: np.ndarray | None = None) -> float:
    idx = np.arange(oof.shape[1]) if idx is None else idx
    p = np.clip(oof[:, idx, :][:, np.arange(len(idx)), labels[idx]], 1e-12, 1.0)
    return float(-np.log(p).mean())


def two_tier(oof: np.ndarray, weak: np.ndarray, strong: np.ndarray, n_boot: int = 1000, seed: int = 0) -> dict:
    """CPT(50%), APGR and PGR at 20/30/50% strong calls; score = 1 − P(small)."""
    scores = 1.0 - oof[:, :, 0]

    def stat(metric):
        def per_idx(idx):
            vals = []
            for r in range(scores.shape[0]):
                w, s = weak[idx], strong[idx]
                if s.mean() <= w.mean():
                    return np.nan
                vals.append(metric(scores[r, idx], w, s))
            return float(np.mean(vals))
        return bootstrap(per_idx, len(weak), n_boot, seed)

    out = {"cpt50": stat(lambda sc, w, s: rm.cpt(sc, w, s, 0.5)), "apgr": stat(rm.apgr)}
    for c in PGR_SHARES:
        out[f"pgr{int(c * 100)}"] = stat(lambda sc, w, s, c=c: rm.pgr(sc, w, s, c))
    return out


def cost_at_accuracy(proba: np.ndarray, correct: np.ndarray, costs, target: float = 0.98) -> float:
    """The cheapest cost (fraction of always-large) at which the router rule reaches `target` of always-large
    accuracy, over a sweep of the quality knob."""
    rows = rm.cost_accuracy_sweep(proba, correct, costs, QUALITIES)
    best = rm.best_operating_point(rows, target)
    return best["cost_frac"] if best is not None else 1.0


def accuracy_at_cost(proba: np.ndarray, correct: np.ndarray, costs, budget: float = 0.75) -> float:
    rows = rm.cost_accuracy_sweep(proba, correct, costs, QUALITIES)
    return max(r["accuracy_frac"] for r in rows if r["cost_frac"] <= budget + 1e-12)


def three_tier(oof: np.ndarray, correct: np.ndarray, costs, n_boot: int = 300, seed: int = 0) -> dict:
    """Cost (of always-large) needed for 98% of always-large accuracy, and accuracy within 75% of its cost."""
    def stat(fn):
        return bootstrap(lambda idx: float(np.mean([fn(oof[r, idx], correct[idx], costs)
                                                    for r in range(oof.shape[0])])), len(correct), n_boot, seed)

    return {"cost_at_98": stat(cost_at_accuracy), "acc_at_75": stat(accuracy_at_cost)}


def calibration(oof: np.ndarray, labels: np.ndarray, n_boot: int = 300, seed: int = 0) -> dict:
    """Expected calibration error of each P(tier t is good enough) = P(label ≤ t), for every tier but the last
    (which always is), against whether the cheapest good tier was ≤ t; keys `ece_le_<t>`."""
    from classifier.calibration import calibration_error

    cumulative = np.cumsum(oof, axis=2)
    labels = np.asarray(labels)
    out = {}
    for t in range(oof.shape[2] - 1):
        out[f"ece_le_{t}"] = bootstrap(lambda idx, t=t: float(np.mean(
            [calibration_error(cumulative[r, idx, t], labels[idx] <= t) for r in range(oof.shape[0])])),
            len(labels), n_boot, seed)
    return out


def format_calibration(report: dict, tiers) -> str:
    return "calibration error (ECE, 10 bins) of P(tier is good enough): " + ", ".join(
        f"{tiers[t]} {fmt(report[f'ece_le_{t}'])}" for t in range(len(tiers) - 1))


def headline(oof: np.ndarray, correct: np.ndarray, costs, n_boot: int = 300) -> str:
    """One line for a study's row: APGR and CPT(50%) with two tiers, the cost for 98% with more."""
    if correct.shape[1] == 2:
        r = two_tier(oof, correct[:, 0], correct[:, 1], n_boot)
        return f"APGR {fmt(r['apgr'])}  CPT(50%) {fmt(r['cpt50'], True)}"
    return f"cost for 98% {fmt(three_tier(oof, correct, costs, n_boot)['cost_at_98'], True)}"


def format_two_tier(report: dict) -> str:
    return (f"CPT(50%) {fmt(report['cpt50'], True)}  APGR {fmt(report['apgr'])}  PGR@20/30/50% "
            + " / ".join(fmt(report[f"pgr{int(c * 100)}"]) for c in PGR_SHARES))


def format_three_tier(report: dict) -> str:
    return (f"cost for 98% of always-large accuracy {fmt(report['cost_at_98'], True)}  "
            f"accuracy within 75% of the cost {fmt(report['acc_at_75'], True)}")
