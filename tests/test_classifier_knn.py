"""The kNN head (`classifier.knn_head`) and its optional mix into the learned classifier (`knn_weight`)."""
from __future__ import annotations

import numpy as np
import pytest

from classifier.errors import ClassifierError
from classifier.knn_head import KnnHead


def clusters(n_per: int = 40, dim: int = 16, seed: int = 0):
    rng = np.random.default_rng(seed)
    centers = np.eye(dim)[:3]
    e = np.vstack([c + 0.1 * rng.normal(size=(n_per, dim)) for c in centers])
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    return e.astype(np.float32), np.repeat([0, 1, 2], n_per)


def test_knn_head_votes_by_neighbours_and_shrinks_to_the_prior():
    e, y = clusters()
    head = KnnHead.fit(e, y, None, 3, k=10, prior_strength=5.0)
    p = head.proba(e[[0, 45, 90]])
    assert np.allclose(p.sum(axis=1), 1.0)
    assert (p.argmax(axis=1) == [0, 1, 2]).all()
    assert p.max() == pytest.approx((10 + 5 / 3) / 15, abs=0.02)  # never 1: shrunk toward the prior
    assert np.allclose(head.proba(e[:5], exclude_self=True).sum(axis=1), 1.0)
    again = KnnHead.from_arrays(head.arrays(), 3)
    assert np.allclose(again.proba(e[:20]), head.proba(e[:20]), atol=1e-3)  # float16 storage


def test_classifier_with_knn_mix_trains_saves_and_loads(tmp_path, monkeypatch):
    from classifier.learned import ComplexityClassifier

    e, y = clusters()
    texts = [f"text number {i} about {'abc'[label]}" for i, label in enumerate(y)]
    clf = ComplexityClassifier.train(texts, y.tolist(), n_tiers=3, head="sklearn", embeddings=e, knn_weight=0.5,
                                     knn_k=10)
    assert clf.knn is not None and clf.knn_weight == 0.5 and clf.options["knn_weight"] == 0.5
    p = clf.predict_proba(texts[:6], embeddings=e[:6])
    clf.save(tmp_path / "m")
    loaded = ComplexityClassifier.load(tmp_path / "m")
    assert loaded.knn is not None and loaded.knn_weight == 0.5
    assert np.allclose(loaded.predict_proba(texts[:6], embeddings=e[:6]), p, atol=1e-3)
    plain = ComplexityClassifier.train(texts, y.tolist(), n_tiers=3, head="sklearn", embeddings=e)
    assert plain.knn is None  # off by default
    with pytest.raises(ClassifierError):
        ComplexityClassifier.train(texts, y.tolist(), n_tiers=3, head="sklearn", embeddings=e, knn_weight=1.5)
