"""Ref-counted KV blocks: an O(1) LRU free list and the prefix-cache index over full blocks."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Block:
    block_id: int
    ref_count: int = 0
    # Set once the block is full and its KV is (being) written: identifies its content for prefix caching.
    block_hash: int | None = None
    parent_hash: int | None = None
    token_ids: tuple[int, ...] | None = None
    prev: "Block | None" = field(default=None, repr=False)
    next: "Block | None" = field(default=None, repr=False)

    def reset_hash(self) -> None:
        self.block_hash = self.parent_hash = self.token_ids = None


class FreeBlockQueue:
    """Doubly linked list of free blocks: front = evicted first. O(1) popleft, append and remove."""

    def __init__(self, blocks: list[Block]) -> None:
        self._head = Block(-1)
        self._tail = Block(-1)
        self._head.next, self._tail.prev = self._tail, self._head
        self.num_free_blocks = 0
        for block in blocks:
            self.append(block)

    def append(self, block: Block) -> None:
        last = self._tail.prev
        assert last is not None and block.prev is None and block.next is None
        last.next, block.prev, block.next, self._tail.prev = block, last, self._tail, block
        self.num_free_blocks += 1

    def popleft(self) -> Block:
        block = self._head.next
        assert block is not None and block is not self._tail, "no free block"
        self.remove(block)
        return block

    def remove(self, block: Block) -> None:
        prev, nxt = block.prev, block.next
        assert prev is not None and nxt is not None, f"block {block.block_id} is not in the free list"
        prev.next, nxt.prev = nxt, prev
        block.prev = block.next = None
        self.num_free_blocks -= 1

    def __iter__(self):
        block = self._head.next
        while block is not self._tail:
            assert block is not None
            yield block
            block = block.next


def hash_block(parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
    return hash((parent_hash, token_ids))


class BlockPool:
    def __init__(self, num_blocks: int, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.enable_prefix_caching = enable_prefix_caching
        self.cached: dict[int, Block] = {}

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.num_free_blocks

    def allocate(self) -> Block:
        block = self.free_queue.popleft()
        self.uncache(block)
        assert block.ref_count == 0
        block.ref_count = 1
        return block

    def uncache(self, block: Block) -> None:
        if block.block_hash is not None:
            if self.cached.get(block.block_hash) is block:
                del self.cached[block.block_hash]
            block.reset_hash()

    def touch(self, block: Block) -> None:
        if block.ref_count == 0:
            self.free_queue.remove(block)
        block.ref_count += 1

    def free(self, blocks_in_eviction_order: list[Block]) -> None:
        for block in blocks_in_eviction_order:
            assert block.ref_count > 0, f"double free of block {block.block_id}"
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_queue.append(block)

    def lookup(self, parent_hash: int | None, token_ids: tuple[int, ...]) -> Block | None:
        if not self.enable_prefix_caching:
            return None
        block = self.cached.get(hash_block(parent_hash, token_ids))
        # Compare content too: a hash collision must never hand out another prompt's KV.
        if block is None or block.parent_hash != parent_hash or block.token_ids != token_ids:
            return None
        return block

    def cache(self, block: Block, parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
        block_hash = hash_block(parent_hash, token_ids)
        block.block_hash, block.parent_hash, block.token_ids = block_hash, parent_hash, token_ids
        if self.enable_prefix_caching:
            self.cached.setdefault(block_hash, block)
        return block_hash
