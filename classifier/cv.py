"""Cross-validation and bootstrap intervals for routers (pure numpy).

- `near_duplicate_groups`: rows whose embeddings are near-duplicates (cosine ≥ threshold, transitively) share a
  group, so a question and its paraphrase never sit on both sides of a fold.
- `grouped_folds`: groups dealt to k folds at random (per repeat), about equal sizes.
- `cross_val_proba`: out-of-fold probabilities of a fit function, repeated with different fold deals.
- `bootstrap`: a statistic's value and its 5th–95th percentile over query resamples (a 90% interval).
"""
from __future__ import annotations

from typing import Callable

import numpy as np


def near_duplicate_groups(embeddings: np.ndarray, threshold: float = 0.95, block: int = 1024) -> np.ndarray:
    """(n,) group ids; rows of unit-length `embeddings` with cosine ≥ threshold are joined (union-find)."""
    e = np.asarray(embeddings, dtype=np.float32)
    n = len(e)
    parent = np.arange(n)

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for start in range(0, n, block):
        sims = e[start:start + block] @ e.T
        rows, cols = np.nonzero(sims >= threshold)
        for r, c in zip(rows + start, cols):
            if c > r:
                a, b = find(int(r)), find(int(c))
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return np.array([find(i) for i in range(n)], dtype=np.int64)


def grouped_folds(groups: np.ndarray, k: int, seed: int) -> np.ndarray:
    """(n,) fold index in 0..k-1; all rows of a group in one fold; groups shuffled, then dealt largest first
    to the currently smallest fold."""
    groups = np.asarray(groups)
    uniq, inverse, sizes = np.unique(groups, return_inverse=True, return_counts=True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(uniq))
    order = order[np.argsort(-sizes[order], kind="stable")]
    fold_of_group = np.zeros(len(uniq), dtype=np.int64)
    load = np.zeros(k)
    for g in order:
        f = int(np.argmin(load + rng.random(k) * 1e-6))
        fold_of_group[g] = f
        load[f] += sizes[g]
    return fold_of_group[inverse]


FitPredict = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (train rows, test rows) -> test probabilities


def cross_val_proba(fit_predict: FitPredict, n: int, n_classes: int, groups: np.ndarray, k: int = 5,
                    repeats: int = 3, seed: int = 0, eval_rows: np.ndarray | None = None) -> np.ndarray:
    """(repeats, n, n_classes) out-of-fold probabilities. Rows outside `eval_rows` (extra training data) are
    always trained on and never predicted (their entries stay nan)."""
    out = np.full((repeats, n, n_classes), np.nan)
    evaluable = np.zeros(n, dtype=bool)
    evaluable[np.arange(n) if eval_rows is None else eval_rows] = True
    for r in range(repeats):
        folds = grouped_folds(groups, k, seed + 1000 * r)
        for f in range(k):
            test = np.nonzero((folds == f) & evaluable)[0]
            train = np.nonzero(folds != f)[0]
            if len(test):
                out[r, test] = fit_predict(train, test)
    return out


def bootstrap(stat: Callable[[np.ndarray], float], n: int, n_boot: int = 1000, seed: int = 0
              ) -> tuple[float, float, float]:
    """(statistic on all rows, 5th, 95th percentile over `n_boot` resamples of the rows)."""
    rng = np.random.default_rng(seed)
    values = np.array([stat(rng.integers(0, n, n)) for _ in range(n_boot)], dtype=np.float64)
    values = values[~np.isnan(values)]
    lo, hi = (np.percentile(values, 5), np.percentile(values, 95)) if len(values) else (np.nan, np.nan)
    return float(stat(np.arange(n))), float(lo), float(hi)


def fmt(ci: tuple[float, float, float], pct: bool = False) -> str:
    value, lo, hi = ci
    if pct:
        return f"{value:.1%} [{lo:.1%}, {hi:.1%}]"
    return f"{value:.3f} [{lo:.3f}, {hi:.3f}]"
