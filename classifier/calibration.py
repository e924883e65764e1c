"""Calibration maths shared by the learned heads (`classifier.learned`, `classifier.finetune`): softmax, log loss,
temperature scaling and the validation metrics a candidate is judged by."""
from __future__ import annotations

import math

import numpy as np


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def log_loss(proba: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> float:
    p = np.clip(proba[np.arange(len(y)), y], 1e-12, 1.0)
    return float(np.average(-np.log(p), weights=w))


def fit_temperature(logits: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> float:
    """The temperature T > 0 minimising the log loss of softmax(logits / T) (golden-section on log T)."""
    def loss(log_t: float) -> float:
        return log_loss(softmax(logits / math.exp(log_t)), y, w)

    lo, hi = math.log(0.05), math.log(20.0)
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(60):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = loss(b)
    return float(math.exp((lo + hi) / 2))


def calibration_error(p: np.ndarray, event: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error of probabilities `p` for a yes/no `event`: over `bins` equal-width bins of p,
    the mean |mean p − observed frequency|, weighted by the bin's share of rows."""
    p, event = np.asarray(p, dtype=np.float64), np.asarray(event, dtype=np.float64)
    if not len(p):
        return float("nan")
    which = np.minimum((p * bins).astype(np.int64), bins - 1)
    # a bin's rows × |mean p − frequency| = |sum of p − count of events| over the bin
    gap = np.bincount(which, weights=p, minlength=bins) - np.bincount(which, weights=event, minlength=bins)
    return float(np.abs(gap).sum() / len(p))


def val_metrics(proba: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> dict[str, float]:
    m = {"val_log_loss": round(log_loss(np.clip(proba, 1e-12, 1), y, w), 5),
         "val_accuracy": round(float(np.average(proba.argmax(axis=1) == y, weights=w)), 5)}
    if proba.shape[1] >= 2 and len(np.unique(y > 0)) == 2:
        from sklearn.metrics import roc_auc_score

        m["val_auc_not_small"] = round(float(roc_auc_score(y > 0, 1 - proba[:, 0], sample_weight=w)), 5)
    return m
