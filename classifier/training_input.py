"""Training input for the learned classifier: validation of texts, labels and weights, and the stratified
train/validation split."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from classifier.errors import ClassifierError

MIN_EXAMPLES = 20
MIN_PER_CLASS = 2


def validate_training_input(texts: Any, labels: Any, n_tiers: Any, sample_weight: Any = None
                            ) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    if isinstance(n_tiers, bool) or not isinstance(n_tiers, (int, np.integer)) or n_tiers < 2:
        raise ClassifierError(f"n_tiers must be an integer >= 2, got {n_tiers!r}")
    if isinstance(texts, str) or not isinstance(texts, Sequence) and not isinstance(texts, np.ndarray):
        raise ClassifierError(f"texts must be a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise ClassifierError(f"texts must all be str: item {bad[0]} is {type(texts[bad[0]]).__name__} "
                              f"({len(bad)} non-str items)")
    try:
        raw = list(labels)
    except TypeError:
        raise ClassifierError(f"labels must be a list of ints, got {type(labels).__name__}") from None
    if len(raw) != len(texts):
        raise ClassifierError(f"texts and labels differ in length: {len(texts)} texts, {len(raw)} labels")
    y = []
    for i, v in enumerate(raw):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) and not (
                isinstance(v, (float, np.floating)) and float(v).is_integer()):
            raise ClassifierError(f"labels must be integers in [0, {n_tiers}): label {i} is {v!r}")
        y.append(int(v))
    y = np.asarray(y, dtype=np.int64)
    out = np.nonzero((y < 0) | (y >= n_tiers))[0]
    if len(out):
        raise ClassifierError(f"labels must be in [0, {n_tiers}) for n_tiers={n_tiers}: label {out[0]} is "
                              f"{y[out[0]]} ({len(out)} out of range)")
    if len(texts) < MIN_EXAMPLES:
        raise ClassifierError(f"too few training examples: {len(texts)} (need at least {MIN_EXAMPLES})")
    counts = np.bincount(y, minlength=n_tiers)
    present = np.nonzero(counts)[0]
    if len(present) < 2:
        raise ClassifierError(f"labels hold a single class ({int(present[0])}): need at least two tiers present")
    thin = [int(c) for c in present if counts[c] < MIN_PER_CLASS]
    if thin:
        raise ClassifierError(f"class(es) {thin} have fewer than {MIN_PER_CLASS} examples (counts per tier: "
                              f"{counts.tolist()})")
    w = None
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=np.float64).reshape(-1)
        if len(w) != len(texts):
            raise ClassifierError(f"sample_weight has {len(w)} entries for {len(texts)} texts")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ClassifierError("sample_weight must be finite, non-negative and not all zero")
    return texts, y, w


def stratified_split(y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified (train, validation) indices; every present class keeps >= 1 training example."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.nonzero(y == c)[0])
        k = int(round(fraction * len(idx)))
        k = min(k, len(idx) - 1)
        val.extend(idx[:k])
        train.extend(idx[k:])
    return np.sort(np.asarray(train, dtype=np.int64)), np.sort(np.asarray(val, dtype=np.int64))
