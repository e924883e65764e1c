"""Paged attention in the native library (tiers/native/ops.c) for float32 CPU steps: each layer stores its KV and
attends in one C call instead of the torch backend's dozen-odd ops, one query token at a time, so a token's
result does not depend on how its sequence was chunked or batched (prefill chunks, decodes and verifications
alike). Other dtypes and devices go to the torch backend unchanged."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
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
        # the per-token tables in numpy (token_tables), the rest through the shared builders, which use it too:
        # torch's constructors, repeat_interleave and indexing took ~400 us a forward in the 0.5B's decode (their
        # code cold after the weights streamed through the caches), this ~150-160
        tables = layout.block_table_array()
        token_seq, visible = token_tables(layout)
        return NativeAttentionMetadata(**self.common_fields(layout, torch.from_numpy(tables.astype(np.int32)), device),
                                       kv_caches=kv_caches, backend=self,
                                       token_tables=(token_seq, visible, torch.from_numpy(tables)))

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: TorchAttentionMetadata, scale: float) -> torch.Tensor:
        tables = getattr(meta, "token_tables", None)
        if tables is None:
            return super().forward(query, key, value, k_cache, v_cache, meta, scale)
        query, key, value = (t if _heads_packed(t) else t.float().contiguous() for t in (query, key, value))
        return paged_attention(self.native, query, key, value, k_cache, v_cache, meta.slot_mapping, *tables, scale)


def token_tables(layout: BatchLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 per token of the step: its sequence (row of the block tables), and how many of that sequence's tokens
    it sees (its 1-based position in the context)."""
    starts = np.asarray(layout.query_start_loc, dtype=np.int64)
    query_lens = np.diff(starts)
    token_seq = np.repeat(np.arange(len(query_lens), dtype=np.int64), query_lens)
    first_seen = np.asarray(layout.seq_lens, dtype=np.int64) - query_lens - starts[:-1]
    visible = np.arange(1, len(token_seq) + 1, dtype=np.int64) + first_seen[token_seq]
    return torch.from_numpy(token_seq), torch.from_numpy(visible)


def _heads_packed(t: torch.Tensor) -> bool:
    """float32 [T, heads, D] with each row's heads back to back (rows may be strided)."""
    return t.dtype == torch.float32 and t.stride(2) == 1 and t.stride(1) == t.shape[2]
