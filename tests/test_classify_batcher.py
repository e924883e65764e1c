"""The classifier's micro-batcher: texts that arrive while a batch runs share the next one, each caller gets its
own row, a text that fails its batch fails alone (or is scored by the fallback), and a hot swap never mixes
classifiers in a batch."""
from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from aio.routing import ClassifierBatcher


class RecordingClassifier:
    """Row i = [len(text), id]; the first call blocks until `release` is set, so others queue behind it."""

    def __init__(self, version: str, fail_on: str | None = None) -> None:
        self.version = version
        self.fail_on = fail_on
        self.batches: list[list[str]] = []
        self.release = threading.Event()
        self.entered = threading.Event()

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        self.batches.append(list(texts))
        self.entered.set()
        self.release.wait(10)
        if self.fail_on in texts:
            raise ValueError(f"cannot score {self.fail_on!r}")
        return np.array([[len(t), float(self.version)] for t in texts])


async def wait_entered(classifier: RecordingClassifier) -> None:
    await asyncio.to_thread(classifier.entered.wait, 10)


def test_texts_arriving_during_a_batch_share_the_next_and_get_their_own_rows():
    async def main():
        clf = RecordingClassifier("1")
        batcher = ClassifierBatcher(max_batch_size=4)
        first = asyncio.create_task(batcher.predict(clf, "a"))
        await wait_entered(clf)
        texts = ["bb", "ccc", "dddd", "eeeee", "ffffff"]
        rest = [asyncio.create_task(batcher.predict(clf, t)) for t in texts]
        await asyncio.sleep(0.05)
        clf.release.set()
        rows = await asyncio.gather(first, *rest)
        return clf, batcher, rows

    clf, batcher, rows = asyncio.run(main())
    assert clf.batches == [["a"], ["bb", "ccc", "dddd", "eeeee"], ["ffffff"]]  # capped at max_batch_size
    assert [row[0] for row in rows] == [1, 2, 3, 4, 5, 6]
    assert (batcher.num_batches, batcher.num_texts) == (3, 6)


def _batch_with_one_bad_text(fallback=None):
    async def main():
        clf = RecordingClassifier("1", fail_on="bad")
        batcher = ClassifierBatcher(fallback=fallback)
        first = asyncio.create_task(batcher.score(clf, "ok"))
        await wait_entered(clf)
        queued = [asyncio.create_task(batcher.score(clf, t)) for t in ("bad", "innocent")]
        await asyncio.sleep(0.05)
        clf.release.set()
        results = await asyncio.gather(first, *queued, return_exceptions=True)
        after = await batcher.predict(clf, "later")
        return clf, batcher, results, after

    return asyncio.run(main())


def test_a_text_that_fails_its_batch_fails_alone_and_the_batcher_keeps_working():
    clf, batcher, (first, bad, innocent), after = _batch_with_one_bad_text()
    assert clf.batches == [["ok"], ["bad", "innocent"], ["bad"], ["innocent"], ["later"]]  # then one by one
    assert first.proba[0] == 2 and innocent.proba[0] == 8 and innocent.classifier is clf
    assert isinstance(bad, ValueError) and "bad" in str(bad)
    assert after[0] == 5 and batcher.num_fallbacks == 0


def test_a_text_the_classifier_fails_on_is_scored_by_the_fallback():
    fallback = RecordingClassifier("9")
    fallback.release.set()
    clf, batcher, (first, bad, innocent), after = _batch_with_one_bad_text(fallback)
    assert fallback.batches == [["bad"]] and bad.classifier is fallback and bad.proba.tolist() == [3, 9]
    assert innocent.classifier is clf and innocent.proba[0] == 8 and batcher.num_fallbacks == 1


def test_a_hot_swap_never_mixes_classifiers_in_a_batch():
    async def main():
        old, new = RecordingClassifier("1"), RecordingClassifier("2")
        new.release.set()
        batcher = ClassifierBatcher()
        first = asyncio.create_task(batcher.predict(old, "x"))
        await wait_entered(old)
        queued = [asyncio.create_task(batcher.predict(c, t)) for c, t in
                  ((old, "o1"), (new, "n1"), (old, "o2"), (new, "n2"))]
        await asyncio.sleep(0.05)
        old.release.set()
        rows = await asyncio.gather(first, *queued)
        return old, new, rows

    old, new, rows = asyncio.run(main())
    assert old.batches == [["x"], ["o1", "o2"]] and new.batches == [["n1", "n2"]]
    assert [row[1] for row in rows] == [1, 1, 2, 1, 2]  # each text scored by the classifier it was routed with


def test_a_caller_that_left_is_not_scored():
    async def main():
        clf = RecordingClassifier("1")
        batcher = ClassifierBatcher()
        first = asyncio.create_task(batcher.predict(clf, "a"))
        await wait_entered(clf)
        gone = asyncio.create_task(batcher.predict(clf, "gone"))
        stays = asyncio.create_task(batcher.predict(clf, "stays"))
        await asyncio.sleep(0.05)
        gone.cancel()
        clf.release.set()
        await first
        return clf, await stays, gone

    clf, stays, gone = asyncio.run(main())
    assert gone.cancelled() and clf.batches == [["a"], ["stays"]] and stays[0] == 5


def test_bad_batch_size():
    with pytest.raises(ValueError, match="max_batch_size"):
        ClassifierBatcher(max_batch_size=0)
