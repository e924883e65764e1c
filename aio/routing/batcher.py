"""Micro-batching for the classifier: one worker thread runs `predict_proba` on every text waiting at once.

Requests classified one by one in the default thread pool would run several encoder passes side by side, each
asking torch for every core, next to the engines' step loops: on a small machine that oversubscription, not the
arithmetic, sets the rate. Here a request's text waits while a batch is in flight and goes into the next one,
so under load the classifier works in batches (a 32-text batch costs a fraction of 32 single calls) and at
rest a lone request is classified at once, with no added delay.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from aio.routing.router import Classifier


@dataclass
class _Pending:
    classifier: Classifier
    text: str
    future: asyncio.Future  # result: (probabilities, embedding or None)


class ClassifierBatcher:
    def __init__(self, max_batch_size: int = 32) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.max_batch_size = max_batch_size
        self._pending: list[_Pending] = []
        self._worker: asyncio.Task | None = None
        self.num_batches = 0
        self.num_texts = 0

    async def predict(self, classifier: Classifier, text: str) -> np.ndarray:
        """The classifier's probabilities for `text` (one row); raises what the classifier raised."""
        return (await self.score(classifier, text))[0]

    async def score(self, classifier: Classifier, text: str) -> tuple[np.ndarray, np.ndarray | None]:
        """(probabilities, sentence embedding) for `text`; the embedding is None for a classifier without one
        (the heuristic)."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(classifier, text, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain(), name="aio-classifier-batcher")
        return await future

    async def _drain(self) -> None:
        while self._pending:
            # One classifier per batch: after a hot swap, texts queued for the old one are still scored by it.
            classifier = self._pending[0].classifier
            batch = [p for p in self._pending if p.classifier is classifier][:self.max_batch_size]
            taken = {id(p) for p in batch}
            self._pending = [p for p in self._pending if id(p) not in taken]
            batch = [p for p in batch if not p.future.done()]  # a client that left while waiting
            if not batch:
                continue
            try:
                proba, embeddings = await asyncio.to_thread(_score, classifier, [p.text for p in batch])
            except Exception as exc:  # noqa: BLE001 - handed to each waiting request
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)
                continue
            self.num_batches += 1
            self.num_texts += len(batch)
            for i, p in enumerate(batch):
                if not p.future.done():
                    p.future.set_result((proba[i], None if embeddings is None else embeddings[i]))


def _score(classifier: Classifier, texts: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
    with_embeddings = getattr(classifier, "predict_with_embeddings", None)
    if with_embeddings is None:
        return classifier.predict_proba(texts), None
    return with_embeddings(texts)
