"""Router families compared by `python -m classifier.select_router`, as fit-then-predict functions over cached
inputs (embeddings `e`, cheap signals `f`):

- `logistic`: the calibrated logistic head on embeddings ⊕ signals (`classifier.linear_head`);
- `logistic-emb`: the same on the embedding only (the plain MiniLM + logistic-regression baseline);
- `knn`: k nearest neighbours by cosine, shrunk to the prior (`classifier.knn_head`);
- `mlp`: a one-hidden-layer network on embeddings ⊕ signals (scikit-learn);
- `ensemble`: a weighted mean of the logistic head's and the kNN head's probabilities;
- `finetune`: RouteLLM's BERT-style classifier: the encoder fine-tuned end to end (`classifier.finetune`, the
  recipe's `head="finetune"`, without its validation split); needs the texts.

RouteLLM's matrix-factorisation router scores a query as w·((v_strong − v_weak) ⊙ (W e + b)): for a fixed pair
of tiers that is linear in the embedding e, i.e. a rank-restricted logistic regression on e, so `logistic-emb`
is its unrestricted form here (one pair of tiers per data set, no cross-model sharing to exploit).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from classifier.knn_head import KnnHead
from classifier.linear_head import fit_linear_head


@dataclass
class Inputs:
    e: np.ndarray  # (n, dim) unit-length embeddings
    f: np.ndarray  # (n, n_signals)
    y: np.ndarray  # (n,) labels
    w: np.ndarray | None = None  # (n,) sample weights
    n_tiers: int = 2
    texts: list[str] | None = None  # for the families that read text, not embeddings
    cache: dict = field(default_factory=dict)

    @property
    def x(self) -> np.ndarray:
        if "x" not in self.cache:
            self.cache["x"] = np.hstack([self.e.astype(np.float64), self.f.astype(np.float64)])
        return self.cache["x"]


def _w(d: Inputs, rows):
    return None if d.w is None else d.w[rows]


def logistic(d: Inputs, train, test, c: float = 1e-3, emb_only: bool = False) -> np.ndarray:
    x = d.e.astype(np.float64) if emb_only else d.x
    return fit_linear_head(x[train], d.y[train], _w(d, train), d.n_tiers, c, 0).proba(x[test])


def knn(d: Inputs, train, test, k: int = 50, prior_strength: float = 5.0) -> np.ndarray:
    return KnnHead.fit(d.e[train], d.y[train], _w(d, train), d.n_tiers, k, prior_strength).proba(d.e[test])


def mlp(d: Inputs, train, test, hidden: int = 64, alpha: float = 1.0) -> np.ndarray:
    from sklearn.neural_network import MLPClassifier

    mean, scale = d.x[train].mean(axis=0), d.x[train].std(axis=0) + 1e-8
    model = MLPClassifier((hidden,), alpha=alpha, max_iter=200, early_stopping=True, random_state=0)
    model.fit((d.x[train] - mean) / scale, d.y[train])
    out = np.zeros((len(test), d.n_tiers))
    out[:, model.classes_] = model.predict_proba((d.x[test] - mean) / scale)
    return out


def ensemble(d: Inputs, train, test, c: float = 1e-3, k: int = 50, prior_strength: float = 5.0,
             knn_weight: float = 0.5) -> np.ndarray:
    return ((1 - knn_weight) * logistic(d, train, test, c)
            + knn_weight * knn(d, train, test, k, prior_strength))


def finetune(d: Inputs, train, test, seed: int = 0, encoder: str | None = None) -> np.ndarray:
    from classifier.encoder import DEFAULT_ENCODER
    from classifier.finetune import train_finetuned

    assert d.texts is not None, "the finetune family needs Inputs.texts"
    model, _ = train_finetuned(d.texts, d.y, d.w, d.n_tiers, np.asarray(train), None,
                               encoder=encoder or DEFAULT_ENCODER, seed=seed)
    return model.predict_proba([d.texts[i] for i in test])


FAMILIES = {"logistic": logistic, "knn": knn, "mlp": mlp, "ensemble": ensemble, "finetune": finetune}
