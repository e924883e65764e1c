"""Triton W4A16 matmul: y[M, N] = x[M, K] @ dequant(W)[N, K]^T for an Int4Weight, by row count.

The weight stays in Int4Weight's storage format, no repacking: `packed` uint8 [N, K/2] row-major (column 2i of a
row in the low nibble of byte i, 2i+1 in the high one), `scales`/`mins` [N, K/group_size], value = code*scale+min.

Three paths, picked by M (the rows of the call) on CUDA:
- M <= GEMV_PICK_MAX_M (2): a GEMV without tl.dot (triton_w4a16_gemv.py): decode at batch 1-2 streams the weight
  once, FMAs on the CUDA cores (from 3 rows its arithmetic costs more than tl.dot's padding to 16: measured).
- up to DENSE_ABOVE_M (256): the tiled tl.dot GEMM below, dequantizing in registers. While M is small (decode
  batches) the step still reads the weight once, so its time should stay near batch 1's; the tensor cores do the
  math.
- above DENSE_ABOVE_M (prefill chunks): the weight dequantized into a reused buffer, then cuBLAS
  (tiers.quantization.w4a16_dense), as vLLM's AWQ path does from 256 tokens: compute-bound, where the dense GEMM
  runs at tensor-core speed and the dequantization pass costs 2.5 bytes per weight, hidden by 2 * M flops.
The tl.dot table up to 64 rows and DENSE_ABOVE_M were measured on an H100 (`python -m benchmarks.w4a16 --model 70b
--sweep`, which times the alternatives and the dense path beside tl.dot, to place the crossover; docs/gpu.md).

The GEMM. A program owns a [BLOCK_N weight rows, BLOCK_M activation rows] tile of the transposed output and walks
its share of K in BLOCK_K steps (grid: M tiles fastest, so programs sharing a weight tile run together and the
second reads it from L2; then N tiles; then SPLIT_K slices of the K loop). Each step loads the packed bytes as a
[BLOCK_N, BLOCK_K/2] tile (contiguous along K in each weight row), builds each nibble's value without an int->float
conversion (as the GEMV does: the code moved into the mantissa of 1.0 gives f = 1 + c/16 exactly, and
c * s + z = 16s * f + (z - 16s), one FMA), interleaves the two nibbles back into K order (tl.interleave: a
register-level join) and casts to the activations' dtype, then accumulates tl.dot(w [BLOCK_N, BLOCK_K],
x^T [BLOCK_K, BLOCK_M]) in fp32. The weight is the dot's first operand ("swap AB"): Hopper's wgmma takes its A
operand from registers, where the dequantized tile already is, and the tokens sit in the MMA's N dimension, which
is 8-256 wide, so 5-16 rows pad to 16, not to 64. BLOCK_K divides the group size, so one (scale, min) per weight
row covers a step. The weight is rounded to the activation dtype before the dot, as the dense path's buffer is, so
the two paths compute with the same values.

Small M has too few output tiles to fill the GPU when N is small, so the K loop is split: each slice writes an
fp32 partial tile and a small second kernel sums the slices in a fixed order and casts (deterministic, unlike
atomics). Block sizes come from a fixed table (`pick_dot_config`) instead of autotuning: no tuning runs at engine
start, and the same shapes always run the same code.

`pick_config` returns a GemvConfig or a W4A16Config; either can be passed to w4a16_matmul (the interpreter runs the
GEMV only when a GemvConfig asks for it, and never the dense path by itself).

On CPU the kernels run only in the Triton interpreter (TRITON_INTERPRET=1 before triton is imported), in float32.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from tiers.quantization.int4 import Int4Weight
from tiers.quantization.triton_w4a16_gemv import (GEMV_PICK_MAX_M, GemvConfig, check_gemv_config, gemv_split_k,
                                                  launch_gemv, pick_gemv_config)
from tiers.triton_device import interpreted

# tl.dot needs every tile dimension >= 16 on GPUs; a step's dot runs over BLOCK_K / 2 (the even or odd columns).
MIN_BLOCK_K = 32
GROUP_SIZE_MULTIPLE = MIN_BLOCK_K
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_SPLIT_K = 16
# Above this many rows (on CUDA) the weight is dequantized into a reused buffer and cuBLAS runs the matmul
# (w4a16_dense), as vLLM's AWQ path from 256 tokens. Measured on an H100 (Llama-3-70B's fused projections): at 256
# rows the dense path beat tl.dot on qkv, o and down (1,678 against 1,748 us a layer), at 128 tl.dot won by 2x.
DENSE_ABOVE_M = 256
DENSE = "dense"  # w4a16_matmul's config for the dense path, whatever M
DEQUANT_BLOCK_N = 32
DEQUANT_BLOCK_K = 256  # upper bound: a power of two dividing the group size


@dataclass(frozen=True)
class W4A16Config:
    block_m: int
    block_n: int
    block_k: int  # upper bound: the wrapper uses the largest power of two dividing both it and the group size
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3


def _interpreting() -> bool:
    """Whether the kernels run in Triton's interpreter in this process (TRITON_INTERPRET=1 when they were defined)."""
    return interpreted(_w4a16_kernel)


