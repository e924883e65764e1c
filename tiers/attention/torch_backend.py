"""Paged attention in plain PyTorch: the CPU path (fast there) and the fallback without Triton.

Its metadata groups the step's sequences so that each group gathers (and pads) KV only to its own longest context:
single-token decodes first, sorted by context length; then short verification chunks; then prefill chunks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from tiers.attention.backend import AttentionBackend, AttentionMetadata, BatchLayout, KVCaches, query_kind

DECODE_GROUP_SIZE = 8


@dataclass
class PrefillChunk:
    """A sequence computing more than one token this step: rows start:end of the flattened batch."""
    start: int
    end: int
    seq_len: int  # context length including this chunk
    block_table: torch.Tensor  # [num_blocks_of_seq] int64
    mask: torch.Tensor | None  # [q_len, seq_len] additive float; None without a cached prefix (plain causal)


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
class TorchAttentionMetadata(AttentionMetadata):
    decode_groups: list[DecodeGroup] = field(default_factory=list)
    prefills: list[PrefillChunk] = field(default_factory=list)


def _additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))


class TorchAttentionBackend(AttentionBackend):
    name = "torch"

    def prepare_metadata(self, layout: BatchLayout, kv_caches: KVCaches, device: torch.device,
                         dtype: torch.dtype) -> TorchAttentionMetadata:
        """`layout` must be in batch_order."""
        block_tables = layout.block_tables()
        meta = TorchAttentionMetadata(**self.common_fields(layout, block_tables, device), kv_caches=kv_caches,
                                      backend=self)
        num_decodes = sum(1 for i in range(len(layout.seq_lens)) if layout.query_len(i) == 1)
        for start in range(0, num_decodes, DECODE_GROUP_SIZE):
            meta.decode_groups.append(_decode_group(layout, block_tables, start,
                                                    min(start + DECODE_GROUP_SIZE, num_decodes), device, dtype))
        i = self._add_verifications(meta, layout, block_tables, num_decodes, device, dtype)
        for i in range(i, len(layout.seq_lens)):
            meta.prefills.append(_prefill_chunk(layout, i, device, dtype))
        return meta

    @staticmethod
    def _add_verifications(meta: TorchAttentionMetadata, layout: BatchLayout, block_tables: torch.Tensor, i: int,
                           dev: torch.device, dtype: torch.dtype) -> int:
        """Groups the verification chunks from batch index i on; returns the index of the first prefill."""
        seq_lens, query_start, bs = layout.seq_lens, layout.query_start_loc, layout.block_size

        def is_verification(j: int) -> bool:
            return query_kind(layout.query_len(j), seq_lens[j] - layout.query_len(j)) == 1

        while i < len(seq_lens) and is_verification(i):
            q_len = layout.query_len(i)
            j = i
            while j < len(seq_lens) and j - i < DECODE_GROUP_SIZE and is_verification(j) and \
                    layout.query_len(j) == q_len:
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
        return i

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: TorchAttentionMetadata, scale: float) -> torch.Tensor:
        store_kv(key, value, k_cache, v_cache, meta.slot_mapping)
        return paged_attention(query, key, value, k_cache, v_cache, meta, scale)


def _decode_group(layout: BatchLayout, block_tables: torch.Tensor, start: int, end: int, dev: torch.device,
                  dtype: torch.dtype) -> DecodeGroup:
    seq_lens, bs = layout.seq_lens, layout.block_size
    ids = layout.block_ids[start]
    if end - start == 1 and ids[-1] - ids[0] == len(ids) - 1 and ids == list(range(ids[0], ids[-1] + 1)):
        return DecodeGroup(start, end, block_tables[start:end], None, contiguous=(ids[0], seq_lens[start]))
    max_blocks = -(-max(seq_lens[start:end]) // bs)
    lens = torch.tensor(seq_lens[start:end], device=dev)
    visible = torch.arange(max_blocks * bs, device=dev) < lens[:, None]
    return DecodeGroup(start, end, block_tables[start:end, :max_blocks].to(dev, torch.int64),
                       _additive(visible, dtype)[:, None, None, :])


def _prefill_chunk(layout: BatchLayout, i: int, dev: torch.device, dtype: torch.dtype) -> PrefillChunk:
    seq_len, q_len = layout.seq_lens[i], layout.query_len(i)
    mask = None
    if seq_len > q_len:
        q_pos = torch.arange(q_len, device=dev)[:, None]
        mask = _additive(torch.arange(seq_len, device=dev)[None, :] < seq_len - q_len + q_pos + 1, dtype)
    return PrefillChunk(layout.query_start_loc[i], layout.query_start_loc[i + 1], seq_len,
                        torch.tensor(layout.block_ids[i], device=dev), mask)


def store_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    num_kv_heads, head_dim = key.shape[1], key.shape[2]
    k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, key)
    v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, value)


def gather_blocks(cache: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """cache[block_table] as whole-block row copies: several times faster on CPU than advanced indexing."""
    rows = cache.view(cache.shape[0], -1).index_select(0, block_table.reshape(-1))
    return rows.view(*block_table.shape, *cache.shape[1:])


def paged_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: TorchAttentionMetadata, scale: float) -> torch.Tensor:
    """query [T, H, D]; key/value [T, Hkv, D] are this step's new tokens, already stored in the caches."""
    num_heads, head_dim = query.shape[1], query.shape[2]
    num_kv_heads = k_cache.shape[2]
    group = num_heads // num_kv_heads
    if len(meta.decode_groups) == 1 and not meta.prefills and meta.decode_groups[0].q_len == 1:
        return _decode_attention(query, k_cache, v_cache, meta.decode_groups[0], scale)  # one batch, no copy
    out = torch.empty_like(query)
    for dg in meta.decode_groups:
        # The query heads of one KV head become the query-length axis, so GQA needs no KV repeat.
        n = dg.end - dg.start  # rows
        if dg.q_len == 1:
            out[dg.start:dg.end] = _decode_attention(query[dg.start:dg.end], k_cache, v_cache, dg, scale)
            continue
        keys, values = _group_kv(k_cache, v_cache, dg)
        # Verification: the chunk's tokens times the query heads of a KV head form the query axis.
        n, t = n // dg.q_len, dg.q_len
        q = query[dg.start:dg.end].view(n, t, num_kv_heads, group, head_dim).transpose(1, 2)
        mask = dg.mask.repeat_interleave(group, dim=2) if group > 1 else dg.mask
        o = F.scaled_dot_product_attention(q.reshape(n, num_kv_heads, t * group, head_dim), keys, values,
                                           attn_mask=mask, scale=scale)
        out[dg.start:dg.end] = o.view(n, num_kv_heads, t, group, head_dim).transpose(1, 2).reshape(
            n * t, num_heads, head_dim)
    for chunk in meta.prefills:
        q = query[chunk.start:chunk.end].transpose(0, 1)  # [H, q, D]
        if chunk.mask is None:
            k = key[chunk.start:chunk.end].transpose(0, 1)
            v = value[chunk.start:chunk.end].transpose(0, 1)
        else:
            k = gather_blocks(k_cache, chunk.block_table).flatten(0, 1)[:chunk.seq_len].transpose(0, 1)
            v = gather_blocks(v_cache, chunk.block_table).flatten(0, 1)[:chunk.seq_len].transpose(0, 1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=chunk.mask, is_causal=chunk.mask is None,
                                           scale=scale, enable_gqa=group > 1)
        out[chunk.start:chunk.end] = o.transpose(0, 1)
    return out


