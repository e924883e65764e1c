"""The seed texts' embeddings shipped with the classifier (`classifier.seed_embeddings`): they cover the shipped seed
data, equal the recipe encoder's within their quantisation bound, and a changed encoder or recipe is caught."""
from __future__ import annotations

import random

import numpy as np

from classifier.encoder import DEFAULT_ENCODER, RECIPE_ENCODER, Encoder
from classifier.seed import load_seed_data
from classifier.seed_embeddings import (MIN_STEP, SHIPPED_PATH, ShippedEmbeddings, dequantize, key, quantize,
                                        write)

# The encoder's own float32 noise between runs (batch composition, another CPU's kernels) for unit-length vectors:
# measured 0 on the machine that built the file, ~1e-6 elsewhere; one order of magnitude of headroom.
FLOAT_NOISE = 1e-5


def test_the_shipped_file_covers_every_seed_text_for_the_recipe_encoder():
    shipped = ShippedEmbeddings.read(SHIPPED_PATH)
    texts = set(load_seed_data()[0])
    assert shipped.encoder_name == RECIPE_ENCODER
    assert len(shipped) == len(texts) and all(key(t) in shipped.rows for t in texts)  # rebuilt with the seed data
    assert SHIPPED_PATH.stat().st_size < 6_000_000  # compact: about 4.7 bits per component


def test_shipped_vectors_equal_the_encoders_within_half_a_step():
    """A sample of seed texts encoded now vs the shipped rows: the quantisation bound (step / 2 per component) plus
    the encoder's float noise; and the load check passes with the real encoder."""
    shipped = ShippedEmbeddings.read(SHIPPED_PATH)
    texts = sorted(set(load_seed_data()[0]))
    sample = random.Random(0).sample(texts, 24)
    encoder = Encoder.cached(RECIPE_ENCODER)
    fresh = encoder.encode(sample)
    stored = np.stack([shipped.get(key(t)) for t in sample])
    assert np.all(np.abs(stored - fresh) <= shipped.step / 2 + FLOAT_NOISE)
    assert np.abs(stored - fresh).max() > 0  # quantised, not stored exactly
    assert shipped.check(RECIPE_ENCODER, encoder.encode) is None


def test_a_changed_recipe_is_caught():
    shipped = ShippedEmbeddings.read(SHIPPED_PATH)
    assert "is " + DEFAULT_ENCODER in shipped.check(DEFAULT_ENCODER, lambda texts: None)  # another name: no encoding
    last = Encoder.cached(DEFAULT_ENCODER)  # same model and dimension, another layer: caught by the probes
    reason = shipped.check(RECIPE_ENCODER, lambda texts: np.hstack([last.encode(texts)] * 2) / 2 ** 0.5)
    assert reason is not None and "moved" in reason


def test_quantisation_stays_within_half_a_step_and_never_clips():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(5000, 12)).astype(np.float32)
    v[7, 3] = 200.0  # an outlier beyond 127 steps of sigma / 4: that column's step widens instead of clipping
    v[:, 5] = 1e-33  # a dead column: MIN_STEP
    codes, offset, step = quantize(v, 4.0)
    assert codes.dtype == np.int8 and step[5] == np.float32(MIN_STEP) and step[3] > 1.5 * v[:, 3].std() / 4
    assert np.allclose(step[[0, 1, 2]], v[:, [0, 1, 2]].std(axis=0) / 4, rtol=1e-5)
    assert np.all(np.abs(dequantize(codes, offset, step) - v) <= step / 2 * (1 + 1e-5))


def test_write_and_read_round_trip(tmp_path):
    texts = [f"text {i}" for i in range(50)] + ["text 3"]  # a duplicate: stored once
    vectors = np.random.default_rng(1).normal(size=(51, 8)).astype(np.float32)
    vectors[50] = vectors[3]
    path = write(texts, vectors, "enc", lambda t: vectors[[texts.index(x) for x in t]], tmp_path / "s.npz")
    shipped = ShippedEmbeddings.read(path)
    assert len(shipped) == 50 and shipped.encoder_name == "enc" and len(shipped.probe_texts) == 8
    assert np.all(np.abs(shipped.get(key("text 7")) - vectors[7]) <= shipped.step / 2 * (1 + 1e-5))
    assert shipped.get(key("text 405")) is None  # a key ending in a zero byte is not confused with a shorter one
    assert shipped.check("enc", lambda t: vectors[[texts.index(x) for x in t]]) is None
