"""Decode-shaped W4A16 GEMV: y[M, N] = x[M, K] @ dequant(W)[N, K]^T for a few rows, without tl.dot.

At batch-1 decode a W4A16 matmul is a stream over the weight: every byte is read once and used M times, so it is
bound by memory bandwidth, and tl.dot (which pads M to 16) spends its time on padding. This kernel reads the
weight in its storage order and does the arithmetic on the CUDA cores, one FMA per code and activation row.

Tiling. A program owns BLOCK_N weight rows (output columns) and a slice of the K loop (split-K; grid: N tiles,
then slices). The packed codes are read as int32 words of 8 codes of consecutive columns (nibble j of word w is
column 8w + j: byte i of a row holds columns 2i and 2i + 1, little-endian), BLOCK_K / 8 words of each row per
step: a [BLOCK_N, BLOCK_K / 8] tile contiguous along K within each row, so a warp's loads coalesce (Triton lays
the lanes along K, 16 bytes each). The next step's words and scales are requested before the current step is
computed (a manual prefetch: Triton's pipeliner, num_stages, leaves loads that feed no tl.dot alone). A step
spans BLOCK_K / SEG_K segments of SEG_K columns, each inside one group (SEG_K: the largest power of two dividing
both BLOCK_K and the group size); each row's products are summed per segment (a reshape), then scaled.

Unpacking without int->float conversions (a quarter of the FMA rate): nibble j is shifted to the top of the
mantissa of 1.0 and bitcast, giving f = 1 + c/16 exactly, a shift and a mask-or per code. With
value = c * s + z = 16s * f + (z - 16s), a segment adds to output (m, n)

    16 s[n] * (sum_k x[m, k] * f[n, k]) + (z[n] - 16 s[n]) * sum_k x[m, k]

(the tl.dot kernel's s * (x.c) + z * sum(x), with f for c). The M rows are a loop inside the program (M bucketed
to a power of two, a constexpr; the rows past M skipped at run time), so the weight tile is read once for all of
them; accumulation is in fp32. Split-K slices write fp32 partials that the caller sums in a fixed order
(triton_w4a16._sum_splits_kernel: deterministic, no atomics).

Cost model, from the SASS Triton 3.9 compiles for sm_90 (counted, not timed): at M = 1 the loop body is ~9.6
instructions per weight byte and thread (BLOCK_N 16, BLOCK_K 1024, 4 warps: 3 per code plus the activation loads
and reductions). An H100 SXM issues ~8.8 per byte of its HBM bandwidth (132 SMs x 128 lanes x 1.755 GHz /
3.35 TB/s), so issue alone caps this at ~90% of peak. Each extra row adds an FMA per code and its activation
loads (M = 4: ~20 per byte, M = 8: ~40), which is why the wrapper hands M > GEMV_PICK_MAX_M to the tl.dot kernel
(measured on an H100: at 4 rows the GEMV took 1.8x tl.dot's time).

Configs come from a fixed table (`pick_gemv_config`), never from autotuning: the same shapes always run the same
code. `python -m benchmarks.w4a16 --sweep` times the alternatives and prints the winners (docs/gpu.md has the last
sweep).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

GEMV_MAX_M = 8  # the most rows the kernel takes (BLOCK_M buckets 1, 2, 4, 8)
# The most rows the wrapper gives it by itself. Measured on an H100 (`benchmarks.w4a16 --model 8b --m 1,4`, Llama-3-8B's
# fused projections, a layer): 1 row 74.5 us here against 123.4 for tl.dot padded to 16 rows; 4 rows 208.5 against
# 115.9. The cost grows ~45 us a row here and stays flat there, so 2 rows (~119 by that slope) is about even, 3 not.
GEMV_PICK_MAX_M = 2
MIN_SEG_K = 32  # every supported group size is a multiple of 32
MAX_SPLIT_K = 16
MAX_SLICE_STEPS = 16  # split K further while a slice would walk more steps than this (70B down_proj: 28 steps)


@dataclass(frozen=True)
class GemvConfig:
    block_n: int = 16  # weight rows (output columns) per program
    block_k: int = 1024  # columns per loop step; upper bound: the largest power of two <= it dividing K is used
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 1  # passed to Triton; no effect on 3.9's code for this kernel (it prefetches by itself)
    # Load the activations in the weight tile's shape (every row the same address) instead of as one vector: the
    # vector's layout is not the tile's, and Triton converts it through shared memory, with barriers, for each of a
    # step's 8 nibbles (sm_90, Triton 3.9: 20 barriers a K step at one row, 4 this way, for ~12% more instructions).
    # Opt-in until a GPU times it (`benchmarks.w4a16 --sweep` has both).
    x_in_tile: bool = False


@triton.jit
def _mantissa_code(words, J: tl.constexpr):
    """1 + c/16 (fp32, exact) for nibble J of each int32 word: the code moved to mantissa bits 19..22 of 1.0."""
    if 4 * J <= 19:
        bits = words << (19 - 4 * J)
    else:
        bits = words >> (4 * J - 19)  # arithmetic shift: the sign bits land above the mask
    return ((bits & 0x780000) | 0x3F800000).to(tl.float32, bitcast=True)


@triton.jit
def _row_products(words, x_ptrs, stride_xk, X_TILE: tl.constexpr):
    """(x * (1 + c/16) summed over the 8 nibbles of each word [BLOCK_N, WORDS], x summed likewise: [WORDS], or
    [BLOCK_N, WORDS] with X_TILE); x_ptrs: the activations of columns 8w, [WORDS] or (X_TILE) [BLOCK_N, WORDS].
    Each nibble's codes are built right where they are used."""
    x = tl.load(x_ptrs).to(tl.float32)
    p = _mantissa_code(words, 0) * (x if X_TILE else x[None, :])
    x_sum = x
    for j in tl.static_range(1, 8):
        x = tl.load(x_ptrs + j * stride_xk).to(tl.float32)
        p += _mantissa_code(words, j) * (x if X_TILE else x[None, :])
        x_sum += x
    return p, x_sum


