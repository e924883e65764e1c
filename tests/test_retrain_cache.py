"""`aio retrain` with the embedding cache: each text is encoded once across runs (a counting stand-in encoder),
the stages are reported in order, the default trainer and the evaluation use the cached vectors, and the summary
table says what was decided on which data."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from aio.commands.retrain import summary_table
from aio.db.database import make_engine
from aio.db.migrate import upgrade
from aio.routing import registry
from aio.routing.embedding_cache import EmbeddingCache, text_key
from aio.routing.retrain import retrain
from classifier.encoder import DEFAULT_ENCODER
from tests.test_retrain import LookupClassifier, add_verified, math_text, seed_csv

DIM = 16


class CountingEncoder:
    """Deterministic vectors from the text's hash, with a length signal; counts what it encodes."""

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.encoded += texts
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
            row = np.random.default_rng(seed).normal(size=DIM)
            row[0] = 3.0 if "Prove" in text else -3.0
            rows.append(row / np.linalg.norm(row))
        return np.asarray(rows, dtype=np.float32)


class RecordingProgress:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def stage(self, name, total=None):
        self.events.append(("stage", name, total))

    def advance(self, n=1):
        self.events.append(("advance", n))

    def close(self):
        self.events.append(("close",))


@pytest.fixture()
def engine(tmp_path):
    db = make_engine(f"sqlite:///{tmp_path / 'aio.db'}")
    upgrade(db)
    yield db
    db.dispose()


def test_the_cache_encodes_each_text_once_and_survives_a_restart(tmp_path):
    encoder = CountingEncoder()
    cache = EmbeddingCache(tmp_path, DEFAULT_ENCODER, encoder, "fingerprint-a")
    first = cache.embed(["a", "b", "a"])
    assert encoder.encoded == ["a", "b"] and first.shape == (3, DIM) and np.array_equal(first[0], first[2])
    reopened = EmbeddingCache(tmp_path, DEFAULT_ENCODER, encoder, "fingerprint-a")
    again = reopened.embed(["b", "c"])
    assert encoder.encoded == ["a", "b", "c"] and np.array_equal(again[0], first[1])
    other = EmbeddingCache(tmp_path, DEFAULT_ENCODER, encoder, "fingerprint-b")  # another encoder: own vectors
    assert other.missing(["a"]) == ["a"]
    next(iter((tmp_path / "fingerprint-a").glob("shard-*.npz"))).write_bytes(b"not a numpy file")
    assert EmbeddingCache(tmp_path, DEFAULT_ENCODER, encoder, "fingerprint-a").missing(["a", "b", "c"])  # ignored


def test_a_key_that_ends_in_a_zero_byte_is_found_after_a_restart(tmp_path):
    text = "text 405"  # its SHA-256 ends in 0x00, which numpy's S32 items drop
    assert text_key(text)[-1] == 0
    encoder = CountingEncoder()
    EmbeddingCache(tmp_path, DEFAULT_ENCODER, encoder, "fp").embed([text])
    assert EmbeddingCache(tmp_path, DEFAULT_ENCODER, encoder, "fp").missing([text]) == []


def test_retrain_embeds_only_new_texts_and_reports_its_stages(engine, tmp_path):
    current = LookupClassifier("uniform", {})
    registry.register(engine, version=current.version, kind=registry.BUILTIN_KIND, path=None, status="active")
    seed = seed_csv(tmp_path / "seed.csv", n=60)
    for i in range(20):
        add_verified(engine, f"m{i}", math_text(500 + i), "small", passed=False)
    encoder = CountingEncoder()
    cache = EmbeddingCache(tmp_path / "embeddings", DEFAULT_ENCODER, encoder, "fp")
    progress = RecordingProgress()
    first = retrain(engine, current, tmp_path / "c", seed_path=seed, dry_run=True, embeddings=cache,
                    progress=progress)
    total = first.data_counts["train"] + first.data_counts["holdout"]
    assert len(encoder.encoded) == total == 140 and first.embedded == {"new": 140, "cached": 0}
    stages = [e[1].split(" ")[0] for e in progress.events if e[0] == "stage"]
    assert stages == ["reading", "embedding", "fitting", "evaluating", "deciding"]
    assert sum(e[1] for e in progress.events if e[0] == "advance") == 140 + 2 and progress.events[-1] == ("close",)
    assert first.status == "dry-run" and first.candidate_metrics["accuracy"] > 0.9  # the "Prove" signal was learnt
    assert set(first.stage_seconds) == {e[1] for e in progress.events if e[0] == "stage"}

    for i in range(5):
        add_verified(engine, f"n{i}", math_text(900 + i), "medium", passed=True)
    second = retrain(engine, current, tmp_path / "c", seed_path=seed, dry_run=True,
                     embeddings=EmbeddingCache(tmp_path / "embeddings", DEFAULT_ENCODER, encoder, "fp"))
    assert sorted(encoder.encoded[140:]) == sorted(math_text(900 + i) for i in range(5))  # only the new texts
    assert second.embedded == {"new": 5, "cached": 140}

    text = summary_table(second)
    assert text.startswith("dry-run: ") and "embedded           5 new, 140 from the cache" in text
    assert "current" in text and "candidate" in text and second.candidate_version in text
    assert "demo_tiers 0" in text and "training examples" in text
