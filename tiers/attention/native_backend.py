"""Paged attention in the native library (tiers/native/ops.c) for float32 CPU steps: each layer stores its KV and
attends in one C call instead of the torch backend's dozen-odd ops, one query token at a time, so a token's
result does not depend on how its sequence was chunked or batched (prefill chunks, decodes and verifications
alike). Other dtypes and devices go to the torch backend unchanged."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tiers.attention.backend import BatchLayout, KVCaches
from tiers.attention.torch_backend import TorchAttentionBackend, TorchAttentionMetadata
from tiers.native import NativeLibrary
from tiers.native.ops import paged_attention


@dataclass
class NativeAttentionMetadata(TorchAttentionMetadata):
    # int64 (token_seq, visible, block_tables) for the C kernel: each token's row of block_tables and how many of
    # its sequence's tokens it sees
    token_tables: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None


class NativeCPUAttentionBackend(TorchAttentionBackend):
    name = "native"

    def __init__(self, native: NativeLibrary) -> None:
        self.native = native

    def prepare_metadata(self, layout: BatchLayout, kv_caches: KVCaches, device: torch.device,
                         dtype: torch.dtype) -> TorchAttentionMetadata:
        if dtype != torch.float32 or device.type != "cpu":
            return super().prepare_metadata(layout, kv_caches, device, dtype)
        block_tables = layout.block_tables()
        query_lens = torch.tensor([layout.query_len(i) for i in range(len(layout.seq_lens))])
        token_seq = torch.repeat_interleave(torch.arange(len(query_lens)), query_lens)
        position = torch.arange(len(token_seq)) - torch.tensor(layout.query_start_loc[:-1])[token_seq]
        visible = (torch.tensor(layout.seq_lens) - query_lens)[token_seq] + position + 1
        return NativeAttentionMetadata(**self.common_fields(layout, block_tables, device), kv_caches=kv_caches,
                                       backend=self, token_tables=(token_seq, visible,
                                                                   block_tables.to(torch.int64).contiguous()))

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: TorchAttentionMetadata, scale: float) -> torch.Tensor:
        tables = getattr(meta, "token_tables", None)
        if tables is None:
            return super().forward(query, key, value, k_cache, v_cache, meta, scale)
        query, key, value = (t if _heads_packed(t) else t.float().contiguous() for t in (query, key, value))
        return paged_attention(self.native, query, key, value, k_cache, v_cache, meta.slot_mapping, *tables, scale)


def _heads_packed(t: torch.Tensor) -> bool:
    """float32 [T, heads, D] with each row's heads back to back (rows may be strided)."""
    return t.dtype == torch.float32 and t.stride(2) == 1 and t.stride(1) == t.shape[2]
