"""Sentence embeddings kept on disk, so that `aio retrain` embeds the seed data once and later only new log texts.

A cache belongs to one encoder: its folder under `$AIO_HOME/embeddings/` is named by a hash of the encoder's name,
its resolved folder and its config.json, so another or changed encoder never reads stale vectors. Entries are keyed
by the SHA-256 of the text. New vectors are appended as one more shard file (numpy .npz, no pickle); a shard that
cannot be read is ignored (those texts are embedded again).

Below the cache, the seed texts' embeddings shipped with the classifier (`classifier.seed_embeddings`) answer for
the seed data once `check_shipped` has found them to be this encoder's; they are read, never copied into the cache.
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

logger = logging.getLogger(__name__)

CHUNK = 256  # texts per encoder call between progress updates


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def encoder_fingerprint(name: str, folder: str) -> str:
    digest = hashlib.sha256(f"{name}\0{os.path.realpath(folder)}\0".encode())
    config = Path(folder) / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    return digest.hexdigest()[:16]


class EmbeddingCache:
    """Embeddings of one encoder: `embed(texts)` returns cached rows and computes (and stores) the rest."""

    def __init__(self, root: Path, encoder_name: str, encode: Callable[[list[str]], np.ndarray],
                 fingerprint: str, shipped: Path | None = None) -> None:
        self.folder = Path(root) / fingerprint
        self.encoder_name = encoder_name
        self._encode = encode
        self._vectors: dict[bytes, np.ndarray] = {}
        self._loaded = False
        self.shipped_path = shipped
        self._shipped = None  # classifier.seed_embeddings.ShippedEmbeddings, once checked
        self.shipped_status: str | None = None  # after check_shipped: "used", or why the file is not used

    @classmethod
    def for_encoder(cls, root: Path, encoder_name: str, shipped: Path | None = None) -> "EmbeddingCache":
        """The cache of a classifier's encoder (`DEFAULT_ENCODER` or a folder), over the `shipped` seed embeddings
        if given; loads the encoder only when a text is not cached (or to check the shipped file)."""
        from classifier.encoder import Encoder, resolve_encoder_path

        folder = resolve_encoder_path(encoder_name)
        return cls(root, encoder_name, lambda texts: Encoder.cached(encoder_name).encode(texts),
                   encoder_fingerprint(encoder_name, folder), shipped)

    def check_shipped(self) -> str | None:
        """Reads the shipped seed embeddings and checks them against this encoder (once; it encodes a few probe
        texts). Returns `shipped_status`: "used", why not, or None without a shipped file."""
        if self.shipped_status is not None or self.shipped_path is None:
            return self.shipped_status
        from classifier.seed_embeddings import ShippedEmbeddings

        try:
            shipped = ShippedEmbeddings.read(self.shipped_path)
        except (OSError, ValueError, KeyError) as exc:
            self.shipped_status = f"unreadable: {exc}"
        else:
            reason = shipped.check(self.encoder_name, self._encode)
            self._shipped = shipped if reason is None else None
            self.shipped_status = reason or "used"
        if self._shipped is None:
            logger.warning("not using the shipped seed embeddings %s: %s", self.shipped_path, self.shipped_status)
        return self.shipped_status

    def _lookup(self, key: bytes) -> np.ndarray | None:
        vector = self._vectors.get(key)
        if vector is None and self._shipped is not None:
            vector = self._shipped.get(key)
        return vector

    def sources(self, texts: Sequence[str]) -> dict[str, int]:
        """How many distinct texts are "new" (to encode), "cached" and "shipped"."""
        self._load()
        out = {"new": 0, "cached": 0, "shipped": 0}
        for key in {text_key(t) for t in texts}:
            if key in self._vectors:
                out["cached"] += 1
            else:
                out["new" if self._lookup(key) is None else "shipped"] += 1
        return out

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for shard in sorted(self.folder.glob("shard-*.npz")):
            try:
                with np.load(shard, allow_pickle=False) as data:
                    keys, vectors = data["keys"], data["vectors"]
            except (OSError, ValueError, KeyError) as exc:
                logger.warning("ignoring the unreadable embedding cache file %s: %s", shard, exc)
                continue
            for key, vector in zip(keys, vectors):  # numpy drops an S32 item's trailing zero bytes: put them back
                self._vectors[bytes(key).ljust(32, b"\0")] = vector

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The distinct texts that are neither cached nor shipped (checked) yet."""
        self._load()
        seen: set[bytes] = set()
        out = []
        for text in texts:
            key = text_key(text)
            if key not in seen and self._lookup(key) is None:
                seen.add(key)
                out.append(text)
        return out

    def embed(self, texts: Sequence[str], on_progress: Callable[[int], None] | None = None) -> np.ndarray:
        """(n, dim) float32 for `texts`; `on_progress(k)` after each chunk of k newly embedded texts."""
        texts = list(texts)
        todo = self.missing(texts)
        if todo:
            keys, vectors = [], []
            for start in range(0, len(todo), CHUNK):
                chunk = todo[start:start + CHUNK]
                vectors.append(np.asarray(self._encode(chunk), dtype=np.float32))
                keys += [text_key(t) for t in chunk]
                if on_progress is not None:
                    on_progress(len(chunk))
            block = np.concatenate(vectors)
            self._store(keys, block)
            for key, vector in zip(keys, block):
                self._vectors[key] = vector
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._lookup(text_key(t)) for t in texts])

    def _store(self, keys: list[bytes], vectors: np.ndarray) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                np.savez(f, keys=np.asarray(keys, dtype="S32"), vectors=vectors)
            index = len(list(self.folder.glob("shard-*.npz")))
            os.replace(tmp, self.folder / f"shard-{index:06d}-{os.getpid()}.npz")
        except OSError as exc:  # a read-only home: the run goes on, the next one embeds again
            logger.warning("cannot write the embedding cache in %s: %s", self.folder, exc)
