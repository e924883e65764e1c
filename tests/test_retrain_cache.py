"""`aio retrain` with the embedding cache: each text is encoded once across runs (a counting stand-in encoder),
the stages are reported in order, the default trainer and the evaluation use the cached vectors, and the summary
table says what was decided on which data. Shipped seed embeddings spare a cold retrain the seed texts, and are
not used when they are another encoder's."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from aio.commands.retrain import summary_table
from aio.routing import registry
from aio.routing.embedding_cache import EmbeddingCache, text_key
from aio.routing.retrain import retrain, seed_examples
from classifier.encoder import DEFAULT_ENCODER
from classifier.seed_embeddings import ShippedEmbeddings, write
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
def engine(sqlite_engine):
    return sqlite_engine


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
    assert len(encoder.encoded) == total == 140 and first.embedded == {"new": 140, "cached": 0, "shipped": 0}
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
    assert second.embedded == {"new": 5, "cached": 140, "shipped": 0}

    text = summary_table(second)
    assert text.startswith("dry-run: ") and "embedded           5 new, 140 from the cache" in text
    assert "current" in text and "candidate" in text and second.candidate_version in text
    assert "demo_tiers 0" in text and "training examples" in text


class ShiftedEncoder(CountingEncoder):
    """Another encoder of the same dimension (its components rolled by one)."""

    def __call__(self, texts: list[str]) -> np.ndarray:
        return np.roll(super().__call__(texts), 1, axis=1)


def shipped_seed(tmp_path, seed) -> tuple:
    """A shipped-embeddings file for the seed CSV's texts, written with the counting encoder."""
    texts = seed_examples(seed).texts
    builder = CountingEncoder()
    return write(texts, builder(texts), DEFAULT_ENCODER, builder, tmp_path / "shipped.npz"), texts


def test_a_cold_retrain_reads_the_seed_from_the_shipped_embeddings(engine, tmp_path):
    current = LookupClassifier("uniform", {})
    registry.register(engine, version=current.version, kind=registry.BUILTIN_KIND, path=None, status="active")
    seed = seed_csv(tmp_path / "seed.csv", n=60)
    path, seed_texts = shipped_seed(tmp_path, seed)
    log_texts = [math_text(500 + i) for i in range(20)]
    for i, text in enumerate(log_texts):
        add_verified(engine, f"m{i}", text, "small", passed=False)
    encoder, progress = CountingEncoder(), RecordingProgress()
    cache = EmbeddingCache(tmp_path / "embeddings", DEFAULT_ENCODER, encoder, "fp", shipped=path)
    first = retrain(engine, current, tmp_path / "c", seed_path=seed, dry_run=True, embeddings=cache,
                    progress=progress)
    probes = ShippedEmbeddings.read(path).probe_texts
    assert encoder.encoded[:len(probes)] == probes  # the check, then only the log texts: no seed text is encoded
    assert sorted(encoder.encoded[len(probes):]) == sorted(log_texts)
    assert first.embedded == {"new": 20, "cached": 0, "shipped": len(seed_texts)} and first.shipped_embeddings == "used"
    stages = [e[1].split(" ")[0] for e in progress.events if e[0] == "stage"]
    assert stages == ["reading", "checking", "embedding", "fitting", "evaluating", "deciding"]
    assert first.candidate_metrics["accuracy"] > 0.9
    assert "embedded           20 new, 0 from the cache, 120 shipped with the seed data" in summary_table(first)

    second = retrain(engine, current, tmp_path / "c", seed_path=seed, dry_run=True,
                     embeddings=EmbeddingCache(tmp_path / "embeddings", DEFAULT_ENCODER, encoder, "fp", shipped=path))
    assert second.embedded == {"new": 0, "cached": 20, "shipped": 120}  # the shipped rows are read, not copied


@pytest.mark.parametrize("encoder_name, encoder, reason", [
    (DEFAULT_ENCODER, ShiftedEncoder(), "the encoder moved"),  # same name and dimension, other vectors
    ("another-encoder", CountingEncoder(), "they are of the encoder " + DEFAULT_ENCODER),
])
def test_shipped_embeddings_of_another_encoder_are_not_used(engine, tmp_path, encoder_name, encoder, reason):
    current = LookupClassifier("uniform", {})
    registry.register(engine, version=current.version, kind=registry.BUILTIN_KIND, path=None, status="active")
    seed = seed_csv(tmp_path / "seed.csv", n=60)
    path, seed_texts = shipped_seed(tmp_path, seed)
    cache = EmbeddingCache(tmp_path / "embeddings", encoder_name, encoder, "fp", shipped=path)
    report = retrain(engine, current, tmp_path / "c", seed_path=seed, dry_run=True, embeddings=cache)
    assert sorted(set(encoder.encoded) & set(seed_texts)) == sorted(seed_texts)  # every seed text encoded
    assert report.embedded == {"new": 120, "cached": 0, "shipped": 0}
    assert report.shipped_embeddings.startswith(reason), report.shipped_embeddings
    assert "shipped seed embeddings not used: " + reason in summary_table(report)


@pytest.mark.parametrize("content", [b"not a numpy file", b"", b"PK\x03\x04 cut short", None])
def test_an_unreadable_or_missing_shipped_file_is_not_used(tmp_path, content):
    if content is not None:
        (tmp_path / "shipped.npz").write_bytes(content)
    cache = EmbeddingCache(tmp_path, DEFAULT_ENCODER, CountingEncoder(), "fp", shipped=tmp_path / "shipped.npz")
    assert cache.check_shipped().startswith("unreadable") and cache.missing(["a"]) == ["a"]
