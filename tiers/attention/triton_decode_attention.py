"""Split-KV ("flash-decoding") attention for decode-only steps: every sequence attends with one query token.

The unified kernel (triton_paged_attention) gives a decode one program per (sequence, KV head) that walks all its
keys serially: at batch 1 that is num_kv_heads programs on a GPU of 100+ SMs, latency-bound. Here the key range of
each sequence is cut into NUM_SPLITS slices of keys_per_split positions. Kernel 1, grid (num_seqs, num_kv_heads,
NUM_SPLITS), attends the GQA query heads of one KV head over one slice with the same block-table lookup and online
softmax in fp32, and writes that slice's normalised output and log-sum-exp per query head. Kernel 2, grid
(num_seqs, num_heads), merges the slices that hold keys in split order (deterministic) into the output.

The split count (the grid) comes from shapes only (the batch and head counts, the SM count), never from
seq_lens' values: a CUDA graph captures the launch once and replays it with other lengths.
Each program derives its sequence's slice length on the device, cdiv(seq_len, NUM_SPLITS) rounded up to a tile
(as vLLM's decode kernel does), so every split works at any context length, not only near the longest. A slice
that starts at or past its sequence's length writes nothing, and the merge reads only the slices that hold keys,
so a sequence of length 0 (a graph's idle row) gets zeros.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from tiers.attention.triton_kv_tile import accumulate_tile, load_kv_tile, tile_scores

# Key positions per inner-loop step, as in the unified kernel; tl.dot on GPUs needs every tile dimension >= 16.
TILE = 32
MIN_BLOCK_M = 16
# Aim for this many programs per SM (latency hiding) when sequences are long enough to split.
PROGRAMS_PER_SM = 2
MAX_SPLITS = 64
# Without a GPU (Triton's interpreter) the picker pretends to fill this many SMs.
INTERPRETER_SM_COUNT = 4
# Which path paged_attention gives decode-only steps by default: None, this one on CUDA and the unified kernel in
# the interpreter; True or False, this one or the unified kernel everywhere (tests).
FORCE_SPLIT_KV: bool | None = None


@triton.jit
def _keys_per_split(seq_len, num_splits, TILE: tl.constexpr):
    """A sequence's slice length: its keys shared among the splits, rounded up to whole tiles (at least one)."""
    return tl.maximum(tl.cdiv(tl.cdiv(seq_len, num_splits), TILE), 1) * TILE


