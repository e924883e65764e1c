"""Flattens one forward pass's token chunks into model inputs and attention metadata (target and draft alike)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tiers.attention.metadata import AttentionMetadata, DecodeGroup, PrefillChunk
from tiers.engine.sequence import Sequence

DECODE_GROUP_SIZE = 8
MAX_GROUPED_QUERY = 16  # chunks this short over a cached prefix (draft verifications) are attended in groups


@dataclass
class ForwardChunk:
    """Tokens of one sequence at positions start, start + 1, ...: their KV is written, their outputs computed."""
    seq: Sequence
    start: int
    token_ids: list[int]

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def _additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))


def _kind(c: ForwardChunk) -> int:
    if c.num_tokens == 1:
        return 0
    return 1 if c.num_tokens <= MAX_GROUPED_QUERY and c.start > 0 else 2


def decodes_first_by_length(chunks: list[ForwardChunk]) -> list[int]:
    """The order the CPU attention wants: single-token chunks first, by context length; then short chunks over a
    cached prefix (verifications), by length and context length; then prefill chunks."""
    return sorted(range(len(chunks)), key=lambda i: (_kind(chunks[i]), chunks[i].num_tokens, chunks[i].start))


def prepare_inputs(batch: list[ForwardChunk], block_size: int, device: torch.device, dtype: torch.dtype,
                   torch_attention: bool) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[int]]:
    """Returns input ids, positions, metadata and each chunk's last row in the flattened batch. `batch` must be in
    decodes_first_by_length order when torch_attention."""
    bs = block_size
    input_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    seq_lens: list[int] = []
    query_start = [0]
    for c in batch:
        start, end = c.start, c.start + c.num_tokens
        input_ids.extend(c.token_ids)
        positions.extend(range(start, end))
        table = c.seq.block_ids
        slots.extend(table[p // bs] * bs + p % bs for p in range(start, end))
        seq_lens.append(end)
        query_start.append(query_start[-1] + c.num_tokens)
    max_blocks = max(len(c.seq.blocks) for c in batch)
    tables = [c.seq.block_ids + [0] * (max_blocks - len(c.seq.blocks)) for c in batch]
    block_tables = torch.tensor(tables, dtype=torch.int32)
    meta = AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        block_tables=block_tables.to(device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        query_start_loc=torch.tensor(query_start, dtype=torch.int32, device=device),
        max_query_len=max(c.num_tokens for c in batch),
    )
    if torch_attention:
        _prepare_torch_attention(batch, meta, block_tables, seq_lens, query_start, block_size, device, dtype)
    return (torch.tensor(input_ids, dtype=torch.int64, device=device),
            torch.tensor(positions, dtype=torch.int64, device=device), meta, [q - 1 for q in query_start[1:]])


def _prepare_torch_attention(batch: list[ForwardChunk], meta: AttentionMetadata, block_tables: torch.Tensor,
                             seq_lens: list[int], query_start: list[int], bs: int, dev: torch.device,
                             dtype: torch.dtype) -> None:
    num_decodes = sum(1 for c in batch if c.num_tokens == 1)
    for start in range(0, num_decodes, DECODE_GROUP_SIZE):
        end = min(start + DECODE_GROUP_SIZE, num_decodes)
        max_blocks = -(-max(seq_lens[start:end]) // bs)
        ids = batch[start].seq.block_ids
        if end - start == 1 and ids[-1] - ids[0] == len(ids) - 1 and ids == list(range(ids[0], ids[-1] + 1)):
            meta.decode_groups.append(DecodeGroup(start, end, block_tables[start:end], None,
                                                  contiguous=(ids[0], seq_lens[start])))
            continue
        lens = torch.tensor(seq_lens[start:end], device=dev)
        visible = torch.arange(max_blocks * bs, device=dev) < lens[:, None]
        meta.decode_groups.append(DecodeGroup(
            start, end, block_tables[start:end, :max_blocks].to(dev, torch.int64),
            _additive(visible, dtype)[:, None, None, :]))
    i = num_decodes
    while i < len(batch) and _kind(batch[i]) == 1:
        q_len = batch[i].num_tokens
        j = i
        while j < len(batch) and j - i < DECODE_GROUP_SIZE and _kind(batch[j]) == 1 and batch[j].num_tokens == q_len:
            j += 1
        max_blocks = -(-max(seq_lens[i:j]) // bs)
        lens = torch.tensor(seq_lens[i:j], device=dev)
        # Row t of a chunk sees key positions < seq_len - q_len + t + 1.
        limit = lens[:, None] - q_len + 1 + torch.arange(q_len, device=dev)[None, :]
        visible = torch.arange(max_blocks * bs, device=dev)[None, None, :] < limit[:, :, None]
        meta.decode_groups.append(DecodeGroup(query_start[i], query_start[j],
                                              block_tables[i:j, :max_blocks].to(dev, torch.int64),
                                              _additive(visible, dtype)[:, None], q_len=q_len))
        i = j
    for i in range(i, len(batch)):
        c = batch[i]
        seq_len, q_len = seq_lens[i], c.num_tokens
        mask = None
        if seq_len > q_len:
            q_pos = torch.arange(q_len, device=dev)[:, None]
            mask = _additive(torch.arange(seq_len, device=dev)[None, :] < seq_len - q_len + q_pos + 1, dtype)
        meta.prefills.append(PrefillChunk(query_start[i], query_start[i + 1], seq_len,
                                          torch.tensor(c.seq.block_ids, device=dev), mask))
