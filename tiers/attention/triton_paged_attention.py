"""One Triton paged-attention kernel for prefill chunks, decodes and (k+1)-token verification in one launch.

Modelled on vLLM's unified Triton attention kernel (2D variant). A program handles BLOCK_Q query tokens of one
sequence for one KV head; the query heads sharing that KV head are packed with the tokens into the M tile
(row m = token m // GROUP, head m % GROUP), so GQA reads each KV tile once per group. Programs are numbered
over all query blocks of the batch and find their sequence by a binary search over query_start_loc. Each walks
its sequence's keys TILE_SIZE positions at a time (looking up every key's physical block in the block table, so
any block size works) with an online softmax in fp32; query row q_pos (of q_len) sees key positions
< seq_len - q_len + q_pos + 1. Decode-only steps on CUDA take triton_decode_attention's split-KV path instead.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from tiers.attention import triton_decode_attention
from tiers.attention.triton_kv_tile import accumulate_tile, load_kv_tile, tile_scores
from tiers.triton_device import unavailable

# Key positions per inner-loop step; tl.dot on GPUs needs every tile dimension >= 16.
TILE_SIZE = 32
MIN_BLOCK_M = 16
# Query tiles with this many rows once the step has a long prefill: fewer programs re-reading the same KV.
PREFILL_BLOCK_M = 64


@triton.jit
def _find_seq_idx(query_start_ptr, q_block_idx, num_seqs, BLOCK_Q: tl.constexpr):
    """The sequence owning global query block q_block_idx, where sequence i's blocks start at
    query_start[i] // BLOCK_Q + i (an upper bound that leaves every sequence room for a partial block)."""
    left: tl.int32 = 0
    right = num_seqs
    while left < right:
        mid = (left + right) // 2
        first_block = tl.load(query_start_ptr + mid) // BLOCK_Q + mid
        if first_block <= q_block_idx:
            left = mid + 1
        else:
            right = mid
    return left - 1


