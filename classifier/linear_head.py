"""The sklearn head: standardised inputs into a multinomial logistic regression, C chosen by cross-validated log
loss, evaluated in numpy (stored as arrays, no pickle)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from classifier.calibration import log_loss, softmax

C_GRID = (1e-4, 3e-4, 1e-3, 3e-3)  # ~400 standardised inputs: strong L2 wins; 1e-2 and 3e-2 never won in CV


class LinearHead:
    """Standardise → multinomial logits → softmax(logits / T), in numpy; columns of absent classes get 0."""

    def __init__(self, mean: np.ndarray, scale: np.ndarray, coef: np.ndarray, intercept: np.ndarray,
                 classes: np.ndarray, n_tiers: int, temperature: float = 1.0) -> None:
        self.mean, self.scale = mean.astype(np.float64), scale.astype(np.float64)
        self.coef, self.intercept = coef.astype(np.float64), intercept.astype(np.float64)
        self.classes, self.n_tiers, self.temperature = classes.astype(np.int64), int(n_tiers), float(temperature)

    def logits(self, x: np.ndarray) -> np.ndarray:
        z = ((x - self.mean) / self.scale) @ self.coef.T + self.intercept
        if z.shape[1] == 1:  # scikit-learn's binary form: one logit for the second class
            z = np.hstack([np.zeros_like(z), z])
        return z

    def proba(self, x: np.ndarray) -> np.ndarray:
        p = softmax(self.logits(x) / self.temperature)
        out = np.zeros((len(x), self.n_tiers))
        out[:, self.classes] = p
        return out

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        return {f"{prefix}mean": self.mean, f"{prefix}scale": self.scale, f"{prefix}coef": self.coef,
                f"{prefix}intercept": self.intercept, f"{prefix}classes": self.classes,
                f"{prefix}temperature": np.array(self.temperature)}

    @classmethod
    def from_arrays(cls, arrays: Any, n_tiers: int, prefix: str = "") -> "LinearHead":
        return cls(arrays[f"{prefix}mean"], arrays[f"{prefix}scale"], arrays[f"{prefix}coef"],
                   arrays[f"{prefix}intercept"], arrays[f"{prefix}classes"], n_tiers,
                   float(arrays[f"{prefix}temperature"]))


def fit_linear_head(x: np.ndarray, y: np.ndarray, w: np.ndarray | None, n_tiers: int, c: float, seed: int
                    ) -> LinearHead:
    """L-BFGS on one BLAS thread: each step is two skinny products over x ((n, d) by (d, classes)), bound by memory,
    where OpenBLAS's threads spin: one fit on the seed data (9,583 x 781) on a busy 2-core machine took 20.7 s of
    CPU with two threads and 1.4 s with one, for the same coefficients (to 1e-13)."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-8] = 1.0
    lr = LogisticRegression(C=c, max_iter=2000, tol=1e-4, random_state=seed)
    with threadpool_limits(limits=1, user_api="blas"):
        lr.fit((x - mean) / scale, y, sample_weight=w)
    return LinearHead(mean, scale, lr.coef_, lr.intercept_, lr.classes_, n_tiers)


def _folds(y: np.ndarray, k: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    fold = np.zeros(len(y), dtype=np.int64)
    for c in np.unique(y):
        idx = rng.permutation(np.nonzero(y == c)[0])
        fold[idx] = np.arange(len(idx)) % k
    return [np.nonzero(fold == f)[0] for f in range(k)]


def choose_c(x: np.ndarray, y: np.ndarray, w: np.ndarray | None, n_tiers: int, seed: int,
             grid: Sequence[float] = C_GRID, k: int = 3) -> tuple[float, dict[str, float]]:
    """C with the lowest k-fold cross-validated log loss on the training part."""
    folds = _folds(y, k, seed)
    scores = {}
    for c in grid:
        losses = []
        for f in folds:
            tr = np.setdiff1d(np.arange(len(y)), f)
            if len(np.unique(y[tr])) < 2:
                continue
            head = fit_linear_head(x[tr], y[tr], None if w is None else w[tr], n_tiers, c, seed)
            losses.append(log_loss(np.clip(head.proba(x[f]), 1e-12, 1), y[f], None if w is None else w[f]))
        scores[c] = float(np.mean(losses)) if losses else float("inf")
    best = min(grid, key=lambda c: (scores[c], -c))
    return float(best), {str(c): round(v, 5) for c, v in scores.items()}
