"""Micro-batching for the classifier: one worker thread runs `predict_proba` on every text waiting at once.

Requests classified one by one in the default thread pool would run several encoder passes side by side, each
asking torch for every core, next to the engines' step loops: on a small machine that oversubscription, not the
arithmetic, sets the rate. Here a request's text waits while a batch is in flight and goes into the next one,
so under load the classifier works in batches (a 32-text batch costs a fraction of 32 single calls) and at
rest a lone request is classified at once, with no added delay.

One text must not fail its batch-mates: when a batch raises, its texts are scored one by one, and a text the
classifier still fails on is scored by the fallback classifier (the heuristic), with a warning in the log.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from aio.routing.router import Classifier

logger = logging.getLogger(__name__)


class Score(NamedTuple):
    proba: np.ndarray  # one row of predict_proba
    embedding: np.ndarray | None  # the text's sentence embedding; None for a classifier without one
    classifier: Classifier  # the one that scored: the asked one, or the fallback when it failed on this text


@dataclass
class _Pending:
    classifier: Classifier
    text: str
    future: asyncio.Future  # result: Score


class ClassifierBatcher:
    def __init__(self, max_batch_size: int = 32, fallback: Classifier | None = None) -> None:
        """fallback: scores a text the classifier fails on (None: that text's request gets the error)."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.max_batch_size = max_batch_size
        self.fallback = fallback
        self.num_fallbacks = 0
        self._pending: list[_Pending] = []
        self._worker: asyncio.Task | None = None
        self.num_batches = 0
        self.num_texts = 0

    async def predict(self, classifier: Classifier, text: str) -> np.ndarray:
        """The classifier's probabilities for `text` (one row); raises what the classifier raised."""
        return (await self.score(classifier, text)).proba

    async def score(self, classifier: Classifier, text: str) -> Score:
        """The probabilities (and sentence embedding) for `text`."""
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
            except Exception as exc:  # noqa: BLE001 - one text's failure must not fail the others
                await self._score_each(classifier, batch, exc)
                continue
            self.num_batches += 1
            self.num_texts += len(batch)
            for i, p in enumerate(batch):
                if not p.future.done():
                    p.future.set_result(Score(proba[i], None if embeddings is None else embeddings[i], classifier))

    async def _score_each(self, classifier: Classifier, batch: list[_Pending], batch_error: Exception) -> None:
        """After `batch` failed as a whole: each text alone (a batch of one has already failed alone)."""
        for p in batch:
            if p.future.done():
                continue
            try:
                if len(batch) == 1:
                    raise batch_error
                proba, embeddings = await asyncio.to_thread(_score, classifier, [p.text])
                score = Score(proba[0], None if embeddings is None else embeddings[0], classifier)
            except Exception as exc:  # noqa: BLE001 - this text's own failure
                score = await self._fall_back(p.text, exc)
                if score is None:
                    p.future.set_exception(exc)
                    continue
            self.num_batches += 1
            self.num_texts += 1
            if not p.future.done():
                p.future.set_result(score)

    async def _fall_back(self, text: str, exc: Exception) -> Score | None:
        if self.fallback is None:
            logger.warning("the classifier failed on one text (%s: %s)", type(exc).__name__, exc)
            return None
        logger.warning("the classifier failed on one text (%s: %s); it is routed by %s", type(exc).__name__, exc,
                       self.fallback.version)
        try:
            proba = await asyncio.to_thread(self.fallback.predict_proba, [text])
        except Exception:  # noqa: BLE001 - the caller gets the classifier's own error
            logger.exception("the fallback classifier failed on that text too")
            return None
        self.num_fallbacks += 1
        return Score(proba[0], None, self.fallback)


def _score(classifier: Classifier, texts: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
    with_embeddings = getattr(classifier, "predict_with_embeddings", None)
    if with_embeddings is None:
        return classifier.predict_proba(texts), None
    return with_embeddings(texts)
