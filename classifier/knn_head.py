"""k-nearest-neighbour head over the sentence embeddings: the label mix of the k most similar training texts
(cosine), shrunk toward the training prior so a small k stays calibrated. Stored as arrays (float16 embeddings),
evaluated in numpy."""
from __future__ import annotations

from typing import Any

import numpy as np


class KnnHead:
    def __init__(self, embeddings: np.ndarray, labels: np.ndarray, weights: np.ndarray, n_tiers: int, k: int,
                 prior_strength: float) -> None:
        self.embeddings = np.asarray(embeddings, dtype=np.float16)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.weights = np.asarray(weights, dtype=np.float32)
        self.n_tiers, self.k, self.prior_strength = int(n_tiers), int(k), float(prior_strength)
        onehot = np.zeros((len(self.labels), self.n_tiers), dtype=np.float32)
        onehot[np.arange(len(self.labels)), self.labels] = self.weights
        self._onehot = onehot
        self._matrix = self.embeddings.astype(np.float32)
        prior = onehot.sum(axis=0) + 1e-3
        self.prior = prior / prior.sum()

    @classmethod
    def fit(cls, embeddings: np.ndarray, labels: np.ndarray, weights: np.ndarray | None, n_tiers: int, k: int = 50,
            prior_strength: float = 5.0) -> "KnnHead":
        w = np.ones(len(labels)) if weights is None else np.asarray(weights)
        return cls(embeddings, labels, w, n_tiers, k, prior_strength)

    def proba(self, embeddings: np.ndarray, exclude_self: bool = False) -> np.ndarray:
        """(m, n_tiers). `exclude_self` drops each row's best match (scoring the training rows themselves)."""
        e = np.asarray(embeddings, dtype=np.float32)
        k = min(self.k + int(exclude_self), len(self.labels))
        out = np.zeros((len(e), self.n_tiers))
        for start in range(0, len(e), 512):
            sims = e[start:start + 512] @ self._matrix.T
            top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
            if exclude_self:
                best = np.take_along_axis(sims, top, 1).argmax(axis=1)
                top = np.array([np.delete(row, b) for row, b in zip(top, best)])
            counts = self._onehot[top].sum(axis=1)
            out[start:start + 512] = (counts + self.prior_strength * self.prior) / (
                counts.sum(axis=1, keepdims=True) + self.prior_strength)
        return out

    def arrays(self, prefix: str = "knn_") -> dict[str, np.ndarray]:
        return {f"{prefix}embeddings": self.embeddings, f"{prefix}labels": self.labels.astype(np.int8),
                f"{prefix}weights": self.weights.astype(np.float16),
                f"{prefix}params": np.array([self.k, self.prior_strength], dtype=np.float64)}

    @classmethod
    def from_arrays(cls, arrays: Any, n_tiers: int, prefix: str = "knn_") -> "KnnHead":
        k, strength = arrays[f"{prefix}params"].tolist()
        return cls(arrays[f"{prefix}embeddings"], arrays[f"{prefix}labels"], arrays[f"{prefix}weights"].astype(
            np.float32), n_tiers, int(k), float(strength))
