"""The seed training rows nearest in meaning to a prompt (`aio router explain`): which rows, with which outcome
labels and from which sources, a classifier trained on them has seen near this prompt.

Nearness is the cosine of the recipe encoder's embeddings (the shipped seed embeddings, the prompt encoded
afresh). This explains by example, not by attribution: it shows what the training data says about prompts like
this one; the classifier's own weights decide.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class Neighbour:
    similarity: float
    label: int  # the cheapest tier that answered it well (0 = small)
    source: str  # e.g. "routellm:mmlu", "chat:writing"
    text: str
    weight: float  # its weight in the shipped classifier's training (0: not trained on)


@dataclass(frozen=True)
class SourceShare:
    source: str
    count: int  # among the nearest rows
    mean_label: float
    weight: float  # its rows' mean weight in the shipped classifier's training


@lru_cache(maxsize=1)
def _seed_index() -> tuple[np.ndarray, list[int], list[str], list[str]]:
    """Unit vectors, labels, sources and texts of the seed rows the shipped embeddings cover."""
    from classifier.seed import load_seed_data
    from classifier.seed_embeddings import ShippedEmbeddings, key

    texts, labels, sources = load_seed_data()
    shipped = ShippedEmbeddings.read()
    rows = [(shipped.get(key(t)), label, source, t) for t, label, source in zip(texts, labels, sources)]
    rows = [r for r in rows if r[0] is not None]
    vectors = np.stack([r[0] for r in rows]).astype(np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors, [r[1] for r in rows], [r[2].removeprefix("seed:") for r in rows], [r[3] for r in rows]


def nearest_rows(text: str, k: int = 5, pool: int = 50) -> tuple[list[Neighbour], list[SourceShare]]:
    """The `k` nearest seed rows to `text`, and per source its count and mean label among the `pool` nearest."""
    from classifier.encoder import RECIPE_ENCODER, Encoder

    vectors, labels, sources, texts = _seed_index()
    query = np.asarray(Encoder.cached(RECIPE_ENCODER).encode([text])[0], dtype=np.float32)
    similarity = vectors @ (query / max(float(np.linalg.norm(query)), 1e-12))
    order = np.argsort(-similarity)[:max(k, pool)]
    from classifier.seed import seed_weight

    near = [Neighbour(float(similarity[i]), labels[i], sources[i], texts[i], seed_weight(sources[i], labels[i]))
            for i in order]
    counts, label_sums, weight_sums = Counter(), defaultdict(float), defaultdict(float)
    for n in near[:pool]:
        counts[n.source] += 1
        label_sums[n.source] += n.label
        weight_sums[n.source] += n.weight
    shares = [SourceShare(s, c, label_sums[s] / c, weight_sums[s] / c) for s, c in counts.most_common()]
    return near[:k], shares
