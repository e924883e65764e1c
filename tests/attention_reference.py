"""Readable PyTorch references for the Triton kernels: the tests hold both to these. No Triton needed."""
from __future__ import annotations

import torch


def store_kv_cache_reference(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                             slot_mapping: torch.Tensor) -> None:
    """key/value [T, Hkv, D] into caches [num_blocks, block_size, Hkv, D]: token t goes to slot slot_mapping[t],
    i.e. block slot // block_size, offset slot % block_size; slot -1 means skip."""
    block_size = k_cache.shape[1]
    for token, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        k_cache[slot // block_size, slot % block_size] = key[token]
        v_cache[slot // block_size, slot % block_size] = value[token]


def gather_context(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The first seq_len tokens of one sequence as a contiguous [seq_len, Hkv, D] tensor."""
    num_blocks = -(-seq_len // cache.shape[1])
    return cache[block_table[:num_blocks].long()].flatten(0, 1)[:seq_len]


def paged_attention_reference(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              block_tables: torch.Tensor, seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
                              scale: float) -> torch.Tensor:
    """query [T, H, D]; caches [num_blocks, block_size, Hkv, D]. Sequence i owns query rows
    query_start_loc[i]:query_start_loc[i+1] (its last q_len tokens) and attends over its first seq_lens[i] cached
    tokens; row q_pos sees key positions < seq_len - q_len + q_pos + 1. Computed in fp32, returned in query's dtype."""
    group = query.shape[1] // k_cache.shape[2]
    out = torch.empty_like(query)
    starts = query_start_loc.tolist()
    for i, seq_len in enumerate(seq_lens.tolist()):
        rows = slice(starts[i], starts[i + 1])
        q = query[rows].float()  # [q_len, H, D]
        q_len = q.shape[0]
        # Query head h reads KV head h // group.
        k = gather_context(k_cache, block_tables[i], seq_len).float().repeat_interleave(group, dim=1)  # [L, H, D]
        v = gather_context(v_cache, block_tables[i], seq_len).float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        q_pos = torch.arange(q_len, device=query.device)[:, None]
        key_pos = torch.arange(seq_len, device=query.device)[None, :]
        scores = scores.masked_fill(key_pos >= seq_len - q_len + q_pos + 1, float("-inf"))
        out[rows] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).to(query.dtype)
    return out
