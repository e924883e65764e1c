"""The attention backend interface: one object, chosen once per engine, that builds a step's attention metadata
and runs the attention of every layer (vLLM's AttentionBackend / mini-sglang's attention backends)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

MAX_GROUPED_QUERY = 16  # chunks this short over a cached prefix (draft verifications) are attended in groups

KVCaches = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (k_cache, v_cache)


@dataclass
class BatchLayout:
    """One step's sequences on the host, in batch order: what every backend builds its metadata from."""
    block_ids: list[list[int]]  # each sequence's block table
    seq_lens: list[int]  # context length including this step's tokens
    query_start_loc: list[int]  # [num_seqs + 1]: sequence i owns rows query_start_loc[i]:query_start_loc[i + 1]
    slot_mapping: list[int]  # [num_tokens]: the KV slot of each new token
    block_size: int

    def query_len(self, i: int) -> int:
        return self.query_start_loc[i + 1] - self.query_start_loc[i]

    def block_table_array(self) -> np.ndarray:
        """[num_seqs, max_blocks] int64, padded with block 0."""
        tables = np.zeros((len(self.block_ids), max(len(ids) for ids in self.block_ids)), dtype=np.int64)
        for row, ids in zip(tables, self.block_ids):
            row[:len(ids)] = ids
        return tables

    def block_tables(self) -> torch.Tensor:
        """[num_seqs, max_blocks] int32 on the host, padded with block 0."""
        return torch.from_numpy(self.block_table_array().astype(np.int32))


@dataclass
class AttentionMetadata:
    """What every attention layer needs about one step; a backend may extend it with its own fields."""
    slot_mapping: torch.Tensor  # [num_tokens] int64
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor  # [num_seqs] int32
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    max_query_len: int
    # The KV pool this forward reads and writes: a draft model that shares its weights with another engine keeps
    # its own pool, so caches travel with the step rather than being bound to the layers.
    kv_caches: KVCaches
    backend: AttentionBackend


def query_kind(query_len: int, context_len: int) -> int:
    """0: a single-token decode; 1: a short chunk over a cached prefix (a verification); 2: a prefill chunk."""
    if query_len == 1:
        return 0
    return 1 if query_len <= MAX_GROUPED_QUERY and context_len > 0 else 2


class AttentionBackend(ABC):
    name: ClassVar[str]
    # Whether a step's forward through this backend can be captured in a CUDA graph: no host synchronisation, and
    # its launches depend only on the metadata's shapes, not on their values.
    supports_cuda_graphs: ClassVar[bool] = False

    def batch_order(self, query_lens: list[int], context_lens: list[int]) -> list[int]:
        """The order of the step's sequences in the batch: decodes first by context length, then verifications by
        length and context length, then prefill chunks."""
        return sorted(range(len(query_lens)),
                      key=lambda i: (query_kind(query_lens[i], context_lens[i]), query_lens[i], context_lens[i]))

    def prepare_metadata(self, layout: BatchLayout, kv_caches: KVCaches, device: torch.device,
                         dtype: torch.dtype) -> AttentionMetadata:
        return AttentionMetadata(**self.common_fields(layout, layout.block_tables(), device), kv_caches=kv_caches,
                                 backend=self)

    @staticmethod
    def common_fields(layout: BatchLayout, block_tables: torch.Tensor, device: torch.device) -> dict:
        """Built through numpy: with torch's tensor constructors (their code cold after a decode step's weights
        streamed through the caches) the native backend's metadata took ~255 us a forward in the 0.5B's CPU decode,
        ~150-160 with numpy's."""
        def on_device(t: torch.Tensor) -> torch.Tensor:
            return t if t.device == device else t.to(device)

        def host(values: list[int], dtype: type) -> torch.Tensor:
            return on_device(torch.from_numpy(np.asarray(values, dtype=dtype)))

        return dict(
            slot_mapping=host(layout.slot_mapping, np.int64),
            block_tables=on_device(block_tables),
            seq_lens=host(layout.seq_lens, np.int32),
            query_start_loc=host(layout.query_start_loc, np.int32),
            max_query_len=max(layout.query_len(i) for i in range(len(layout.seq_lens))))

    @abstractmethod
    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        """Stores this step's key/value [T, Hkv, D] in the caches, then returns the attention of query [T, H, D]."""
