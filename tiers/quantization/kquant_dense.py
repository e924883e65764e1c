"""The dense path of GGUF block weights (EngineConfig.quantized_dense_min_rows): a projection fed many rows at once
(a prefill chunk) dequantizes its weight for the call into a per-thread buffer and runs torch's GEMM over it.

The native kernel's cost grows with every row (each row is its own int8 dot product with the decoded blocks);
a GEMM amortises the weight over all rows. On a CPU with bfloat16 matmul units (AMX or AVX-512 BF16) the GEMM runs
in bfloat16, elsewhere in float32; either way the weight values are exactly the stored blocks' (bf16: rounded
to nearest even).
"""
from __future__ import annotations

import threading
from functools import cache

import torch
import torch.nn.functional as F

from tiers.native import NativeLibrary
from tiers.quantization.kquant import KQuantWeight, dequantize_parts

_buffers = threading.local()  # one buffer per engine thread, sized to the largest weight it dequantized


@cache
def dense_dtype() -> torch.dtype:
    """bfloat16 where the CPU multiplies bf16 natively (amx_bf16 / avx512_bf16 in its flags), else float32."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    except OSError:
        flags = []
    return torch.bfloat16 if {"amx_bf16", "avx512_bf16"} & set(flags) else torch.float32


def _buffer(numel: int, dtype: torch.dtype) -> torch.Tensor:
    key = f"buffer_{dtype}".replace(".", "_")
    buffer = getattr(_buffers, key, None)
    if buffer is None or buffer.numel() < numel:
        buffer = torch.empty(numel, dtype=dtype)
        setattr(_buffers, key, buffer)
    return buffer[:numel]


def dequantize_into(native: NativeLibrary, weight: KQuantWeight, dtype: torch.dtype) -> torch.Tensor:
    """The [N, K] weight in `dtype` (float32 or bfloat16), in this thread's buffer: valid until its next call."""
    n, k = weight.shape
    return dequantize_parts(native, weight, _buffer(n * k, dtype).view(n, k))


def dense_gemm(native: NativeLibrary, x: torch.Tensor, weight: KQuantWeight) -> torch.Tensor:
    """float [M, K] @ W^T -> float32 [M, N] through torch's GEMM in dense_dtype()."""
    dtype = dense_dtype()
    return F.linear(x.to(dtype), dequantize_into(native, weight, dtype)).float()
