"""The seed texts' embeddings, shipped (`classifier/seed/seed_embeddings.npz`, 4.8 MB), so that an operator's first
`aio retrain` does not encode the 10,716 distinct seed texts (minutes to tens of minutes on a 2-core CPU).

Written by `python -m classifier.seed_embeddings [--cache-dir DIR]` (and by `python -m classifier.build_default`,
which rebuilds the seed data) with the recipe's encoder (`RECIPE_ENCODER`), byte for byte the same for the same
vectors. Compact: each column j is stored as int8 codes q, v ≈ offset_j + q·step_j, with step_j = σ_j /
STEPS_PER_SIGMA (σ_j: the column's standard deviation over the seed texts; wider only where the column's range
would not fit in int8; at least MIN_STEP), so every stored component is within step_j / 2 of the encoder's;
deflated, 4.7 bits per component. Rows are keyed by the first `KEY_BYTES` bytes of the text's SHA-256 (a prefix of
the embedding cache's key), so a changed seed file still finds the texts it kept.

Checked before use (`ShippedEmbeddings.check`): the file names the encoder it was computed with (the name with its
layers) and holds the exact vectors of `PROBES` seed texts (2 characters to over 256 tokens); those are encoded
again with the encoder in use, and the file is used only if the names are equal and every probe component lies
within half a step of the stored one (median step 0.0076). The encoder's float noise across CPUs is ~1e-6; reading
the last layer twice instead of layers 3 and 6 moves a probe component by 63 half-steps: a changed encoder
(weights, tokenizer, layers, pooling) is caught, and the texts are encoded as before the file existed.
"""
from __future__ import annotations

import argparse
import hashlib
import zipfile
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

SHIPPED_PATH = Path(__file__).resolve().parent / "seed" / "seed_embeddings.npz"
FORMAT = 1
# Quantisation step = sigma / 4 (rms error 0.07 sigma): the retrain's held-out log losses moved by <= 2e-4 with it,
# against 1.1e-3 to 1.7e-3 for the current classifier's at sigma / 3 and sigma / 2 (docs/routing.md).
STEPS_PER_SIGMA = 4.0
# The smallest step: a dead column (constant to 1e-8) gets this one, far above the encoder's float32 noise across
# CPUs (~1e-6, which `check` must tolerate) and far below a live column's step (>= 0.003 for the recipe's encoder).
MIN_STEP = 1e-4
KEY_BYTES = 8  # 64-bit keys: a log text falsely matches one of ~10^4 seed texts with odds ~5e-16
PROBES = 8


def key(text: str) -> bytes:
    """The first KEY_BYTES of the text's SHA-256 (a prefix of `aio.routing.embedding_cache.text_key`)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:KEY_BYTES]


def quantize(vectors: np.ndarray, steps_per_sigma: float = STEPS_PER_SIGMA
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes int8 (n, dim), offset (dim,), step (dim,)): vectors ≈ offset + codes·step, each within step / 2."""
    v = np.asarray(vectors, dtype=np.float64)
    offset = v.mean(axis=0)
    spread = np.abs(v - offset).max(axis=0)
    step = np.maximum(np.maximum(v.std(axis=0) / steps_per_sigma, spread / 127.0), MIN_STEP).astype(np.float32)
    offset = offset.astype(np.float32)
    codes = np.rint((v - offset) / step).astype(np.int8)  # |(v - offset) / step| <= 127 by the choice of step
    return codes, offset, step


def dequantize(codes: np.ndarray, offset: np.ndarray, step: np.ndarray) -> np.ndarray:
    return (offset + codes.astype(np.float32) * step).astype(np.float32)


def probe_texts(texts: Sequence[str], n: int = PROBES) -> list[str]:
    """`n` texts spread over the range of lengths (the longest are cut at the encoder's MAX_TOKENS)."""
    order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), texts[i]))
    picks = np.linspace(0, len(order) - 1, num=min(n, len(order))).round().astype(int)
    return [texts[order[i]] for i in dict.fromkeys(picks.tolist())]


def write(texts: Sequence[str], vectors: np.ndarray, encoder_name: str, encode: Callable[[list[str]], np.ndarray],
          path: str | Path = SHIPPED_PATH, steps_per_sigma: float = STEPS_PER_SIGMA) -> Path:
    """Store `vectors` (the rows of `texts`, from `encode`) for the distinct texts; the probes are encoded as one
    batch, as `check` will encode them."""
    rows = {}
    for i, text in enumerate(texts):
        rows.setdefault(text, i)
    distinct = list(rows)
    keys = [key(t) for t in distinct]
    if len(set(keys)) != len(keys):
        raise ValueError("two distinct seed texts share a key prefix: raise KEY_BYTES")
    codes, offset, step = quantize(np.asarray(vectors)[list(rows.values())], steps_per_sigma)
    probes = probe_texts(distinct)
    arrays = {"format": np.array(FORMAT), "encoder": np.array(encoder_name),
              "keys": np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(-1, KEY_BYTES), "codes": codes,
              "offset": offset, "step": step, "probe_texts": np.array(probes),
              "probe_vectors": np.asarray(encode(probes), dtype=np.float32)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:  # np.savez_compressed's layout
        for name, array in arrays.items():
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))  # the same data, the same bytes
            info.compress_type = zipfile.ZIP_DEFLATED
            with z.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, array, allow_pickle=False)
    return path


