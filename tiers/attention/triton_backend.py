"""The Triton backend: one kernel stores the step's K/V, one unified kernel attends every sequence of the step."""
from __future__ import annotations

import torch

from tiers.attention.backend import AttentionBackend, AttentionMetadata
from tiers.attention.triton_kv_store import store_kv_cache
from tiers.attention.triton_paged_attention import paged_attention


class TritonAttentionBackend(AttentionBackend):
    name = "triton"
    supports_cuda_graphs = True

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        store_kv_cache(key, value, k_cache, v_cache, meta.slot_mapping)
        return paged_attention(query, k_cache, v_cache, meta.block_tables, meta.seq_lens, meta.query_start_loc,
                               meta.max_query_len, scale)
