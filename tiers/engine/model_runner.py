"""Owns the model and its KV cache; turns a scheduled step into one forward pass and sampled tokens."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from tiers.engine.config import EngineConfig
from tiers.engine.input_batch import ForwardChunk, decodes_first_by_length, prepare_inputs
from tiers.engine.sampler import SamplerOutput, sample, token_logprobs
from tiers.engine.scheduler import ScheduledSequence
from tiers.engine.sequence import TokenLogprob
from tiers.models.config import ModelConfig
from tiers.models.loader import load_model
from tiers.spec_decode.rejection_sampler import rejection_sample

logger = logging.getLogger(__name__)

DEFAULT_CPU_KV_BYTES = 1 << 30
DEFAULT_CUDA_MEMORY_FRACTION = 0.9


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
    def __init__(self, path: str | Path, model_config: ModelConfig, config: EngineConfig,
                 extra_kv_bytes_per_block: int = 0) -> None:
        """extra_kv_bytes_per_block: a draft model's KV per block, paid from the same budget."""
        self.config = config
        self.model_config = model_config
        self.device = torch.device(config.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' was asked for, but CUDA is not available")
        self.dtype = resolve_dtype(config.dtype, self.device, model_config)
        self.block_size = config.block_size
        self.extra_kv_bytes_per_block = extra_kv_bytes_per_block
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
        num_blocks = budget // (self.kv_bytes_per_block + self.extra_kv_bytes_per_block)
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
    def execute(self, scheduled: list[ScheduledSequence]) -> dict[int, SamplerOutput]:
        """Runs one step. Returns {index in `scheduled`: output} for the sequences that sample: their next token,
        or for a sequence with draft tokens (seq.spec_token_ids) the accepted ones and one more."""
        chunks = [ForwardChunk(s.seq, s.seq.num_computed_tokens,
                               s.seq.tokens_at(s.seq.num_computed_tokens, s.seq.num_computed_tokens + s.num_new_tokens))
                  for s in scheduled]
        order = decodes_first_by_length(chunks)
        input_ids, positions, meta, last_rows = prepare_inputs(
            [chunks[i] for i in order], self.block_size, self.device, self.dtype, self.attention_backend == "torch")
        hidden = self.model(input_ids, positions, meta)
        plain = [j for j, i in enumerate(order) if scheduled[i].samples and not scheduled[i].num_spec_tokens]
        spec = [j for j, i in enumerate(order) if scheduled[i].num_spec_tokens]
        if not plain and not spec:
            return {}
        rows = [last_rows[j] for j in plain]
        spec_starts: list[int] = []
        for j in spec:
            k = scheduled[order[j]].num_spec_tokens
            spec_starts.append(len(rows) - len(plain))
            rows.extend(range(last_rows[j] - k, last_rows[j] + 1))
        logits = self.model.compute_logits(hidden[torch.tensor(rows, device=self.device)])
        results: dict[int, SamplerOutput] = {}
        if plain:
            seqs = [chunks[order[j]].seq for j in plain]
            tokens, logprobs = sample(logits[:len(plain)], seqs)
            for j, tok, lp in zip(plain, tokens, logprobs):
                results[order[j]] = SamplerOutput([tok], [lp])
        if spec:
            seqs = [chunks[order[j]].seq for j in spec]
            spec_logits = logits[len(plain):]
            emitted = rejection_sample(spec_logits, seqs, spec_starts)
            for j, seq, start, tokens in zip(spec, seqs, spec_starts, emitted):
                logprobs: list[TokenLogprob | None] = [None] * len(tokens)
                if seq.params.logprobs is not None:
                    logprobs = list(token_logprobs(spec_logits[start:start + len(tokens)], tokens,
                                                   [seq.params.logprobs] * len(tokens)))
                results[order[j]] = SamplerOutput(tokens, logprobs, len(seq.spec_token_ids), len(tokens) - 1)
        return results
