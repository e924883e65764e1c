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
    mask: torch.Tensor | None  # [q_len, seq_len] additive float; None without a cached prefix (plain causal)

    @property
    def num_cached(self) -> int:
        return self.seq_len - (self.end - self.start)


@dataclass
class DecodeGroup:
    """Sequences of similar context length computing q_len tokens each over a cached prefix (rows start:end, q_len
    per sequence), attended in one batched call: single-token decodes, and (k+1)-token verifications."""
    start: int
    end: int
    block_tables: torch.Tensor  # [num_seqs, max_blocks_of_group] int64
    # additive float: [num_seqs, 1, 1, max_blocks_of_group * block_size] for decodes; [num_seqs, 1, q_len, ...]
    # for verifications (causal within the chunk)
    mask: torch.Tensor | None
    # A lone sequence whose blocks are consecutive in the pool: (first block, context length). Its KV is then a
    # view of the cache: no gather, no mask.
    contiguous: tuple[int, int] | None = None
    q_len: int = 1


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [num_tokens] int64
    # The unified form (Triton kernel): every sequence of the step.
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor  # [num_seqs] int32
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    max_query_len: int
    # The CPU form: single-token sequences come first, sorted by context length and grouped so that each group
    # pads its gathered KV only to its own longest context.
    decode_groups: list[DecodeGroup] = field(default_factory=list)
    prefills: list[PrefillChunk] = field(default_factory=list)
    # Per layer (k_cache, v_cache) to use instead of the ones bound to the layers: a draft model that shares its
    # weights with another engine keeps its own KV pool.
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    use_triton: bool = False  # with kv_caches: the backend these metadata were prepared for
