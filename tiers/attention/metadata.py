"""What every attention layer needs to know about one engine step, built once per step by the ModelRunner."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class PrefillChunk:
    """A sequence computing more than one token this step: rows start:end of the flattened batch."""
    start: int
    end: int
    seq_len: int  # context length including this chunk
    block_table: torch.Tensor  # [num_blocks_of_seq] int64
    mask: torch.Tensor | None  # [q_len, seq_len] bool, None when there is no cached prefix (plain causal)

    @property
    def num_cached(self) -> int:
        return self.seq_len - (self.end - self.start)


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [num_tokens] int64
    # The unified form (Triton kernel): every sequence of the step.
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor  # [num_seqs] int32
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    max_query_len: int
    # The CPU form: single-token sequences come first and run as one batched decode.
    num_decode_tokens: int = 0
    decode_block_tables: torch.Tensor | None = None  # [num_decodes, max_blocks] int64
    decode_mask: torch.Tensor | None = None  # [num_decodes, 1, 1, max_blocks * block_size] bool
    prefills: list[PrefillChunk] = field(default_factory=list)
