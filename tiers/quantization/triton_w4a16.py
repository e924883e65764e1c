"""Triton W4A16 matmul: y[M, N] = x[M, K] @ dequant(W)[N, K]^T for an Int4Weight, dequantized in registers.

The weight stays in Int4Weight's storage format, no repacking: `packed` uint8 [N, K/2] row-major (column 2i of a
row in the low nibble of byte i, 2i+1 in the high one), `scales`/`mins` [N, K/group_size], value = code*scale+min.

Tiling. A program owns a [BLOCK_M, BLOCK_N] output tile and walks its share of K in BLOCK_K steps (grid: N tiles
fastest, then M tiles, then SPLIT_K slices of the K loop). Each step loads the packed bytes as a [BLOCK_K/2,
BLOCK_N] tile (BLOCK_K/2 contiguous bytes of each weight row) and splits every byte into its two nibbles, `b & 15`
(even columns) and `b >> 4` (odd columns). Rather than interleaving the nibbles back into K order, the activations
are loaded the same way, as their even and odd columns, and the two halves go to two tl.dot calls on the raw codes
(exact in fp16/bf16), accumulated in fp32. BLOCK_K divides the group size, so one (scale, min) per output column
covers the step, and it is applied after the dot:

    sum_k x[m, k] * (c[n, k] * s[n] + z[n]) = s[n] * (x @ c^T)[m, n] + z[n] * sum_k x[m, k]

which costs a few FMAs per output element instead of two per weight element, and leaves no weight rounding to the
activation dtype (the products are exact, so the result is if anything closer to the fp32 reference than
F.linear on a dequantized fp16/bf16 weight).

Small M (decode) has too few output tiles to fill the GPU when N is small, so the K loop is split: each slice
writes an fp32 partial tile and a small second kernel sums the slices in a fixed order and casts (deterministic,
unlike atomics). Block sizes come from a fixed table (decode / small batch / prefill) instead of autotuning: no
tuning runs at engine start, and the same shapes always run the same code. They are untuned guesses until measured
on a GPU (benchmarks/w4a16.py takes --sweep to compare the alternatives).

Small-M path. tl.dot pads M to 16, so a batch-1 decode step spends most of its work on padding; on CUDA the wrapper
hands M <= GEMV_PICK_MAX_M (4) rows to a GEMV kernel instead (triton_w4a16_gemv.py: no tl.dot, each program streams
BLOCK_N weight rows once for all M rows, FMAs on the CUDA cores, codes unpacked without int->float conversions,
split-K partials summed by the same deterministic kernel). `pick_config` returns a GemvConfig or a W4A16Config;
either can be passed to w4a16_matmul (the interpreter runs the GEMV only when a GemvConfig asks for it). The
threshold and the GEMV table come from SASS instruction counts, not from timings: no GPU has measured them yet.

On CPU the kernel runs only in the Triton interpreter (TRITON_INTERPRET=1 before triton is imported), in float32.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

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
def _w4a16_kernel(x_ptr, w_ptr, s_ptr, z_ptr, out_ptr, M, N, iters_per_split, total_iters,
                  stride_xm, stride_xk, stride_wn, stride_sn, stride_os, stride_om, stride_on,
                  GROUP_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  IS_FP32: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = m < M
    n_ok = n < N
    # Rows past N re-read row 0 (their results are never stored): no masks on the weight loads of the hot loop.
    n_row = tl.where(n_ok, n, 0).to(tl.int64)
    half = tl.arange(0, BLOCK_K // 2)
    w_ptrs = w_ptr + n_row[None, :] * stride_wn + half[:, None]  # [BLOCK_K/2, BLOCK_N] packed bytes
    x_even_ptrs = x_ptr + m.to(tl.int64)[:, None] * stride_xm + (2 * half)[None, :] * stride_xk  # [BLOCK_M, BLOCK_K/2]
    s_ptrs = s_ptr + n_row * stride_sn
    z_ptrs = z_ptr + n_row * stride_sn

    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    start = pid_k * iters_per_split
    end = tl.minimum(start + iters_per_split, total_iters)
    for it in range(start, end):
        k0 = it * BLOCK_K
        packed = tl.load(w_ptrs + k0 // 2)
        x_even = tl.load(x_even_ptrs + k0 * stride_xk, mask=m_ok[:, None], other=0.0)
        x_odd = tl.load(x_even_ptrs + (k0 + 1) * stride_xk, mask=m_ok[:, None], other=0.0)
        low = (packed & 0xF).to(x_ptr.dtype.element_ty)  # codes of columns k0 + 2i
        high = (packed >> 4).to(x_ptr.dtype.element_ty)  # codes of columns k0 + 2i + 1
        group = k0 // GROUP_SIZE
        scale = tl.load(s_ptrs + group).to(tl.float32)
        zero = tl.load(z_ptrs + group).to(tl.float32)
        if IS_FP32:
            dot = tl.dot(x_even, low, input_precision="ieee")
            dot = tl.dot(x_odd, high, dot, input_precision="ieee")
        else:
            dot = tl.dot(x_even, low)  # fp16/bf16 operands, fp32 accumulation
            dot = tl.dot(x_odd, high, dot)
        x_sum = tl.sum(x_even.to(tl.float32) + x_odd.to(tl.float32), axis=1)
        acc += dot * scale[None, :] + x_sum[:, None] * zero[None, :]
    out_ptrs = out_ptr + pid_k * stride_os + m.to(tl.int64)[:, None] * stride_om + n[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


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


def pick_config(m: int, n: int, k: int, group_size: int, device: torch.device) -> W4A16Config | GemvConfig:
    """The config w4a16_matmul runs without one: the GEMV table for small M on CUDA, else the tl.dot table."""
    if uses_gemv(m, device.type == "cuda" and not _interpreting()):
        return pick_gemv_config(m, n, k, group_size, _num_sms(device))
    return pick_dot_config(m, n, k, group_size, device)


def pick_dot_config(m: int, n: int, k: int, group_size: int, device: torch.device) -> W4A16Config:
    """Block sizes of the tl.dot kernel: decode-shaped (M <= 16), small batches (M <= 64), prefill. Split-K only
    when the output tiles alone would leave SMs idle."""
    if _interpreting() or device.type != "cuda":
        return W4A16Config(block_m=16, block_n=32, block_k=64)
    if m <= 16:
        config = W4A16Config(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=4)
        min_programs = 2 * _num_sms(device)
    elif m <= 64:
        config = W4A16Config(block_m=32 if m <= 32 else 64, block_n=64, block_k=64, num_warps=4, num_stages=4)
        min_programs = _num_sms(device)
    else:
        return W4A16Config(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    iters = k // _block_k(config.block_k, group_size)
    split_k = 1
    while tiles * split_k < min_programs and split_k * 2 <= min(MAX_SPLIT_K, iters // 4):
        split_k *= 2  # every slice keeps at least 4 K steps
    return W4A16Config(config.block_m, config.block_n, config.block_k, split_k, config.num_warps,
                       config.num_stages)


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
    grid = (triton.cdiv(n, config.block_n), triton.cdiv(m, config.block_m), split_k)
    _w4a16_kernel[grid](
        x2, packed, scales, mins, target, m, n, iters_per_split, total_iters,
        x2.stride(0), x2.stride(1), packed.stride(0), scales.stride(0), stride_os, target.stride(-2),
        target.stride(-1),
        GROUP_SIZE=group_size, BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=block_k,
        IS_FP32=x2.dtype == torch.float32, num_warps=config.num_warps, num_stages=config.num_stages)


def w4a16_matmul(x: torch.Tensor, weight: Int4Weight, config: W4A16Config | GemvConfig | None = None) -> torch.Tensor:
    """x [M, K] or [B, S, K] (fp16/bf16/fp32 on CUDA; fp32 in the interpreter) @ weight.dequantize()^T ->
    [M, N] or [B, S, N] in x's dtype. config: override the kernel and its block sizes (tests, benchmarks): a
    GemvConfig runs the GEMV kernel (M <= GEMV_MAX_M), a W4A16Config the tl.dot one; None takes pick_config's."""
    _check_inputs(x, weight)
    n, k = weight.shape
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out.view(*lead, n)
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
