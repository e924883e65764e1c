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


@dataclass
class BatchPlan:
    """One forward pass on the host: the flattened tokens, the attention layout and where each chunk went."""
    input_ids: list[int]
    positions: list[int]
    layout: BatchLayout
    order: list[int]  # batch position j holds chunks[order[j]] (the backend's batch order)
    last_rows: list[int]  # per batch position: the row of its chunk's last token

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)


def plan_batch(chunks: list[ForwardChunk], backend: AttentionBackend, block_size: int) -> BatchPlan:
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
    return BatchPlan(input_ids, positions, layout, order, [q - 1 for q in layout.query_start_loc[1:]])


def prepare_inputs(chunks: list[ForwardChunk], backend: AttentionBackend, kv_caches: KVCaches, block_size: int,
                   device: torch.device, dtype: torch.dtype) -> ModelInput:
    return model_input(plan_batch(chunks, backend, block_size), backend, kv_caches, device, dtype)


def model_input(plan: BatchPlan, backend: AttentionBackend, kv_caches: KVCaches, device: torch.device,
                dtype: torch.dtype) -> ModelInput:
    meta = backend.prepare_metadata(plan.layout, kv_caches, device, dtype)
    return ModelInput(torch.tensor(plan.input_ids, dtype=torch.int64, device=device),
                      torch.tensor(plan.positions, dtype=torch.int64, device=device), meta, plan.order,
                      plan.last_rows)


def select_rows(hidden: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """hidden's rows at `rows`: a view where they run consecutively (a decode's one row, a verification's k + 1;
    a gather costs ~0.1 ms of a draft step's glue), a gather otherwise."""
    if rows and rows == list(range(rows[0], rows[0] + len(rows))):
        return hidden[rows[0]:rows[0] + len(rows)]
    return hidden[torch.tensor(rows, device=hidden.device)]