@triton.jit
def _w4a16_gemv_kernel(x_ptr, w_ptr, s_ptr, z_ptr, out_ptr, M, N, steps_per_split, total_steps,
                       stride_xm, stride_xk, stride_wn, stride_sn, stride_os, stride_om, stride_on,
                       GROUP_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, SEG_K: tl.constexpr, X_TILE: tl.constexpr):
    WORDS: tl.constexpr = BLOCK_K // 8
    SEGS: tl.constexpr = BLOCK_K // SEG_K
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < N
    # Rows past N re-read row 0 (their results are never stored): no masks on the weight loads of the hot loop.
    n_row = tl.where(n_ok, n, 0).to(tl.int64)
    word = tl.arange(0, WORDS)
    w_ptrs = w_ptr + n_row[:, None] * stride_wn + word[None, :]  # [BLOCK_N, WORDS] int32 words
    x_ptrs = x_ptr + (8 * word) * stride_xk
    if X_TILE:
        x_ptrs = x_ptrs[None, :] + (n_row * 0)[:, None]
    seg_col = tl.arange(0, SEGS) * SEG_K
    s_ptrs = s_ptr + n_row[:, None] * stride_sn  # [BLOCK_N, 1]
    z_ptrs = z_ptr + n_row[:, None] * stride_sn
    rows = tl.arange(0, BLOCK_M)

    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    start = pid_k * steps_per_split
    end = tl.minimum(start + steps_per_split, total_steps)
    # Software prefetch: step s + 1's weights and scales are requested before step s is computed (the last step
    # re-reads its own tile, so no masks).
    words = tl.load(w_ptrs + start * (BLOCK_K // 8))
    group = ((start * BLOCK_K + seg_col) // GROUP_SIZE)[None, :]
    scale = tl.load(s_ptrs + group)
    zero = tl.load(z_ptrs + group)
    for step in range(start, end):
        k0 = step * BLOCK_K
        k_next = tl.minimum(step + 1, end - 1) * BLOCK_K
        group_next = ((k_next + seg_col) // GROUP_SIZE)[None, :]
        words_next = tl.load(w_ptrs + k_next // 8)
        scale_next = tl.load(s_ptrs + group_next)
        zero_next = tl.load(z_ptrs + group_next)
        scale16 = 16.0 * scale.to(tl.float32)  # [BLOCK_N, SEGS]
        zero16 = zero.to(tl.float32) - scale16
        for mi in tl.static_range(BLOCK_M):
            # M > BLOCK_M / 2 (BLOCK_M is the next power of two): only the rows above that need a run-time check.
            if mi <= BLOCK_M // 2 or mi < M:
                p, xs = _row_products(words, x_ptrs + mi * stride_xm + k0 * stride_xk, stride_xk, X_TILE)
                dot = tl.sum(tl.reshape(p, [BLOCK_N, SEGS, SEG_K // 8]), axis=2)
                if X_TILE:
                    x_sum = tl.sum(tl.reshape(xs, [BLOCK_N, SEGS, SEG_K // 8]), axis=2)
                else:
                    x_sum = tl.sum(tl.reshape(xs, [SEGS, SEG_K // 8]), axis=1)[None, :]
                row = tl.sum(scale16 * dot + zero16 * x_sum, axis=1)
                acc = tl.where(rows[None, :] == mi, acc + row[:, None], acc)
        words, scale, zero = words_next, scale_next, zero_next
    out_ptrs = out_ptr + pid_k * stride_os + rows[None, :] * stride_om + n[:, None] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=n_ok[:, None] & (rows[None, :] < M))


def _is_power_of_two(value: int) -> bool:
    return value >= 1 and value & (value - 1) == 0


def check_gemv_config(config: GemvConfig, m: int) -> None:
    """ValueError for a config (or an M) the kernel cannot run."""
    for name in ("block_n", "block_k", "num_warps"):
        if not _is_power_of_two(getattr(config, name)):
            raise ValueError(f"GemvConfig.{name} must be a power of two, got {getattr(config, name)}")
    if config.block_k < MIN_SEG_K:
        raise ValueError(f"GemvConfig.block_k must be >= {MIN_SEG_K}, got {config.block_k}")
    if config.split_k < 1:
        raise ValueError(f"GemvConfig.split_k must be >= 1, got {config.split_k}")
    if config.num_stages < 1:
        raise ValueError(f"GemvConfig.num_stages must be >= 1, got {config.num_stages}")
    if m > GEMV_MAX_M:
        raise ValueError(f"the GEMV kernel takes at most {GEMV_MAX_M} rows, got M = {m}: use a W4A16Config")


def gemv_steps(k: int, group_size: int, config: GemvConfig) -> tuple[int, int, int]:
    """(SEG_K, BLOCK_K, number of BLOCK_K steps) of a K x group_size problem: SEG_K is the largest power of two
    dividing both block_k and the group size, BLOCK_K the largest power of two <= block_k dividing K."""
    seg_k = math.gcd(config.block_k, group_size & -group_size)
    block_k = config.block_k
    while k % block_k:
        block_k //= 2  # stops at seg_k at the latest: it divides the group size, which divides K
    return seg_k, block_k, k // block_k


def gemv_split_k(k: int, group_size: int, config: GemvConfig) -> int:
    """The number of K slices the kernel will run: config.split_k, less where there are fewer steps than that,
    then the count that leaves no slice empty."""
    steps = gemv_steps(k, group_size, config)[2]
    per_split = triton.cdiv(steps, max(1, min(config.split_k, steps)))
    return triton.cdiv(steps, per_split)


def pick_gemv_config(m: int, n: int, k: int, group_size: int, num_sms: int) -> GemvConfig:
    """The fixed table: 16 weight rows x 1024 columns per step for M <= 4 (with 4 warps a thread holds 4 words of
    each of 4 rows, so every activation it loads serves 4 rows), 32 x 512 above. Split-K while the N tiles alone give
    fewer programs than SMs, or while a slice would walk more than MAX_SLICE_STEPS steps (a slice keeps >= 2 steps;
    summing the slices is a second launch). Measured at one row on an H100 (`benchmarks.w4a16 --sweep`, the fused
    projections of Llama-3-8B and -70B): each shape within 8% of the sweep's best config, once the 70B's down_proj
    (28 steps) is split in two: 78.0 us as one slice, 69.4 as two."""
    if m <= 4:
        config = GemvConfig(block_n=16, block_k=1024, num_warps=4)
    else:
        config = GemvConfig(block_n=32, block_k=512, num_warps=4)
    tiles = triton.cdiv(n, config.block_n)
    steps = gemv_steps(k, group_size, config)[2]
    split_k = 1
    while ((tiles * split_k < num_sms or steps > MAX_SLICE_STEPS * split_k)
           and split_k * 2 <= min(MAX_SPLIT_K, steps // 2)):
        split_k *= 2
    return replace(config, split_k=split_k)


def _int32_words(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [N, K/2] -> int32 [N, K/8] over the same bytes (K % 8 == 0 for every supported group size)."""
    if packed.stride(1) != 1 or packed.stride(0) % 4 or packed.storage_offset() % 4:
        packed = packed.contiguous()
    return packed.view(torch.int32)


def launch_gemv(x2: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor,
                target: torch.Tensor, group_size: int, config: GemvConfig, split_k: int) -> None:
    """Runs the kernel: x2 [M, K], packed uint8 [N, K/2], scales/mins [N, groups] with one row stride; target is
    the output [M, N] when split_k == 1, else fp32 partials [split_k, M, N] (split_k from gemv_split_k)."""
    m, k = x2.shape
    n = packed.shape[0]
    words = _int32_words(packed)
    seg_k, block_k, steps = gemv_steps(k, group_size, config)
    steps_per_split = triton.cdiv(steps, split_k)
    stride_os = 0 if split_k == 1 else target.stride(0)
    grid = (triton.cdiv(n, config.block_n), split_k)
    _w4a16_gemv_kernel[grid](
        x2, words, scales, mins, target, m, n, steps_per_split, steps,
        x2.stride(0), x2.stride(1), words.stride(0), scales.stride(0), stride_os, target.stride(-2),
        target.stride(-1),
        GROUP_SIZE=group_size, BLOCK_M=triton.next_power_of_2(m), BLOCK_N=config.block_n, BLOCK_K=block_k,
        SEG_K=seg_k, X_TILE=config.x_in_tile, num_warps=config.num_warps, num_stages=config.num_stages)
