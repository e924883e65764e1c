"""Per-request KV block bookkeeping over the BlockPool: prefix-cache hits, slot allocation, freeing."""
from __future__ import annotations

from tiers.engine.block_pool import Block, BlockPool
from tiers.engine.sequence import Sequence


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        self.block_size = block_size
        self.pool = BlockPool(num_blocks, enable_prefix_caching)
        self.num_prefix_queries = 0
        self.num_prefix_hits = 0

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    def num_blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def get_computed_blocks(self, seq: Sequence) -> list[Block]:
        """Longest run of cached full blocks that prefix the sequence. At least one token is left to compute,
        since the last token's logits are needed."""
        bs = self.block_size
        blocks: list[Block] = []
        parent: int | None = None
        for i in range((seq.num_tokens - 1) // bs):
            tokens = tuple(seq.token_ids[i * bs:(i + 1) * bs])
            block = self.pool.lookup(parent, tokens)
            if block is None:
                break
            blocks.append(block)
            parent = block.block_hash
        return blocks

    def allocate_slots(self, seq: Sequence, num_new_tokens: int, computed_blocks: list[Block] | None = None) -> bool:
        """Make room for seq's next num_new_tokens (after any computed_blocks). False, changing nothing, if the
        pool is too small right now."""
        computed_blocks = computed_blocks or []
        num_computed = len(computed_blocks) * self.block_size if computed_blocks else seq.num_computed_tokens
        num_have = len(seq.blocks) + len(computed_blocks)
        num_needed = self.num_blocks_for(num_computed + num_new_tokens) - num_have
        num_evictable_hits = sum(1 for b in computed_blocks if b.ref_count == 0)
        if num_needed + num_evictable_hits > self.num_free_blocks:
            return False
        for block in computed_blocks:
            self.pool.touch(block)
        seq.blocks.extend(computed_blocks)
        seq.blocks.extend(self.pool.allocate() for _ in range(max(0, num_needed)))
        self._cache_full_blocks(seq, num_computed + num_new_tokens)
        return True

    def _cache_full_blocks(self, seq: Sequence, num_tokens: int) -> None:
        """Hash blocks whose tokens are all known and computed by the end of this step."""
        bs = self.block_size
        num_full = min(num_tokens, seq.num_tokens) // bs
        parent = seq.blocks[seq.num_hashed_blocks - 1].block_hash if seq.num_hashed_blocks else None
        for i in range(seq.num_hashed_blocks, num_full):
            block = seq.blocks[i]
            tokens = tuple(seq.token_ids[i * bs:(i + 1) * bs])
            if block.block_hash is None:
                parent = self.pool.cache(block, parent, tokens)
            else:  # a prefix-cache hit: already hashed with this content
                parent = block.block_hash
        seq.num_hashed_blocks = max(seq.num_hashed_blocks, num_full)

    def record_prefix_lookup(self, num_prompt_tokens: int, num_hit_tokens: int) -> None:
        self.num_prefix_queries += num_prompt_tokens
        self.num_prefix_hits += num_hit_tokens

    def free(self, seq: Sequence, discard_cached: bool = False) -> None:
        """Release seq's blocks. discard_cached: their KV may be incomplete (a failed step), so blocks that only
        this sequence holds leave the prefix cache."""
        if discard_cached:
            for block in seq.blocks:
                if block.ref_count == 1 and block.block_hash is not None:
                    self.pool.uncache(block)
        # Tail blocks first, so a shared prefix outlives the unique suffix in the LRU.
        self.pool.free(list(reversed(seq.blocks)))
        seq.blocks = []
        seq.num_hashed_blocks = 0

    @property
    def prefix_hit_rate(self) -> float:
        return self.num_prefix_hits / self.num_prefix_queries if self.num_prefix_queries else 0.0