@triton.jit
def _nibble_values(packed, SHIFT: tl.constexpr, scale16, zero16):
    """code * scale + min (fp32) of the nibble at bit SHIFT (0 or 4) of each byte (int32 [BLOCK_N, BLOCK_K/2]):
    the code moved to mantissa bits 19..22 of 1.0 is f = 1 + c/16, and c * s + z = f * 16s + (z - 16s)."""
    bits = ((packed << (19 - SHIFT)) & 0x780000) | 0x3F800000
    return bits.to(tl.float32, bitcast=True) * scale16[:, None] + zero16[:, None]


@triton.jit
def _w4a16_kernel(x_ptr, w_ptr, s_ptr, z_ptr, out_ptr, M, N, iters_per_split, total_iters,
                  stride_xm, stride_xk, stride_wn, stride_sn, stride_os, stride_om, stride_on,
                  GROUP_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  IS_FP32: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = m < M
    n_ok = n < N
    # Rows past N (weight) and past M (activations) re-read row 0, and their results are never stored: no masks on
    # the loads of the hot loop.
    n_row = tl.where(n_ok, n, 0).to(tl.int64)
    m_row = tl.where(m_ok, m, 0).to(tl.int64)
    half = tl.arange(0, BLOCK_K // 2)
    cols = tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + n_row[:, None] * stride_wn + half[None, :]  # [BLOCK_N, BLOCK_K/2] packed bytes
    xt_ptrs = x_ptr + cols[:, None] * stride_xk + m_row[None, :] * stride_xm  # [BLOCK_K, BLOCK_M]: x^T
    s_ptrs = s_ptr + n_row * stride_sn
    z_ptrs = z_ptr + n_row * stride_sn

    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    start = pid_k * iters_per_split
    end = tl.minimum(start + iters_per_split, total_iters)
    for it in range(start, end):
        k0 = it * BLOCK_K
        packed = tl.load(w_ptrs + k0 // 2).to(tl.int32)
        xt = tl.load(xt_ptrs + k0 * stride_xk)
        group = k0 // GROUP_SIZE
        scale16 = 16.0 * tl.load(s_ptrs + group).to(tl.float32)
        zero16 = tl.load(z_ptrs + group).to(tl.float32) - scale16
        low = _nibble_values(packed, 0, scale16, zero16)  # columns k0 + 2i
        high = _nibble_values(packed, 4, scale16, zero16)  # columns k0 + 2i + 1
        w = tl.interleave(low, high).to(x_ptr.dtype.element_ty)  # [BLOCK_N, BLOCK_K] in K order
        if IS_FP32:
            acc = tl.dot(w, xt, acc, input_precision="ieee")
        else:
            acc = tl.dot(w, xt, acc)  # fp16/bf16 operands, fp32 accumulation
    out_ptrs = out_ptr + pid_k * stride_os + m.to(tl.int64)[None, :] * stride_om + n[:, None] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=n_ok[:, None] & m_ok[None, :])


@triton.jit
def _dequant_kernel(w_ptr, s_ptr, z_ptr, out_ptr, N, stride_wn, stride_sn, stride_on,
                    GROUP_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[n, k] = code * scale + min (fp32, then out's dtype) for a [BLOCK_N, BLOCK_K] tile: the dense path's
    buffer (w4a16_dense). Exact codes (an int->float conversion: this pass is memory-bound, not issue-bound)."""
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    k0 = tl.program_id(1) * BLOCK_K
    n_ok = n < N
    n_row = n.to(tl.int64)
    half = tl.arange(0, BLOCK_K // 2)
    packed = tl.load(w_ptr + n_row[:, None] * stride_wn + k0 // 2 + half[None, :], mask=n_ok[:, None], other=0)
    group = k0 // GROUP_SIZE
    scale = tl.load(s_ptr + n_row * stride_sn + group, mask=n_ok, other=0.0).to(tl.float32)[:, None]
    zero = tl.load(z_ptr + n_row * stride_sn + group, mask=n_ok, other=0.0).to(tl.float32)[:, None]
    low = (packed & 0xF).to(tl.float32) * scale + zero
    high = (packed >> 4).to(tl.float32) * scale + zero
    values = tl.interleave(low, high).to(out_ptr.dtype.element_ty)
    cols = k0 + tl.arange(0, BLOCK_K)
    tl.store(out_ptr + n_row[:, None] * stride_on + cols[None, :], values, mask=n_ok[:, None])


@triton.jit
def _sum_splits_kernel(partial_ptr, out_ptr, numel, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    """out[i] = sum over s of partial[s, i] (fp32, in order s = 0, 1, ...), cast to out's dtype."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < numel
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(partial_ptr + s * numel + offs, mask=ok, other=0.0)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=ok)


def w4a16_supported(weight: Int4Weight) -> bool:
    """Whether the kernel takes this weight (its group size; every Int4Weight has K % group_size == 0)."""
    return weight.group_size % GROUP_SIZE_MULTIPLE == 0


def _block_k(config_block_k: int, group_size: int) -> int:
    """The largest power of two dividing both (so a K step never straddles two groups)."""
    return math.gcd(config_block_k, group_size & -group_size)


@functools.lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def uses_gemv(m: int, on_cuda: bool) -> bool:
    """Whether the wrapper's own pick for M rows is the GEMV kernel: on CUDA, up to GEMV_PICK_MAX_M rows. The
    interpreter runs it only when a GemvConfig asks for it."""
    return on_cuda and m <= GEMV_PICK_MAX_M


def uses_dense(m: int, on_cuda: bool) -> bool:
    """Whether the wrapper hands M rows to the dense path (w4a16_dense: dequantize into a reused buffer, then
    cuBLAS): on CUDA above DENSE_ABOVE_M rows, except while a CUDA graph is being captured (decode graphs hold at
    most 256 rows; a graph keeps the tl.dot kernel, which needs no buffer)."""
    capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    return on_cuda and m > DENSE_ABOVE_M and not capturing


def pick_config(m: int, n: int, k: int, group_size: int, device: torch.device) -> W4A16Config | GemvConfig:
    """The config w4a16_matmul runs without one: the GEMV table for small M on CUDA, else the tl.dot table."""
    if uses_gemv(m, device.type == "cuda" and not _interpreting()):
        return pick_gemv_config(m, n, k, group_size, _num_sms(device))
    return pick_dot_config(m, n, k, group_size, device)


# The tl.dot table on CUDA: (largest M, config, programs wanted per SM before split-K). Up to 64 rows the step is bound
# by reading the weight: each program streams a 64-row weight tile with all the rows of M in one tile (the weight
# read once), and split-K fills the SMs when N is narrow (o_proj, down_proj). Chosen by `benchmarks.w4a16 --model 70b
# --m 16,32,64,128 --sweep` on an H100 (Triton 3.6): for 16, 32 and 64 rows, with the split-K this function derives,
# each entry's time was measured on all four fused shapes. A layer's four projections at 16 / 32 / 64 rows: 327 / 372 /
# 520 us, against 470 / 472 / 592 for the reasoned table before (block_n 128, block_k 64) and 327 / 366 / 508 for the
# sweep's best config per shape. The 128-row entry stays the reasoned one: the sweep's 128-row winners split K in
# ways this rule does not give, and the others were not timed with its splits. 8B shapes: not measured.
DOT_TABLE = (
    (16, W4A16Config(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=3), 2),
    (32, W4A16Config(block_m=32, block_n=64, block_k=128, num_warps=4, num_stages=3), 2),
    (64, W4A16Config(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3), 2),
    (128, W4A16Config(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3), 1),
)
LARGE_M_CONFIG = W4A16Config(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)


def pick_dot_config(m: int, n: int, k: int, group_size: int, device: torch.device) -> W4A16Config:
    """Block sizes of the tl.dot kernel (DOT_TABLE by M). Split-K only when the output tiles alone would leave SMs
    idle, every slice keeping at least 4 K steps."""
    if _interpreting() or device.type != "cuda":
        return W4A16Config(block_m=16, block_n=32, block_k=64)
    for max_m, config, per_sm in DOT_TABLE:
        if m <= max_m:
            break
    else:
        return LARGE_M_CONFIG
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    iters = k // _block_k(config.block_k, group_size)
    split_k = 1
    while tiles * split_k < per_sm * _num_sms(device) and split_k * 2 <= min(MAX_SPLIT_K, iters // 4):
        split_k *= 2
    return replace(config, split_k=split_k)


def _check_inputs(x: torch.Tensor, weight: Int4Weight) -> None:
    if not isinstance(weight, Int4Weight):
        raise ValueError(f"w4a16_matmul takes an Int4Weight, got {type(weight).__name__}")
    n, k = weight.shape
    if x.dim() not in (2, 3):
        raise ValueError(f"x must be 2-D [M, K] or 3-D [B, S, K], got shape {tuple(x.shape)}")
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features, the weight expects K = {k}")
    if not w4a16_supported(weight):
        raise ValueError(f"group_size must be a multiple of {GROUP_SIZE_MULTIPLE}, got {weight.group_size}")
    if x.dtype not in DTYPES:
        raise ValueError(f"x dtype must be one of {[str(d) for d in DTYPES]}, got {x.dtype}")
    if weight.packed.dtype != torch.uint8:
        raise ValueError(f"packed codes must be uint8, got {weight.packed.dtype}")
    devices = {t.device for t in (x, weight.packed, weight.scales, weight.mins)}
    if len(devices) > 1:
        raise ValueError(f"x and the weight must be on one device, got {sorted(map(str, devices))}")
    if x.device.type == "cpu":
        if not _interpreting():
            raise ValueError("on CPU the Triton kernel runs only in the interpreter (TRITON_INTERPRET=1 before "
                             "importing triton)")
        if x.dtype != torch.float32:
            raise ValueError(f"the Triton interpreter computes in float32 only, got {x.dtype}")
    elif x.device.type != "cuda":
        raise ValueError(f"the Triton kernel runs on CUDA (or on CPU in the interpreter), got {x.device}")


def _check_config(config: W4A16Config, group_size: int) -> None:
    for name in ("block_m", "block_n", "block_k"):
        value = getattr(config, name)
        if value < 1 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two, got {value}")
    if config.split_k < 1:
        raise ValueError(f"split_k must be >= 1, got {config.split_k}")
    if config.block_m < 16 or config.block_n < 16 or _block_k(config.block_k, group_size) < MIN_BLOCK_K:
        raise ValueError(f"{config} is too small: tl.dot needs block_m, block_n >= 16 and a K step of >= "
                         f"{MIN_BLOCK_K} dividing the group size {group_size}")


def _dot_plan(k: int, group_size: int, config: W4A16Config) -> tuple[int, int, int, int]:
    """(BLOCK_K, K steps, steps per slice, slices) of the tl.dot kernel: no empty slices."""
    block_k = _block_k(config.block_k, group_size)
    total_iters = k // block_k
    split_k = max(1, min(config.split_k, total_iters))
    iters_per_split = triton.cdiv(total_iters, split_k)
    return block_k, total_iters, iters_per_split, triton.cdiv(total_iters, iters_per_split)


def _launch_dot(x2: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor,
                target: torch.Tensor, group_size: int, config: W4A16Config) -> None:
    m, k = x2.shape
    n = packed.shape[0]
    block_k, total_iters, iters_per_split, split_k = _dot_plan(k, group_size, config)
    stride_os = 0 if split_k == 1 else target.stride(0)
    grid = (triton.cdiv(m, config.block_m), triton.cdiv(n, config.block_n), split_k)
    _w4a16_kernel[grid](
        x2, packed, scales, mins, target, m, n, iters_per_split, total_iters,
        x2.stride(0), x2.stride(1), packed.stride(0), scales.stride(0), stride_os, target.stride(-2),
        target.stride(-1),
        GROUP_SIZE=group_size, BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=block_k,
        IS_FP32=x2.dtype == torch.float32, num_warps=config.num_warps,
        num_stages=config.num_stages)


def w4a16_matmul(x: torch.Tensor, weight: Int4Weight,
                 config: W4A16Config | GemvConfig | str | None = None) -> torch.Tensor:
    """x [M, K] or [B, S, K] (fp16/bf16/fp32 on CUDA; fp32 in the interpreter) @ weight.dequantize()^T ->
    [M, N] or [B, S, N] in x's dtype. config: override the path and its block sizes (tests, benchmarks): a
    GemvConfig runs the GEMV kernel (M <= GEMV_MAX_M), a W4A16Config the tl.dot one, DENSE the dequantize +
    matmul path; None: the dense path above DENSE_ABOVE_M rows on CUDA, else pick_config's."""
    _check_inputs(x, weight)
    n, k = weight.shape
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out.view(*lead, n)
    if config == DENSE or (config is None and uses_dense(m, x.device.type == "cuda" and not _interpreting())):
        from tiers.quantization.w4a16_dense import dense_matmul

        return dense_matmul(x2, weight, launch_dequantize).view(*lead, n)
    if config is None:
        config = pick_config(m, n, k, weight.group_size, x.device)
    if isinstance(config, GemvConfig):
        check_gemv_config(config, m)
        split_k = gemv_split_k(k, weight.group_size, config)
    else:
        _check_config(config, weight.group_size)
        split_k = _dot_plan(k, weight.group_size, config)[3]
    packed = weight.packed if weight.packed.stride(1) == 1 else weight.packed.contiguous()
    scales, mins = weight.scales.contiguous(), weight.mins.contiguous()
    if scales.stride(0) != mins.stride(0):  # contiguous [N, groups] both: equal strides
        raise ValueError("scales and mins must have one layout")
    target = out if split_k == 1 else torch.empty(split_k, m, n, dtype=torch.float32, device=x.device)
    if isinstance(config, GemvConfig):
        launch_gemv(x2, packed, scales, mins, target, weight.group_size, config, split_k)
    else:
        _launch_dot(x2, packed, scales, mins, target, weight.group_size, config)
    if split_k > 1:
        block = 1024
        _sum_splits_kernel[(triton.cdiv(m * n, block),)](target, out, m * n, SPLIT_K=split_k, BLOCK=block)
    return out.view(*lead, n)


def launch_dequantize(weight: Int4Weight, out: torch.Tensor) -> None:
    """out [N, K] = weight.dequantize(out.dtype), by _dequant_kernel (w4a16_dense's buffer)."""
    n, k = weight.shape
    packed = weight.packed if weight.packed.stride(1) == 1 else weight.packed.contiguous()
    scales, mins = weight.scales.contiguous(), weight.mins.contiguous()
    if out.stride(1) != 1:
        raise ValueError("out must be contiguous along K")
    block_k = _block_k(DEQUANT_BLOCK_K, weight.group_size)
    grid = (triton.cdiv(n, DEQUANT_BLOCK_N), k // block_k)
    _dequant_kernel[grid](packed, scales, mins, out, n, packed.stride(0), scales.stride(0), out.stride(0),
                          GROUP_SIZE=weight.group_size, BLOCK_N=DEQUANT_BLOCK_N, BLOCK_K=block_k, num_warps=4)
