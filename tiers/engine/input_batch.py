"""Flattens one forward pass's token chunks into model inputs and attention metadata (target and draft alike)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tiers.attention.backend import AttentionBackend, AttentionMetadata, BatchLayout, KVCaches
from tiers.engine.sequence import Sequence


@dataclass
class ForwardChunk:
    """Tokens of one sequence at positions start, start + 1, ...: their KV is written, their outputs computed."""
    seq: Sequence
    start: int
    token_ids: list[int]

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class ModelInput:
    input_ids: torch.Tensor
    positions: torch.Tensor
    attn_metadata: AttentionMetadata
    order: list[int]  # batch position j holds chunks[order[j]] (the backend's batch order)
    last_rows: list[int]  # per batch position: the row of its chunk's last token


def prepare_inputs(chunks: list[ForwardChunk], backend: AttentionBackend, kv_caches: KVCaches, block_size: int,
                   device: torch.device, dtype: torch.dtype) -> ModelInput:
    order = backend.batch_order([c.num_tokens for c in chunks], [c.start for c in chunks])
    input_ids: list[int] = []
    positions: list[int] = []
    layout = BatchLayout([], [], [0], [], block_size)
    for c in (chunks[i] for i in order):
        start, end = c.start, c.start + c.num_tokens
        input_ids.extend(c.token_ids)
        positions.extend(range(start, end))
        table = c.seq.block_ids
        layout.slot_mapping.extend(table[p // block_size] * block_size + p % block_size for p in range(start, end))
        layout.block_ids.append(table)
        layout.seq_lens.append(end)
        layout.query_start_loc.append(layout.query_start_loc[-1] + c.num_tokens)
    meta = backend.prepare_metadata(layout, kv_caches, device, dtype)
    return ModelInput(torch.tensor(input_ids, dtype=torch.int64, device=device),
                      torch.tensor(positions, dtype=torch.int64, device=device), meta, order,
                      [q - 1 for q in layout.query_start_loc[1:]])
