"""W4A16 for many rows: dequantize the layer's INT4 weight into a reused buffer, then one dense matmul (cuBLAS on
CUDA), as vLLM's AWQ path does from 256 tokens. Past a few hundred rows a prefill chunk is compute-bound, and the
tensor cores' dense GEMM beats any kernel that dequantizes in its inner loop; the dequantization is a memory-bound
pass (0.5 byte read + 2 written per weight) that the GEMM's 2 * M flops per weight soon hide.

The buffer is one per device and stream on CUDA (work on one stream runs in order, so every layer of every model on
that stream can reuse it: the next layer's dequantization starts after this layer's matmul), one per thread on CPU.
It grows to the largest layer asked for; `reserve` allocates it when a layer is built, so that the KV cache, sized
from the memory left after loading, leaves room for it.

Works on CPU too (torch's own dequantizer, in row chunks, the reference's exact values), which is how the tests
check it without a GPU; on CUDA the dequantization is a Triton kernel (triton_w4a16._dequant_kernel).
"""
from __future__ import annotations

import threading
from collections.abc import Callable

import torch
import torch.nn.functional as F

from tiers.quantization.int4 import Int4Weight

DequantizeKernel = Callable[[Int4Weight, torch.Tensor], None]  # writes weight.dequantize(out.dtype) into out

CPU_CHUNK_ELEMENTS = 1 << 22  # rows dequantized at once on CPU: bounds torch's float32 temporaries (~16 MB each)

_buffers: dict[tuple, torch.Tensor] = {}  # (device, stream) -> uint8 bytes, on CUDA
_local = threading.local()  # .buffer: this thread's bytes, on CPU
_lock = threading.Lock()


def _key(device: torch.device) -> tuple:
    index = device.index if device.index is not None else torch.cuda.current_device()
    return index, torch.cuda.current_stream(index).cuda_stream


def _bytes(device: torch.device, nbytes: int) -> torch.Tensor:
    """At least nbytes of scratch for this device (and stream / thread), grown (never shrunk) as needed."""
    if device.type == "cuda":
        key = _key(device)
        with _lock:
            buffer = _buffers.get(key)
            if buffer is None or buffer.numel() < nbytes:
                _buffers.pop(key, None)
                del buffer  # the old one is freed before the larger one is allocated
                buffer = _buffers[key] = torch.empty(nbytes, dtype=torch.uint8, device=device)
            return buffer
    buffer = getattr(_local, "buffer", None)
    if buffer is None or buffer.numel() < nbytes or buffer.device != device:
        buffer = _local.buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return buffer


def reserve(device: torch.device | str, nbytes: int) -> None:
    """Allocates the CUDA buffer now (at layer build), so that memory accounting done after loading sees it.
    Nothing on CPU (memory there is not budgeted per byte)."""
    device = torch.device(device)
    if device.type == "cuda":
        _bytes(device, nbytes)


def release() -> None:
    """Frees every buffer (tests; a process that unloads its quantized models)."""
    with _lock:
        _buffers.clear()
    _local.buffer = None


def scratch(device: torch.device, dtype: torch.dtype, n: int, k: int) -> torch.Tensor:
    """An [n, k] tensor of `dtype` over the reused buffer: valid until the next call on this device (stream)."""
    element = torch.empty((), dtype=dtype).element_size()
    return _bytes(device, n * k * element)[: n * k * element].view(dtype).view(n, k)


def dequantize_into(weight: Int4Weight, out: torch.Tensor, kernel: DequantizeKernel | None = None) -> torch.Tensor:
    """out [N, K] (any float dtype) = weight.dequantize(out.dtype): by `kernel` on CUDA (the caller's Triton
    dequantizer), else torch's dequantizer in chunks of rows."""
    n, k = weight.shape
    if tuple(out.shape) != (n, k):
        raise ValueError(f"out is {tuple(out.shape)}, the weight is [{n}, {k}]")
    if kernel is not None and out.device.type == "cuda":
        kernel(weight, out)
        return out
    rows = max(1, CPU_CHUNK_ELEMENTS // k)
    for start in range(0, n, rows):
        part = slice(start, min(n, start + rows))
        chunk = Int4Weight(weight.packed[part], weight.scales[part], weight.mins[part], weight.group_size)
        out[part] = chunk.dequantize(out.dtype)
    return out


def dense_matmul(x2: torch.Tensor, weight: Int4Weight, kernel: DequantizeKernel | None = None) -> torch.Tensor:
    """x2 [M, K] @ weight.dequantize(x2.dtype)^T -> [M, N] in x2's dtype, through the reused buffer."""
    n, k = weight.shape
    buffer = dequantize_into(weight, scratch(x2.device, x2.dtype, n, k), kernel)
    return F.linear(x2, buffer)
