"""Weight-only quantization: 4-bit group-wise and 8-bit per-channel weights, and the linear layer that runs them."""
from tiers.quantization.awq import awq_gemm_to_int4
from tiers.quantization.int4 import Int4Weight, QuantizationError, pack_nibbles, quantize_int4, unpack_nibbles
from tiers.quantization.int8 import Int8Weight, quantize_int8
from tiers.quantization.linear import (QuantizedEmbedding, QuantizedLinear, quantize_lm_head, quantize_linear,
                                       quantize_model)

__all__ = ["Int4Weight", "Int8Weight", "QuantizationError", "QuantizedEmbedding", "QuantizedLinear", "awq_gemm_to_int4", "pack_nibbles",
           "quantize_int4", "quantize_int8", "quantize_lm_head", "quantize_linear", "quantize_model", "unpack_nibbles"]
