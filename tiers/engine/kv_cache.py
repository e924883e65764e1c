"""The paged KV cache: its size per block, how many blocks the budget holds, and the tensors themselves. Used by
the target's model runner and the draft's alike (the draft's pool has the target's number of blocks)."""
from __future__ import annotations

import logging
import os

import torch

from tiers.engine.config import EngineConfig
from tiers.models.config import ModelConfig
from tiers.native import huge_pages

logger = logging.getLogger(__name__)

DEFAULT_CPU_KV_BYTES = 1 << 30
DEFAULT_CUDA_MEMORY_FRACTION = 0.9


def kv_bytes_per_block(model_config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    c = model_config
    return 2 * c.num_layers * block_size * c.num_kv_heads * c.head_dim * dtype.itemsize


class KVCache:
    """K and V of every layer: [num_layers, num_blocks, block_size, num_kv_heads, head_dim] each."""

    def __init__(self, model_config: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        c = model_config
        shape = (c.num_layers, num_blocks, block_size, c.num_kv_heads, c.head_dim)
        # Zeros, not empty: padded block-table entries are read (then masked), and 0 * NaN would be NaN.
        self.k_cache, self.v_cache = _zeros(shape, dtype, device), _zeros(shape, dtype, device)
        self.layers = [(self.k_cache[i], self.v_cache[i]) for i in range(c.num_layers)]


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """On the CPU on huge pages where the kernel has them: a decode at a long context reads every layer's K and V
    rows from blocks scattered over the pool (on an AMD EPYC, 4,096 tokens' attention ran 1.09-1.16x as fast on 2 MB
    pages; docs/benchmarks.md)."""
    if device.type == "cpu":
        return huge_pages.empty(shape, dtype).zero_()
    return torch.zeros(shape, dtype=dtype, device=device)


def num_kv_blocks(config: EngineConfig, model_config: ModelConfig, device: torch.device, dtype: torch.dtype,
                  extra_bytes_per_block: int = 0) -> int:
    """The blocks the KV budget holds. extra_bytes_per_block: a draft model's KV per block, paid from the same
    budget."""
    bytes_per_block = kv_bytes_per_block(model_config, config.block_size, dtype)
    budget = _kv_budget(config, model_config, device, dtype)
    num_blocks = budget // (bytes_per_block + extra_bytes_per_block)
    # No use in more blocks than max_num_seqs full-length sequences can hold.
    max_len = config.max_model_len or model_config.max_position_embeddings
    num_blocks = min(num_blocks, config.max_num_seqs * -(-max_len // config.block_size) + 1)
    if num_blocks < 1:
        raise ValueError(f"the KV cache budget ({budget} bytes) holds no block of {bytes_per_block} "
                         "bytes: raise kv_cache_bytes / kv_cache_fraction")
    return num_blocks


def _kv_budget(c: EngineConfig, model_config: ModelConfig, device: torch.device, dtype: torch.dtype) -> int:
    if c.kv_cache_bytes is not None:
        return c.kv_cache_bytes
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        fraction = c.kv_cache_fraction or DEFAULT_CUDA_MEMORY_FRACTION
        activations = c.max_num_batched_tokens * (
            4 * model_config.hidden_size + 3 * model_config.intermediate_size) * dtype.itemsize
        logits = c.max_num_seqs * model_config.vocab_size * 4 * 2
        return int(total * fraction) - torch.cuda.memory_allocated(device) - activations - logits
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(total * c.kv_cache_fraction) if c.kv_cache_fraction else min(DEFAULT_CPU_KV_BYTES, total // 8)


def resolve_max_model_len(config: EngineConfig, model_config: ModelConfig, num_blocks: int) -> int:
    """config.max_model_len, checked against the model's limit and the KV pool; by default the most that fits."""
    capacity = num_blocks * config.block_size
    limit = model_config.max_position_embeddings
    if model_config.sliding_window:
        limit = min(limit, model_config.sliding_window)
    if config.max_model_len is not None:
        if config.max_model_len > limit:
            raise ValueError(f"max_model_len {config.max_model_len} exceeds the model's limit of {limit} "
                             "tokens (max_position_embeddings / sliding_window)")
        if config.max_model_len > capacity:
            raise ValueError(f"max_model_len {config.max_model_len} does not fit in the KV cache "
                             f"({capacity} tokens): raise kv_cache_bytes or lower max_model_len")
        return config.max_model_len
    if capacity < limit:
        logger.warning("max_model_len lowered from %d to %d tokens to fit the KV cache", limit, capacity)
    return min(limit, capacity)
