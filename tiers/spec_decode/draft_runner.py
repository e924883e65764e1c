"""The draft model's forward passes over its own KV pool, indexed by the target's block tables.

Both models address KV by token position through the same block tables, so the draft's pool has the target's
number of blocks and needs no block manager of its own. The draft's weights may belong to another engine (the
small tier drafting for the large one): its caches are then passed per call, never bound to the shared layers.
"""
from __future__ import annotations

import torch

from tiers.engine.input_batch import ForwardChunk, decodes_first_by_length, prepare_inputs
from tiers.models.config import ModelConfig
from tiers.models.llama import LlamaForCausalLM


def kv_bytes_per_block(model_config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    c = model_config
    return 2 * c.num_layers * block_size * c.num_kv_heads * c.head_dim * dtype.itemsize


class DraftRunner:
    def __init__(self, model: LlamaForCausalLM, model_config: ModelConfig, num_blocks: int, block_size: int,
                 device: torch.device, dtype: torch.dtype, attention_backend: str, max_positions: int) -> None:
        self.model, self.model_config = model, model_config
        self.block_size, self.device, self.dtype = block_size, device, dtype
        self.attention_backend = attention_backend
        rotary = model.rotary
        if rotary is None or rotary.cos.shape[0] < max_positions:
            # A longer table has the same values at every position, so an engine sharing the model is unaffected.
            model.build_rotary(max_positions, device)
        c = model_config
        shape = (c.num_layers, num_blocks, block_size, c.num_kv_heads, c.head_dim)
        self.k_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.v_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.kv_caches = [(self.k_cache[i], self.v_cache[i]) for i in range(c.num_layers)]

    @torch.inference_mode()
    def last_logits(self, chunks: list[ForwardChunk]) -> torch.Tensor:
        """Writes the chunks' KV into the draft pool; returns the logits after each chunk's last token, in the
        order of `chunks` ([len(chunks), vocab], float32)."""
        order = decodes_first_by_length(chunks)
        input_ids, positions, meta, last_rows = prepare_inputs(
            [chunks[i] for i in order], self.block_size, self.device, self.dtype, self.attention_backend == "torch")
        meta.kv_caches, meta.use_triton = self.kv_caches, self.attention_backend == "triton"
        hidden = self.model(input_ids, positions, meta)
        rows = [0] * len(chunks)
        for j, i in enumerate(order):
            rows[i] = last_rows[j]
        return self.model.compute_logits(hidden[torch.tensor(rows, device=self.device)])
