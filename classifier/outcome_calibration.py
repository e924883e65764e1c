"""Per-tier probabilities fitted to a deployment's own outcomes: P(tier t answers right | the prompt), from the
classifier's scores.

The classifier ranks prompts well but its probabilities are its training data's (other models' outcomes). Here
each tier gets a logistic model over the classifier's cumulative scores, logit P(label <= t) for every tier but
the last, fitted on outcomes of the tiers actually served (probe results, the quality monitor's verdicts): the
ranking stays the classifier's, the probabilities become the deployment's. The largest tier gets one too, so
relative accuracy (against always-largest) can be estimated per prompt.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

LOGIT_CLIP = 8.0  # |logit| cap: a score of 0 or 1 must not become infinite
DEFAULT_C = 1.0


def score_features(proba: np.ndarray) -> np.ndarray:
    """[logit P(label <= t) for each tier but the last] per row of the classifier's per-tier probabilities."""
    proba = np.atleast_2d(np.asarray(proba, dtype=np.float64))
    cumulative = np.cumsum(proba, axis=1)[:, :-1]
    p = np.clip(cumulative, 1e-6, 1 - 1e-6)
    return np.clip(np.log(p / (1 - p)), -LOGIT_CLIP, LOGIT_CLIP)


@dataclass
class TierCalibration:
    """Per tier (rows of `weights`): intercept, then one weight per score feature."""
    tiers: tuple[str, ...]
    weights: np.ndarray  # (n_tiers, 1 + n_features)
    num_outcomes: tuple[int, ...]  # outcomes each tier was fitted on

    def predict(self, proba: np.ndarray) -> np.ndarray:
        """P(tier answers right) per row and tier: (n, n_tiers)."""
        x = score_features(proba)
        z = self.weights[:, 0][None, :] + x @ self.weights[:, 1:].T
        return 1.0 / (1.0 + np.exp(-z))

    def to_dict(self) -> dict[str, Any]:
        return {"tiers": list(self.tiers), "weights": self.weights.tolist(), "num_outcomes": list(self.num_outcomes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TierCalibration:
        return cls(tuple(data["tiers"]), np.asarray(data["weights"], dtype=np.float64),
                   tuple(int(n) for n in data["num_outcomes"]))


def fit_tier_calibration(proba: np.ndarray, correct: np.ndarray, tiers: tuple[str, ...], c: float = DEFAULT_C,
                         sample_weight: np.ndarray | None = None) -> TierCalibration:
    """`correct`: (n, n_tiers) 0/1, NaN where a tier has no outcome for that prompt. A tier whose outcomes are all
    alike gets a constant (Laplace-smoothed) probability."""
    from sklearn.linear_model import LogisticRegression

    x = score_features(proba)
    correct = np.asarray(correct, dtype=np.float64)
    weights = np.zeros((len(tiers), 1 + x.shape[1]))
    counts = []
    for t in range(len(tiers)):
        seen = ~np.isnan(correct[:, t])
        y = correct[seen, t].astype(int)
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)[seen]
        counts.append(int(seen.sum()))
        if len(np.unique(y)) < 2:
            rate = (y.sum() + 1) / (len(y) + 2)
            weights[t, 0] = np.log(rate / (1 - rate))
            continue
        model = LogisticRegression(C=c, max_iter=1000).fit(x[seen], y, sample_weight=w)
        weights[t, 0], weights[t, 1:] = model.intercept_[0], model.coef_[0]
    return TierCalibration(tuple(tiers), weights, tuple(counts))
