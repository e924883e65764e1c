"""One tile of attention over the paged KV cache, the step both Triton attention kernels repeat: the tile's keys and
values looked up through the block table, the query-key scores, and the online softmax's output update."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def load_kv_tile(k_cache_ptr, v_cache_ptr, table_row, key_pos, key_ok, kv_head, d, d_ok, max_blocks_per_seq,
                 stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, BLOCK_SIZE: tl.constexpr):
    """K as [HEAD_DIM_PAD, TILE] and V as [TILE, HEAD_DIM_PAD] at key positions key_pos (zeros where not key_ok)."""
    block_id = tl.load(table_row + key_pos // BLOCK_SIZE,
                       mask=key_ok & (key_pos // BLOCK_SIZE < max_blocks_per_seq), other=0).to(tl.int64)
    in_block = key_pos % BLOCK_SIZE
    k = tl.load(k_cache_ptr + block_id[None, :] * stride_kb + in_block[None, :] * stride_ks
                + kv_head * stride_kh + d[:, None],
                mask=d_ok[:, None] & key_ok[None, :], other=0.0)
    v = tl.load(v_cache_ptr + block_id[:, None] * stride_vb + in_block[:, None] * stride_vs
                + kv_head * stride_vh + d[None, :],
                mask=key_ok[:, None] & d_ok[None, :], other=0.0)
    return k, v


@triton.jit
def tile_scores(q, k, IS_FP32: tl.constexpr):
    """q [M, HEAD_DIM_PAD] @ k [HEAD_DIM_PAD, TILE]: exact fp32 products in fp32, else bf16/fp16 operands with
    fp32 accumulation."""
    if IS_FP32:
        return tl.dot(q, k, input_precision="ieee")
    return tl.dot(q, k)


@triton.jit
def accumulate_tile(acc, alpha, p, v, IS_FP32: tl.constexpr):
    """The online softmax's output update: acc rescaled by alpha plus p [M, TILE] @ v [TILE, HEAD_DIM_PAD]."""
    if IS_FP32:
        return acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    return acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