@triton.jit
def _split_kernel(
        q_ptr, k_cache_ptr, v_cache_ptr, part_out_ptr, part_lse_ptr, block_tables_ptr, seq_lens_ptr, scale,
        max_blocks_per_seq,
        stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, stride_bt,
        GROUP: tl.constexpr, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
        BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, IS_FP32: tl.constexpr):
    # The GROUP query heads fill the first rows of a BLOCK_M >= 16 tile for tl.dot. A tl.sum dot product would
    # skip the padding rows but needs a [GROUP, TILE, HEAD_DIM] product in registers; the padding only costs tensor
    # core work, which a memory-bound decode has to spare.
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    keys_per_split = _keys_per_split(seq_len, tl.num_programs(2), TILE)
    start = split * keys_per_split
    if start >= seq_len:
        return
    end = tl.minimum(start + keys_per_split, seq_len)

    m = tl.arange(0, BLOCK_M)
    row_ok = m < GROUP
    head = kv_head * GROUP + m
    d = tl.arange(0, HEAD_DIM_PAD)
    d_ok = d < HEAD_DIM
    q = tl.load(q_ptr + seq.to(tl.int64) * stride_qt + head[:, None] * stride_qh + d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)
    t = tl.arange(0, TILE)
    table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for j in range(0, tl.cdiv(end - start, TILE)):
        key_pos = start + j * TILE + t
        key_ok = key_pos < end
        k, v = load_kv_tile(k_cache_ptr, v_cache_ptr, table_row, key_pos, key_ok, kv_head, d, d_ok,
                            max_blocks_per_seq, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                            BLOCK_SIZE)
        scores = tile_scores(q, k, IS_FP32)
        # Every tile holds at least one key (the slice is not empty), so each row's max is finite.
        scores = tl.where(key_ok[None, :], scores * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        p = tl.exp(scores - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = accumulate_tile(acc, alpha, p, v, IS_FP32)
        m_i = m_new

    # Partials are [num_seqs, num_heads, num_splits, HEAD_DIM] and [num_seqs, num_heads, num_splits], contiguous.
    part = (seq.to(tl.int64) * (tl.num_programs(1) * GROUP) + head) * tl.num_programs(2) + split
    tl.store(part_out_ptr + part[:, None] * HEAD_DIM + d[None, :], acc / l_i[:, None],
             mask=row_ok[:, None] & d_ok[None, :])
    tl.store(part_lse_ptr + part, m_i + tl.log(l_i), mask=row_ok)


@triton.jit
def _combine_kernel(part_out_ptr, part_lse_ptr, out_ptr, seq_lens_ptr, num_splits, stride_ot, stride_oh,
                    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, TILE: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    num_active = tl.minimum(tl.cdiv(seq_len, _keys_per_split(seq_len, num_splits, TILE)), num_splits)
    first = (seq.to(tl.int64) * tl.num_programs(1) + head) * num_splits
    d = tl.arange(0, HEAD_DIM_PAD)
    d_ok = d < HEAD_DIM
    lse_max = float("-inf")
    weight_sum = 0.0
    acc = tl.zeros([HEAD_DIM_PAD], dtype=tl.float32)
    for s in range(0, num_active):
        lse = tl.load(part_lse_ptr + first + s)
        part = tl.load(part_out_ptr + (first + s) * HEAD_DIM + d, mask=d_ok, other=0.0)
        new_max = tl.maximum(lse_max, lse)
        rescale = tl.exp(lse_max - new_max)
        weight = tl.exp(lse - new_max)
        acc = acc * rescale + part * weight
        weight_sum = weight_sum * rescale + weight
        lse_max = new_max
    # No slice with keys (seq_len 0): acc stays 0 and so does the output.
    out = acc / tl.where(weight_sum > 0.0, weight_sum, 1.0)
    tl.store(out_ptr + seq.to(tl.int64) * stride_ot + head * stride_oh + d, out.to(out_ptr.dtype.element_ty),
             mask=d_ok)


@functools.lru_cache(maxsize=None)
def _cuda_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """The device's SM count; INTERPRETER_SM_COUNT off CUDA."""
    if device.type != "cuda":
        return INTERPRETER_SM_COUNT
    return _cuda_sm_count(device.index if device.index is not None else torch.cuda.current_device())


def pick_num_splits(num_seqs: int, num_kv_heads: int, num_sms: int) -> int:
    """The split count from the batch's shape only: one split when num_seqs * num_kv_heads programs already give
    every SM PROGRAMS_PER_SM of them, else enough splits for that, at most MAX_SPLITS. Not from the block table's
    width, which differs between an eager step (its longest sequence) and a graph (max_model_len): a decode batch
    gets the same splits, hence the same sums, either way. A short sequence leaves the splits past its keys idle
    (slices are at least one tile), and those return at once."""
    programs = num_seqs * num_kv_heads
    if programs < 1 or num_sms < 1:
        raise ValueError(f"need >= 1 program and SM, got {num_seqs} x {num_kv_heads} programs, {num_sms} SMs")
    return max(1, min(triton.cdiv(PROGRAMS_PER_SM * num_sms, programs), MAX_SPLITS))


def split_kv_decode(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                    seq_lens: torch.Tensor, scale: float, out: torch.Tensor,
                    num_splits: int | None = None) -> torch.Tensor:
    """Decode attention of query [num_seqs, H, D] (sequence i's one token is row i) into out, with inputs as
    triton_paged_attention.paged_attention has checked them. num_splits forces the split count (tests)."""
    num_seqs, num_heads, head_dim = query.shape
    if seq_lens.shape[0] != num_seqs:
        raise ValueError(f"a decode-only step has one query row per sequence, got {num_seqs} rows for "
                         f"{seq_lens.shape[0]} sequences")
    num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    if num_seqs == 0:
        return out
    if num_splits is None:
        num_splits = pick_num_splits(num_seqs, num_kv_heads, sm_count(query.device))
    elif num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    group = num_heads // num_kv_heads
    head_dim_pad = max(16, triton.next_power_of_2(head_dim))
    part_out = torch.empty(num_seqs, num_heads, num_splits, head_dim, dtype=torch.float32, device=query.device)
    part_lse = torch.empty(num_seqs, num_heads, num_splits, dtype=torch.float32, device=query.device)
    _split_kernel[(num_seqs, num_kv_heads, num_splits)](
        query, k_cache, v_cache, part_out, part_lse, block_tables, seq_lens, scale, block_tables.shape[1],
        query.stride(0), query.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2), block_tables.stride(0),
        GROUP=group, BLOCK_M=max(MIN_BLOCK_M, triton.next_power_of_2(group)), HEAD_DIM=head_dim,
        HEAD_DIM_PAD=head_dim_pad, BLOCK_SIZE=block_size, TILE=TILE, IS_FP32=query.dtype == torch.float32)
    _combine_kernel[(num_seqs, num_heads)](
        part_out, part_lse, out, seq_lens, num_splits, out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, HEAD_DIM_PAD=head_dim_pad, TILE=TILE)
    return out
