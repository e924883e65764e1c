"""Paged attention in plain PyTorch: the CPU path (fast there) and the fallback without Triton."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tiers.attention.metadata import AttentionMetadata


def store_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    num_kv_heads, head_dim = key.shape[1], key.shape[2]
    k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, key)
    v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, value)


def gather_blocks(cache: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """cache[block_table] as whole-block row copies: several times faster on CPU than advanced indexing."""
    rows = cache.view(cache.shape[0], -1).index_select(0, block_table.reshape(-1))
    return rows.view(*block_table.shape, *cache.shape[1:])


def paged_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """query [T, H, D]; key/value [T, Hkv, D] are this step's new tokens, already stored in the caches."""
    num_heads, head_dim = query.shape[1], query.shape[2]
    num_kv_heads = k_cache.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty_like(query)
    for dg in meta.decode_groups:
        # The query heads of one KV head become the query-length axis, so GQA needs no KV repeat.
        n = dg.end - dg.start  # rows
        if dg.contiguous is not None:
            first, seq_len = dg.contiguous
            num_blocks = -(-seq_len // k_cache.shape[1])
            keys = k_cache[first:first + num_blocks].flatten(0, 1)[:seq_len].transpose(0, 1).unsqueeze(0)
            values = v_cache[first:first + num_blocks].flatten(0, 1)[:seq_len].transpose(0, 1).unsqueeze(0)
        else:
            keys = gather_blocks(k_cache, dg.block_tables).flatten(1, 2).transpose(1, 2)  # [n, Hkv, L, D]
            values = gather_blocks(v_cache, dg.block_tables).flatten(1, 2).transpose(1, 2)
        if dg.q_len == 1:
            q = query[dg.start:dg.end].view(n, num_kv_heads, group, head_dim)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=dg.mask, scale=scale)
            out[dg.start:dg.end] = o.reshape(n, num_heads, head_dim)
            continue
        # Verification: the chunk's tokens times the query heads of a KV head form the query axis.
        n, t = n // dg.q_len, dg.q_len
        q = query[dg.start:dg.end].view(n, t, num_kv_heads, group, head_dim).transpose(1, 2)
        mask = dg.mask.repeat_interleave(group, dim=2) if group > 1 else dg.mask
        o = F.scaled_dot_product_attention(q.reshape(n, num_kv_heads, t * group, head_dim), keys, values,
                                           attn_mask=mask, scale=scale)
        out[dg.start:dg.end] = o.view(n, num_kv_heads, t, group, head_dim).transpose(1, 2).reshape(
            n * t, num_heads, head_dim)
    for chunk in meta.prefills:
        q = query[chunk.start:chunk.end].transpose(0, 1)  # [H, q, D]
        if chunk.mask is None:
            k = key[chunk.start:chunk.end].transpose(0, 1)
            v = value[chunk.start:chunk.end].transpose(0, 1)
        else:
            k = gather_blocks(k_cache, chunk.block_table).flatten(0, 1)[:chunk.seq_len].transpose(0, 1)
            v = gather_blocks(v_cache, chunk.block_table).flatten(0, 1)[:chunk.seq_len].transpose(0, 1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=chunk.mask, is_causal=chunk.mask is None,
                                           scale=scale, enable_gqa=group > 1)
        out[chunk.start:chunk.end] = o.transpose(0, 1)
    return out