@triton.jit
def _paged_attention_kernel(
        q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, block_tables_ptr, seq_lens_ptr, query_start_ptr, scale, num_seqs,
        max_blocks_per_seq,
        stride_qt, stride_qh, stride_ot, stride_oh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
        stride_bt,
        GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr, HEAD_DIM: tl.constexpr,
        HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, IS_FP32: tl.constexpr):
    q_block_idx = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = _find_seq_idx(query_start_ptr, q_block_idx, num_seqs, BLOCK_Q)
    q_start = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_start
    q_block = q_block_idx - (q_start // BLOCK_Q + seq)
    if q_block * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context_len = seq_len - q_len

    m = tl.arange(0, BLOCK_M)
    q_pos = q_block * BLOCK_Q + m // GROUP
    head = kv_head * GROUP + m % GROUP
    row_ok = (m < BLOCK_Q * GROUP) & (q_pos < q_len)
    d = tl.arange(0, HEAD_DIM_PAD)
    d_ok = d < HEAD_DIM
    token = (q_start + q_pos).to(tl.int64)
    q = tl.load(q_ptr + token[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)
    # The last query row of this tile sees the most keys: that bounds the loop.
    last_q = tl.minimum((q_block + 1) * BLOCK_Q, q_len)
    num_keys = context_len + last_q
    t = tl.arange(0, TILE)
    table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for j in range(0, tl.cdiv(num_keys, TILE)):
        key_pos = j * TILE + t
        key_ok = key_pos < num_keys
        k, v = load_kv_tile(k_cache_ptr, v_cache_ptr, table_row, key_pos, key_ok, kv_head, d, d_ok,
                            max_blocks_per_seq, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                            BLOCK_SIZE)
        scores = tile_scores(q, k, IS_FP32)
        visible = (key_pos[None, :] < context_len + q_pos[:, None] + 1) & key_ok[None, :] & row_ok[:, None]
        scores = tl.where(visible, scores * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # padding rows see nothing: keep them NaN-free
        p = tl.exp(scores - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = accumulate_tile(acc, alpha, p, v, IS_FP32)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


def _check_inputs(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                  seq_lens: torch.Tensor, query_start_loc: torch.Tensor, out: torch.Tensor | None) -> None:
    if query.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"expected query [T, H, D] and equal caches [blocks, block_size, kv_heads, D], got "
                         f"{tuple(query.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    num_heads, head_dim = query.shape[1], query.shape[2]
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    if k_cache.shape[3] != head_dim or num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads of dim {head_dim} do not fit {num_kv_heads} KV heads of dim "
                         f"{k_cache.shape[3]}")
    if block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two, got {block_size}")
    if not (query.dtype == k_cache.dtype == v_cache.dtype) or not query.is_floating_point():
        raise ValueError(f"query and caches need one floating dtype, got {query.dtype}, {k_cache.dtype}, "
                         f"{v_cache.dtype}")
    num_seqs = seq_lens.shape[0]
    if (seq_lens.dim() != 1 or query_start_loc.shape != (num_seqs + 1,) or block_tables.dim() != 2
            or block_tables.shape[0] != num_seqs):
        raise ValueError(f"seq_lens {tuple(seq_lens.shape)}, query_start_loc {tuple(query_start_loc.shape)} and "
                         f"block_tables {tuple(block_tables.shape)} disagree on the number of sequences")
    for name, t in (("block_tables", block_tables), ("seq_lens", seq_lens), ("query_start_loc", query_start_loc)):
        if t.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{name} must be int32 or int64, got {t.dtype}")
    if block_tables.stride(1) != 1 or not seq_lens.is_contiguous() or not query_start_loc.is_contiguous():
        raise ValueError("block_tables rows, seq_lens and query_start_loc must be contiguous")
    if query.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("the head dimension of query and caches must be contiguous")
    if out is not None and (out.shape != query.shape or out.dtype != query.dtype or out.stride(2) != 1):
        raise ValueError(f"out must be a {query.dtype} tensor of shape {tuple(query.shape)} with a contiguous "
                         f"head dimension, got {out.dtype} {tuple(out.shape)}")
    devices = {t.device for t in (query, k_cache, v_cache, block_tables, seq_lens, query_start_loc)}
    if len(devices) > 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")
    problem = unavailable_on(query.device)
    if problem:
        raise ValueError(problem)


def unavailable_on(device: torch.device) -> str | None:
    """Why the kernel cannot run on `device`'s tensors in this process (tiers.triton_device), or None if it can."""
    return unavailable(device, _paged_attention_kernel)


def _block_m(group: int, max_query_len: int) -> int:
    block_m = max(MIN_BLOCK_M, triton.next_power_of_2(group))
    return max(block_m, PREFILL_BLOCK_M) if max_query_len * group >= PREFILL_BLOCK_M else block_m


def _use_split_kv(split_kv: bool | None, query: torch.Tensor, num_seqs: int, max_query_len: int) -> bool:
    """Whether the step goes to triton_decode_attention: by default every decode-only step on CUDA
    (triton_decode_attention.FORCE_SPLIT_KV can change that default)."""
    decode_only = max_query_len == 1 and query.shape[0] == num_seqs
    if split_kv is None:
        forced = triton_decode_attention.FORCE_SPLIT_KV
        return decode_only and (query.device.type == "cuda" if forced is None else forced)
    if split_kv and not decode_only:
        raise ValueError(f"split_kv needs a decode-only step (max_query_len 1, one query row per sequence), got "
                         f"max_query_len {max_query_len}, {query.shape[0]} rows for {num_seqs} sequences")
    return split_kv


def paged_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                    seq_lens: torch.Tensor, query_start_loc: torch.Tensor, max_query_len: int, scale: float,
                    out: torch.Tensor | None = None, split_kv: bool | None = None,
                    num_splits: int | None = None) -> torch.Tensor:
    """Causal attention of each sequence's new query rows over its paged context.

    query [T, H, D]; k_cache/v_cache [num_blocks, block_size, Hkv, D]; block_tables [S, max_blocks];
    seq_lens [S] (context incl. the new tokens, whose K/V are already stored); query_start_loc [S + 1];
    max_query_len >= every sequence's query length. Returns out ([T, H, D], query's dtype).
    split_kv: whether a decode-only step splits each sequence's keys across programs (triton_decode_attention;
    None: on CUDA); num_splits forces that path's split count.
    """
    _check_inputs(query, k_cache, v_cache, block_tables, seq_lens, query_start_loc, out)
    out = torch.empty_like(query) if out is None else out
    num_tokens, num_heads, head_dim = query.shape
    num_seqs, num_kv_heads = seq_lens.shape[0], k_cache.shape[2]
    if _use_split_kv(split_kv, query, num_seqs, max_query_len):
        return triton_decode_attention.split_kv_decode(query, k_cache, v_cache, block_tables, seq_lens, scale, out,
                                                       num_splits)
    if num_seqs == 0 or num_tokens == 0:
        return out
    group = num_heads // num_kv_heads
    block_m = _block_m(group, max_query_len)
    block_q = block_m // group
    # sum_i ceil(q_len_i / BLOCK_Q) <= num_tokens // BLOCK_Q + num_seqs; surplus programs return at once.
    grid = (num_tokens // block_q + num_seqs, num_kv_heads)
    _paged_attention_kernel[grid](
        query, k_cache, v_cache, out, block_tables, seq_lens, query_start_loc, scale, num_seqs,
        block_tables.shape[1],
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2), block_tables.stride(0),
        GROUP=group, BLOCK_M=block_m, BLOCK_Q=block_q, HEAD_DIM=head_dim,
        HEAD_DIM_PAD=max(16, triton.next_power_of_2(head_dim)), BLOCK_SIZE=k_cache.shape[1], TILE=TILE_SIZE,
        IS_FP32=query.dtype == torch.float32)
    return out