def _decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, dg: DecodeGroup,
                      scale: float) -> torch.Tensor:
    """The attention of a group of single-token decodes, query [n, H, D] (a step of one such group returns it as
    the whole output: no output buffer and copy)."""
    n, num_heads, head_dim = query.shape
    num_kv_heads = k_cache.shape[2]
    keys, values = _group_kv(k_cache, v_cache, dg)
    q = query.view(n, num_kv_heads, num_heads // num_kv_heads, head_dim)
    o = F.scaled_dot_product_attention(q, keys, values, attn_mask=dg.mask, scale=scale)
    return o.reshape(n, num_heads, head_dim)


def _group_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, dg: DecodeGroup) -> tuple[torch.Tensor, torch.Tensor]:
    """The group's keys and values as [n, Hkv, L, D]: views of the cache for a lone sequence in consecutive blocks,
    else gathered whole blocks."""
    if dg.contiguous is not None:
        first, seq_len = dg.contiguous
        num_blocks = -(-seq_len // k_cache.shape[1])
        keys = k_cache[first:first + num_blocks].flatten(0, 1)[:seq_len].transpose(0, 1).unsqueeze(0)
        values = v_cache[first:first + num_blocks].flatten(0, 1)[:seq_len].transpose(0, 1).unsqueeze(0)
        return keys, values
    keys = gather_blocks(k_cache, dg.block_tables).flatten(1, 2).transpose(1, 2)
    values = gather_blocks(v_cache, dg.block_tables).flatten(1, 2).transpose(1, 2)
    return keys, values
