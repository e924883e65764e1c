"""The attention layer of a model: stores the step's K/V in the paged cache, then attends over it."""
from __future__ import annotations

import torch

from tiers.attention import torch_attention
from tiers.attention.metadata import AttentionMetadata


class PagedAttention(torch.nn.Module):
    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim, self.scale = num_heads, num_kv_heads, head_dim, scale
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)
        self.use_triton = False
        self.layer_idx = 0  # set by the model: which of AttentionMetadata.kv_caches is this layer's

    def bind_cache(self, k_cache: torch.Tensor, v_cache: torch.Tensor, use_triton: bool) -> None:
        self.k_cache, self.v_cache, self.use_triton = k_cache, v_cache, use_triton

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        k_cache, v_cache, use_triton = self.k_cache, self.v_cache, self.use_triton
        if meta.kv_caches is not None:
            k_cache, v_cache = meta.kv_caches[self.layer_idx]
            use_triton = meta.use_triton
        if use_triton:
            from tiers.attention.triton_kv_store import store_kv_cache
            from tiers.attention.triton_paged_attention import paged_attention

            store_kv_cache(k, v, k_cache, v_cache, meta.slot_mapping)
            return paged_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                                   meta.query_start_loc, meta.max_query_len, self.scale)
        torch_attention.store_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        return torch_attention.paged_attention(q, k, v, k_cache, v_cache, meta, self.scale)