class ShippedEmbeddings:
    """The vectors of the shipped file, by key; usable once `check` has passed against the encoder in use."""

    def __init__(self, encoder_name: str, keys: np.ndarray, vectors: np.ndarray, step: np.ndarray,
                 probe_texts: list[str], probe_vectors: np.ndarray) -> None:
        self.encoder_name = encoder_name
        self.rows = {k.tobytes(): i for i, k in enumerate(np.asarray(keys, dtype=np.uint8))}  # (n, KEY_BYTES)
        self.vectors, self.step = vectors, step
        self.probe_texts, self.probe_vectors = probe_texts, probe_vectors

    @classmethod
    def read(cls, path: str | Path = SHIPPED_PATH) -> "ShippedEmbeddings":
        """Raises OSError / ValueError / KeyError for a missing, unreadable or foreign file."""
        try:
            with np.load(path, allow_pickle=False) as z:
                if int(z["format"]) != FORMAT:
                    raise ValueError(f"format {int(z['format'])}, this AIO reads format {FORMAT}")
                vectors = dequantize(z["codes"], z["offset"], z["step"])
                return cls(str(z["encoder"]), z["keys"], vectors, z["step"], [str(t) for t in z["probe_texts"]],
                           z["probe_vectors"])
        except (zipfile.BadZipFile, EOFError) as exc:  # a truncated or empty file
            raise ValueError(f"{path}: {exc or type(exc).__name__}") from exc

    def check(self, encoder_name: str, encode: Callable[[list[str]], np.ndarray]) -> str | None:
        """None when these vectors are the encoder's (see the module docstring), else why they are not."""
        if encoder_name != self.encoder_name:
            return f"they are of the encoder {self.encoder_name}, this one is {encoder_name}"
        fresh = np.asarray(encode(list(self.probe_texts)), dtype=np.float32)
        if fresh.shape != self.probe_vectors.shape:
            return f"the encoder gives {fresh.shape[1]} dimensions, they have {self.probe_vectors.shape[1]}"
        drift = np.abs(fresh - self.probe_vectors) / (self.step / 2)
        if not drift.max() <= 1.0:
            return (f"the encoder moved: a probe text's component differs by {drift.max():.1f} half-steps "
                    f"(allowed: 1)")
        return None

    def get(self, text_key: bytes) -> np.ndarray | None:
        """The vector of the text with this key (a full SHA-256 or its prefix), or None."""
        row = self.rows.get(bytes(text_key[:KEY_BYTES]))
        return None if row is None else self.vectors[row]

    def __len__(self) -> int:
        return len(self.rows)


def use_shipped(embeddings, texts: Sequence[str]) -> None:
    """Put the shipped vectors of those `texts` the file holds into `embeddings` (classifier.evaluate.Embeddings:
    its memo, key and encoder), once they pass `ShippedEmbeddings.check` against its encoder; else say why not."""
    from classifier.encoder import RECIPE_ENCODER

    shipped = ShippedEmbeddings.read()
    reason = shipped.check(RECIPE_ENCODER, embeddings.encoder.encode)
    if reason is not None:
        print(f"the shipped seed vectors are not used: {reason}")
        return
    embeddings.memo.update({embeddings.key(t): v for t in dict.fromkeys(texts) if (v := shipped.get(key(t))) is not None})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m classifier.seed_embeddings", description=__doc__.split("\n")[0])
    parser.add_argument("--cache-dir", default=None, help="reuse the embeddings `python -m classifier.evaluate "
                        "--cache-dir` keeps there (same encoder, keyed by text)")
    parser.add_argument("--out", default=str(SHIPPED_PATH))
    args = parser.parse_args(argv)
    from classifier.encoder import RECIPE_ENCODER, Encoder
    from classifier.evaluate import Embeddings
    from classifier.seed import load_seed_data

    texts = list(dict.fromkeys(load_seed_data()[0]))
    vectors = Embeddings(args.cache_dir)(texts)
    path = write(texts, vectors, RECIPE_ENCODER, Encoder.cached(RECIPE_ENCODER).encode, args.out)
    print(f"wrote {path}: {len(texts)} texts, {path.stat().st_size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
