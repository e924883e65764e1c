"""Owns the model and its KV cache; turns a scheduled step into one forward pass and sampled tokens."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from tiers.attention.metadata import AttentionMetadata, DecodeGroup, PrefillChunk
from tiers.engine.config import EngineConfig
from tiers.engine.sampler import sample
from tiers.engine.scheduler import ScheduledSequence
from tiers.engine.sequence import TokenLogprob
from tiers.models.config import ModelConfig
from tiers.models.loader import load_model

logger = logging.getLogger(__name__)

DEFAULT_CPU_KV_BYTES = 1 << 30
DEFAULT_CUDA_MEMORY_FRACTION = 0.9
DECODE_GROUP_SIZE = 8


def _additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))


def resolve_dtype(name: str | torch.dtype | None, device: torch.device, model_config: ModelConfig) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name is None or name == "auto":
        if device.type == "cpu":
            return torch.float32
        return torch.float16 if model_config.torch_dtype == "float16" else torch.bfloat16
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"unsupported dtype {name!r}; use float32, bfloat16 or float16")
    return dtype


class ModelRunner:
    def __init__(self, path: str | Path, model_config: ModelConfig, config: EngineConfig) -> None:
        self.config = config
        self.model_config = model_config
        self.device = torch.device(config.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' was asked for, but CUDA is not available")
        self.dtype = resolve_dtype(config.dtype, self.device, model_config)
        self.block_size = config.block_size
        self.model = load_model(path, model_config, self.device, self.dtype)
        backend = config.attention_backend or ("triton" if self.device.type == "cuda" else "torch")
        self.num_blocks = self._num_kv_blocks()
        self._allocate_kv_cache(use_triton=backend == "triton")
        self.attention_backend = backend

    @property
    def kv_bytes_per_block(self) -> int:
        c = self.model_config
        return 2 * c.num_layers * self.block_size * c.num_kv_heads * c.head_dim * self.dtype.itemsize

    def _num_kv_blocks(self) -> int:
        c = self.config
        if c.kv_cache_bytes is not None:
            budget = c.kv_cache_bytes
        elif self.device.type == "cuda":
            total = torch.cuda.get_device_properties(self.device).total_memory
            fraction = c.kv_cache_fraction or DEFAULT_CUDA_MEMORY_FRACTION
            activations = c.max_num_batched_tokens * (
                4 * self.model_config.hidden_size + 3 * self.model_config.intermediate_size) * self.dtype.itemsize
            logits = c.max_num_seqs * self.model_config.vocab_size * 4 * 2
            budget = int(total * fraction) - torch.cuda.memory_allocated(self.device) - activations - logits
        else:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            budget = int(total * c.kv_cache_fraction) if c.kv_cache_fraction else min(DEFAULT_CPU_KV_BYTES, total // 8)
        num_blocks = budget // self.kv_bytes_per_block
        # No use in more blocks than max_num_seqs full-length sequences can hold.
        max_len = c.max_model_len or self.model_config.max_position_embeddings
        num_blocks = min(num_blocks, c.max_num_seqs * -(-max_len // self.block_size) + 1)
        if num_blocks < 1:
            raise ValueError(f"the KV cache budget ({budget} bytes) holds no block of {self.kv_bytes_per_block} "
                             "bytes: raise kv_cache_bytes / kv_cache_fraction")
        return num_blocks

    def _allocate_kv_cache(self, use_triton: bool) -> None:
        c = self.model_config
        shape = (c.num_layers, self.num_blocks, self.block_size, c.num_kv_heads, c.head_dim)
        # Zeros, not empty: padded block-table entries are read (then masked), and 0 * NaN would be NaN.
        self.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        for i, layer in enumerate(self.model.layers):
            layer.self_attn.attn.bind_cache(self.k_cache[i], self.v_cache[i], use_triton)

    def make_generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(seed)

    @torch.inference_mode()
    def execute(self, scheduled: list[ScheduledSequence]) -> dict[int, tuple[int, TokenLogprob | None]]:
        """Runs one step. Returns {index in `scheduled`: (token, logprob)} for the sequences that sample."""
        def decodes_first_by_length(i: int) -> tuple[bool, int]:
            s = scheduled[i]
            return s.num_new_tokens != 1, s.seq.num_computed_tokens

        order = sorted(range(len(scheduled)), key=decodes_first_by_length)
        batch = [scheduled[i] for i in order]
        input_ids, positions, meta, sample_rows = self._prepare(batch)
        hidden = self.model(input_ids, positions, meta)
        sampling = [j for j, s in enumerate(batch) if s.samples]
        if not sampling:
            return {}
        logits = self.model.compute_logits(hidden[torch.tensor([sample_rows[j] for j in sampling],
                                                               device=self.device)])
        tokens, logprobs = sample(logits, [batch[j].seq for j in sampling])
        return {order[j]: (tok, lp) for j, tok, lp in zip(sampling, tokens, logprobs)}

    def _prepare(self, batch: list[ScheduledSequence]):
        bs = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        seq_lens: list[int] = []
        query_start = [0]
        sample_rows: list[int] = []
        for s in batch:
            seq, start = s.seq, s.seq.num_computed_tokens
            end = start + s.num_new_tokens
            input_ids.extend(seq.token_ids[start:end])
            positions.extend(range(start, end))
            table = seq.block_ids
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, end))
            seq_lens.append(end)
            query_start.append(query_start[-1] + s.num_new_tokens)
            sample_rows.append(query_start[-1] - 1)
        max_blocks = max(len(s.seq.blocks) for s in batch)
        tables = [s.seq.block_ids + [0] * (max_blocks - len(s.seq.blocks)) for s in batch]
        dev = self.device
        block_tables = torch.tensor(tables, dtype=torch.int32)
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=dev),
            block_tables=block_tables.to(dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            query_start_loc=torch.tensor(query_start, dtype=torch.int32, device=dev),
            max_query_len=max(s.num_new_tokens for s in batch),
        )
        if self.attention_backend == "torch":
            self._prepare_torch_attention(batch, meta, block_tables, seq_lens, query_start)
        return (torch.tensor(input_ids, dtype=torch.int64, device=dev),
                torch.tensor(positions, dtype=torch.int64, device=dev), meta, sample_rows)

    def _prepare_torch_attention(self, batch: list[ScheduledSequence], meta: AttentionMetadata,
                                 block_tables: torch.Tensor, seq_lens: list[int], query_start: list[int]) -> None:
        dev, bs = self.device, self.block_size
        num_decodes = sum(1 for s in batch if s.num_new_tokens == 1)
        for start in range(0, num_decodes, DECODE_GROUP_SIZE):
            end = min(start + DECODE_GROUP_SIZE, num_decodes)
            max_blocks = len(batch[end - 1].seq.blocks)  # sorted by length: the last is the longest
            ids = batch[start].seq.block_ids
            if end - start == 1 and ids[-1] - ids[0] == len(ids) - 1 and ids == list(range(ids[0], ids[-1] + 1)):
                meta.decode_groups.append(DecodeGroup(start, end, block_tables[start:end], None,
                                                      contiguous=(ids[0], seq_lens[start])))
                continue
            lens = torch.tensor(seq_lens[start:end], device=dev)
            visible = torch.arange(max_blocks * bs, device=dev) < lens[:, None]
            meta.decode_groups.append(DecodeGroup(
                start, end, block_tables[start:end, :max_blocks].to(dev, torch.int64),
                _additive(visible, self.dtype)[:, None, None, :]))
        for i in range(num_decodes, len(batch)):
            s = batch[i]
            seq_len, q_len = seq_lens[i], s.num_new_tokens
            mask = None
            if seq_len > q_len:
                q_pos = torch.arange(q_len, device=dev)[:, None]
                mask = _additive(torch.arange(seq_len, device=dev)[None, :] < seq_len - q_len + q_pos + 1,
                                 self.dtype)
            meta.prefills.append(PrefillChunk(query_start[i], query_start[i + 1], seq_len,
                                              torch.tensor(s.seq.block_ids, device=dev), mask))
