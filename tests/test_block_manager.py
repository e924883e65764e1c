"""Block pool invariants under random workloads: the real Scheduler and BlockManager, a fake model."""
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from tiers.engine.block_manager import BlockManager
from tiers.engine.block_pool import BlockPool, FreeBlockQueue, Block
from tiers.engine.sampling_params import SamplingParams
from tiers.engine.scheduler import Scheduler
from tiers.engine.sequence import Sequence, SequenceStatus


def check_invariants(bm: BlockManager, live: list[Sequence]) -> None:
    pool = bm.pool
    holders = Counter(b.block_id for seq in live for b in seq.blocks)
    for block in pool.blocks:
        assert block.ref_count == holders[block.block_id], f"block {block.block_id} ref count is off"
    free_ids = [b.block_id for b in pool.free_queue]
    assert len(free_ids) == len(set(free_ids)) == pool.num_free_blocks
    assert set(free_ids) == {b.block_id for b in pool.blocks if b.ref_count == 0}
    for block_hash, block in pool.cached.items():
        assert block.block_hash == block_hash
    for seq in live:
        if seq.status is SequenceStatus.RUNNING:
            assert len(seq.blocks) * bm.block_size >= seq.num_computed_tokens
        else:
            assert not seq.blocks


workload = st.lists(
    st.tuples(st.integers(0, 3),            # shared-prefix family (0: none)
              st.integers(1, 40),           # prompt length
              st.integers(1, 12),           # max tokens
              st.integers(0, 2),            # priority
              st.booleans()),               # aborted mid-way
    min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(workload, st.integers(4, 24), st.sampled_from([2, 4]), st.integers(3, 64), st.integers(1, 6),
       st.randoms(use_true_random=False))
def test_random_workload_leaks_nothing(requests, num_blocks, block_size, budget, max_num_seqs, rnd):
    max_len = num_blocks * block_size
    bm = BlockManager(num_blocks, block_size)
    scheduler = Scheduler(bm, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget)
    prefixes = {f: [rnd.randrange(50) for _ in range(20)] for f in range(1, 4)}
    live: list[Sequence] = []
    for i, (family, prompt_len, max_tokens, priority, aborted) in enumerate(requests):
        prompt = (prefixes.get(family, []) + [rnd.randrange(50) for _ in range(prompt_len)])[:max_len - 1]
        seq = Sequence(f"r{i}", prompt, SamplingParams(max_tokens=max_tokens), priority=priority)
        seq.abort_at = rnd.randrange(1, 6) if aborted else None
        scheduler.add(seq)
        live.append(seq)
    steps = 0
    while scheduler.has_unfinished():
        steps += 1
        assert steps < 10_000, "the scheduler made no progress"
        out = scheduler.schedule()
        assert out.scheduled, "requests are waiting but nothing was scheduled"
        assert out.num_tokens <= budget
        assert len(scheduler.running) <= max_num_seqs
        check_invariants(bm, live)
        for s in out.scheduled:
            samples = s.samples
            s.seq.num_computed_tokens += s.num_new_tokens
            if samples:
                s.seq.token_ids.append(rnd.randrange(50))
                if s.seq.num_output_tokens >= s.seq.params.max_tokens or s.seq.num_tokens >= max_len:
                    scheduler.finish(s.seq, "length")
        for seq in live:
            if seq.abort_at is not None and steps == seq.abort_at and not seq.is_finished:
                scheduler.finish(seq, "abort")
        live = [s for s in live if not s.is_finished]
        check_invariants(bm, live)
    assert bm.num_free_blocks == num_blocks
    assert all(b.ref_count == 0 for b in bm.pool.blocks)


def test_prefix_hit_requires_equal_tokens_not_just_equal_hash(monkeypatch):
    pool = BlockPool(4)
    block = pool.allocate()
    pool.cache(block, None, (1, 2, 3, 4))
    assert pool.lookup(None, (1, 2, 3, 4)) is block
    # Force a collision: every block hashes alike. Different tokens must still miss.
    monkeypatch.setattr("tiers.engine.block_pool.hash_block", lambda parent, tokens: 42)
    pool2 = BlockPool(4)
    b2 = pool2.allocate()
    pool2.cache(b2, None, (1, 2, 3, 4))
    assert pool2.lookup(None, (9, 9, 9, 9)) is None
    assert pool2.lookup(7, (1, 2, 3, 4)) is None  # same tokens, other parent chain
    assert pool2.lookup(None, (1, 2, 3, 4)) is b2


def test_shared_prefix_blocks_are_reused_and_evicted_lru():
    bm = BlockManager(num_blocks=6, block_size=4)
    a = Sequence("a", list(range(10)), SamplingParams())
    assert bm.allocate_slots(a, 10)
    a_ids = a.block_ids
    bm.free(a)
    assert bm.num_free_blocks == 6
    # Never-used blocks are evicted first, then a's blocks tail first, so the shared head survives longest.
    assert [blk.block_id for blk in bm.pool.free_queue] == [3, 4, 5] + a_ids[::-1]
    b = Sequence("b", list(range(8)) + [99, 98], SamplingParams())
    hits = bm.get_computed_blocks(b)
    assert [blk.block_id for blk in hits] == a_ids[:2]
    assert bm.allocate_slots(b, 2, hits)
    assert b.blocks[:2] == hits and all(blk.ref_count == 1 for blk in hits)
    # A prompt that is exactly its cached blocks still recomputes its last token.
    c = Sequence("c", list(range(8)), SamplingParams())
    assert len(bm.get_computed_blocks(c)) == 1


def test_free_queue_is_o1_linked_list():
    blocks = [Block(i) for i in range(5)]
    q = FreeBlockQueue(blocks)
    q.remove(blocks[2])
    assert [b.block_id for b in q] == [0, 1, 3, 4]
    assert q.popleft().block_id == 0
    q.append(blocks[2])
    assert [b.block_id for b in q] == [1, 3, 4, 2] and q.num_free_blocks == 4
    with pytest.raises(AssertionError):
        q.remove(blocks[0])  # not in the list
