"""One tile of a sequence's cached keys and values, looked up through its block table (both Triton attention
kernels walk the KV cache with it)."""
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
