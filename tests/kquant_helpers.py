"""Valid GGUF blocks with sane scales, built here (the gguf package quantizes no K-quant): random codes and
sub-block scales packed as ggml lays them out, fp16 super-block scales of the size real weights have."""
from __future__ import annotations

import numpy as np

from tiers.quantization.kquant import BLOCK_TYPES, row_bytes


def _fp16(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).view(np.uint8).reshape(*values.shape, 2)


def _pack_scales_k4(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """[..., 8] 6-bit scales and mins -> ggml's 12 bytes (get_scale_min_k4's inverse)."""
    q = np.zeros((*sc.shape[:-1], 12), dtype=np.uint8)
    q[..., 0:4] = sc[..., :4] | ((sc[..., 4:] >> 4) << 6)
    q[..., 4:8] = m[..., :4] | ((m[..., 4:] >> 4) << 6)
    q[..., 8:12] = (sc[..., 4:] & 0x0F) | ((m[..., 4:] & 0x0F) << 4)
    return q


def make_blocks(kind: str, n: int, k: int, rng: np.random.Generator, scale: float = 0.02) -> np.ndarray:
    """uint8 [n, row_bytes(kind, k)]: rows of valid `kind` blocks whose values are about `scale` in size."""
    _, elems, _ = BLOCK_TYPES[kind]
    g = (n, k // elems)
    rand = lambda *shape: rng.integers(0, 256, size=(*g, *shape), dtype=np.uint8)  # noqa: E731
    if kind in ("Q4_K", "Q5_K"):
        bits = 4 if kind == "Q4_K" else 5
        d = _fp16(rng.uniform(0.5, 1.5, g) * scale / (63 * 2 ** (bits - 1)) * 2)
        dmin = _fp16(rng.uniform(0.5, 1.5, g) * scale / 63)
        sc, m = rng.integers(0, 64, (*g, 8), dtype=np.uint8), rng.integers(0, 64, (*g, 8), dtype=np.uint8)
        parts = [d, dmin, _pack_scales_k4(sc, m)] + ([rand(32)] if kind == "Q5_K" else []) + [rand(128)]
    elif kind == "Q6_K":
        scales = rng.integers(-64, 64, (*g, 16)).astype(np.int8).view(np.uint8)
        d = _fp16(rng.uniform(0.5, 1.5, g) * scale / (64 * 32))
        parts = [rand(128), rand(64), scales, d]
    else:  # the 32-blocks: gguf quantizes them
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import quantize

        values = rng.standard_normal((n, k)).astype(np.float32) * scale
        return quantize(values, GGMLQuantizationType[kind]).reshape(n, row_bytes(kind, k))
    return np.concatenate(parts, axis=-1).reshape(n, row_bytes(kind, k))
