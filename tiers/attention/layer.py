"""The attention layer of a model: hands the step's q/k/v and this layer's KV cache to the step's backend."""
from __future__ import annotations

import torch

from tiers.attention.backend import AttentionMetadata


class PagedAttention(torch.nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.layer_idx = 0  # set by the model: which of AttentionMetadata.kv_caches is this layer's

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        k_cache, v_cache = meta.kv_caches[self.layer_idx]
        return meta.backend.forward(q, k, v, k_cache, v_cache, meta, self.scale)
