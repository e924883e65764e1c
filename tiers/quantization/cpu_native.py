"""The native INT4/INT8 matmul (tiers/native/w4a8.c) from Python: its row-record weight layout and the call.

Torch's own CPU INT4/INT8 kernels take bf16 activations and, on the AVX2 machine measured, ran 2-4x behind
llama.cpp (docs/benchmarks.md). This kernel does what llama.cpp does: activations quantized per row to int8 blocks
of 32, integer dot products against the weight's blocks (AVX-512 VNNI, AVX2 or plain C), fp16 scales per block.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from tiers.native import NativeKernelError, NativeLibrary

BLOCK = 32  # input features per weight / activation block


def row_bytes(k: int, w8: bool) -> int:
    """Bytes of one weight row record (w4a8.c): INT4 K/2 code bytes + fp16 scales + fp16 mins, INT8 K bytes +
    fp16 scales."""
    return k + 2 * (k // BLOCK) if w8 else k // 2 + 4 * (k // BLOCK)


def gemm(native: NativeLibrary, x: torch.Tensor, rows: torch.Tensor, k: int, w8: bool,
         float_activations: bool = False) -> torch.Tensor:
    """float32 [M, K] @ W^T -> float32 [M, N], W as N row records (pack_w4 / pack_w8). float_activations (INT8
    only): the activations stay float32 instead of int8 blocks (the lm_head's kernel). Called once per layer and
    step: kept to the few Python operations it needs."""
    if x.dtype != torch.float32 or x.stride(-1) != 1:
        x = x.float().contiguous()
    m, n = x.shape[0], rows.shape[0]
    assert x.shape[1] == k and rows.shape[1] == row_bytes(k, w8) and (w8 or not float_activations)
    out = torch.empty(m, n, dtype=torch.float32)
    lib = native.lib
    call = lib.aio_gemm_w8f if float_activations else lib.aio_gemm_w8 if w8 else lib.aio_gemm_w4
    if call(x.data_ptr(), m, k, x.stride(0), rows.data_ptr(), n, out.data_ptr(), n, torch.get_num_threads()):
        raise NativeKernelError("out of memory in the native kernel")
    return out


@lru_cache(maxsize=64)
def interleave_order(k: int) -> torch.Tensor:
    """Index [K]: the natural input feature at each position of the kernel's order (w4a8.c: blocks in pairs,
    4-byte granules alternating between the pair's two blocks; an odd last block in natural order)."""
    if k % BLOCK:
        raise ValueError(f"in_features {k} is not a multiple of {BLOCK}")
    pos = torch.arange(2 * BLOCK)
    within = ((pos >> 2) & 1) * BLOCK + 4 * (pos >> 3) + (pos & 3)
    pairs = k // (2 * BLOCK)
    order = (torch.arange(pairs).unsqueeze(1) * 2 * BLOCK + within).flatten()
    return torch.cat((order, torch.arange(pairs * 2 * BLOCK, k)))


@lru_cache(maxsize=64)
def natural_order(k: int) -> torch.Tensor:
    """The inverse of interleave_order: the position of each natural input feature."""
    return torch.argsort(interleave_order(k))


def _halves(values: torch.Tensor) -> torch.Tensor:
    return values.to(torch.float16).contiguous().view(torch.uint8)


def pack_w4(codes: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor) -> torch.Tensor:
    """INT4 codes uint8 [N, K] (0..15, natural order), scales and mins [N, K // 32] -> row records uint8
    [N, row_bytes(K)]. Codes: in each pair of blocks, byte r holds interleaved element r (low nibble) and r + 32
    (high); an odd last block, byte j holds elements j and j + 16. Scales and mins are stored as fp16."""
    n, k = codes.shape
    c = codes.to(torch.uint8)[:, interleave_order(k)]
    split = (k // (2 * BLOCK)) * 2 * BLOCK
    pairs = c[:, :split].reshape(n, -1, 2, BLOCK)
    tail = c[:, split:].reshape(n, -1, 2, BLOCK // 2)
    return torch.cat(((pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(n, -1),
                      (tail[:, :, 0] | (tail[:, :, 1] << 4)).reshape(n, -1),
                      _halves(scales), _halves(mins)), dim=1).contiguous()


def unpack_w4(rows: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inverse of pack_w4: codes uint8 [N, K] in natural order, scales and mins float32 [N, K // 32]."""
    n, nb, half = rows.shape[0], k // BLOCK, k // 2
    split = (k // (2 * BLOCK)) * BLOCK  # bytes of the paired blocks
    pairs = rows[:, :split].reshape(n, -1, BLOCK)
    tail = rows[:, split:half].reshape(n, -1, BLOCK // 2)
    interleaved = torch.cat((torch.stack((pairs & 0x0F, pairs >> 4), dim=2).reshape(n, -1),
                             torch.stack((tail & 0x0F, tail >> 4), dim=2).reshape(n, -1)), dim=1)
    halves = rows[:, half:].contiguous().view(torch.float16).float()
    return interleaved[:, natural_order(k)], halves[:, :nb], halves[:, nb:]


def pack_w8(qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """int8 [N, K] in natural order and scales [N, K // 32] -> row records uint8 [N, row_bytes(K, w8=True)]:
    the same interleaving, one byte per weight, then fp16 scales."""
    return torch.cat((qweight[:, interleave_order(qweight.shape[1])].view(torch.uint8), _halves(scales)),
                     dim=1).contiguous()


def unpack_w8(rows: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of pack_w8: int8 [N, K] in natural order and float32 scales [N, K // 32]."""
    q = rows[:, :k].contiguous().view(torch.int8)[:, natural_order(k)]
    return q, rows[:, k:].contiguous().view(torch.float16).float()
