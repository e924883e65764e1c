"""Weight-only quantization: 4-bit group-wise and 8-bit per-channel weights, GGUF blocks as stored, the methods
that run them (tiers.quantization.methods) and the linear layer built on them.

The public names load on first use, so `tiers.quantization.modes` (QUANTIZATION_MODES) imports without torch."""
from __future__ import annotations

from tiers.lazy_exports import lazy_getattr

_EXPORTS = {
    "Int4Weight": "tiers.quantization.int4",
    "QuantizationError": "tiers.quantization.int4",
    "pack_nibbles": "tiers.quantization.int4",
    "quantize_int4": "tiers.quantization.int4",
    "unpack_nibbles": "tiers.quantization.int4",
    "Int8Weight": "tiers.quantization.int8",
    "quantize_int8": "tiers.quantization.int8",
    "QuantizedEmbedding": "tiers.quantization.linear",
    "QuantizedLinear": "tiers.quantization.linear",
    "quantize_lm_head": "tiers.quantization.linear",
    "quantize_linear": "tiers.quantization.linear",
    "quantize_model": "tiers.quantization.linear",
    "METHODS": "tiers.quantization.methods",
    "QUANTIZATION_MODES": "tiers.quantization.modes",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
