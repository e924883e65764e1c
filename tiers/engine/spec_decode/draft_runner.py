"""The draft model's forward passes over its own KV pool, indexed by the target's block tables.

Both models address KV by token position through the same block tables, so the draft's pool has the target's
number of blocks and needs no block manager of its own. The draft's weights may belong to another engine (the
small tier drafting for the large one): its caches travel with each forward, never bound to the shared layers.
Its logits come from a DraftHead (the output matrix cut to the tokens the draft is likely to propose) where the
vocabulary is large enough for that to pay; every token fed to the draft is offered to the head's rows.

Prefix caching reaches the draft too: a full block whose draft KV the draft computed keeps it while the block stays
cached with the same content, so a request whose prompt hits the target's prefix cache catches the draft up from
the first block the draft has not computed, not from its first token.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

from tiers.engine.input_batch import ForwardChunk, prepare_inputs, select_rows
from tiers.engine.kv_cache import KVCache
from tiers.engine.model_runner import ModelRunner
from tiers.engine.sequence import Sequence
from tiers.engine.spec_decode.draft_head import DraftHead, DraftLogits
from tiers.models.config import ModelConfig
from tiers.models.llama import LlamaForCausalLM


class DraftRunner:
    def __init__(self, model: LlamaForCausalLM, model_config: ModelConfig, target: ModelRunner,
                 max_positions: int, draft_vocab_size: int = 0, always: Iterable[int] = ()) -> None:
        """Runs on the target runner's device, dtype, attention backend and number of blocks. draft_vocab_size,
        always: DraftHead's size and always-kept tokens (0: the full output matrix)."""
        self.model, self.model_config = model, model_config
        self.block_size, self.device, self.dtype = target.block_size, target.device, target.dtype
        self.attention_backend = target.attention_backend
        rotary = model.rotary
        if rotary is None or rotary.cos.shape[0] < max_positions:
            # A longer table has the same values at every position, so an engine sharing the model is unaffected.
            model.build_rotary(max_positions, self.device)
        self.kv_cache = KVCache(model_config, target.num_blocks, self.block_size, self.dtype, self.device)
        # per block: the content (its token_ids tuple, a new object each time the block is cached) whose draft KV the
        # block holds; held here, so `is` can only match the caching it was recorded for
        self.filled: list[tuple[int, ...] | None] = [None] * target.num_blocks
        vocab = model_config.vocab_size
        self.head = DraftHead.build(model.lm_head, vocab, draft_vocab_size, always)

    @torch.inference_mode()
    def last_logits(self, chunks: list[ForwardChunk]) -> DraftLogits:
        """Writes the chunks' KV into the draft pool; returns the logits after each chunk's last token, in the
        order of `chunks` (len(chunks) rows: the draft head's kept tokens, or the whole vocabulary)."""
        if self.head is not None:
            self.head.add(t for c in chunks for t in c.token_ids)
        inputs = prepare_inputs(chunks, self.attention_backend, self.kv_cache.layers, self.block_size, self.device,
                                self.dtype)
        hidden = self.model(inputs.input_ids, inputs.positions, inputs.attn_metadata)
        rows = [0] * len(chunks)
        for j, i in enumerate(inputs.order):
            rows[i] = inputs.last_rows[j]
        last = select_rows(hidden, rows)
        if self.head is not None:
            return self.head.kept_logits(last)
        return DraftLogits(self.model.compute_logits(last), None, self.model_config.vocab_size)

    def computed_prefix(self, seq: Sequence) -> int:
        """How many of seq's leading tokens have their draft KV in the pool: past the draft's own count, the full
        blocks it computed for this same cached content (a prefix-cache hit), then the rest of its block."""
        bs = self.block_size
        i = seq.num_draft_computed_tokens // bs
        while i < len(seq.blocks) and (i + 1) * bs <= seq.num_tokens:
            content = seq.blocks[i].token_ids
            if content is None or self.filled[seq.blocks[i].block_id] is not content:
                break
            i += 1
        return max(seq.num_draft_computed_tokens, i * bs)

    def record_filled(self, seq: Sequence, start: int, end: int) -> None:
        """The draft KV of seq's tokens [0, end) is in the pool, [start, end) just computed: remembers the full
        blocks among them under their cached content."""
        bs = self.block_size
        for block in seq.blocks[start // bs:end // bs]:
            if block.token_ids is not None:
                self.filled[block.block_id] = block.token_ids
