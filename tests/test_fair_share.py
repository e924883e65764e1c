"""Fair sharing between tenants (tiers.engine.fair_share): a tenant that fills the batch or the KV pool makes room
for another tenant's request, without thrashing; priorities and tenant-less sequences keep their rules. The
scheduler's steps are driven by hand (deterministic); the end-to-end case steps a tiny random model's engine."""
from __future__ import annotations

import itertools

import pytest

from tiers.engine.block_manager import BlockManager
from tiers.engine.sampling_params import SamplingParams
from tiers.engine.scheduler import Scheduler, SchedulerOutput
from tiers.engine.sequence import Sequence, SequenceStatus

_prompts = itertools.count(1)


def seq(name: str, length: int, tenant: str | None = None, priority: int = 0) -> Sequence:
    start = 10_000 * next(_prompts)  # distinct prompts: no prefix-cache hits between sequences
    return Sequence(name, list(range(start, start + length)), SamplingParams(max_tokens=10_000), priority=priority,
                    tenant=tenant)


def run_step(scheduler: Scheduler) -> SchedulerOutput:
    """Schedules one step and pretends the model ran it (each sampled sequence gets one token)."""
    out = scheduler.schedule()
    for s in out.scheduled:
        samples = s.samples
        s.seq.num_computed_tokens += s.num_new_tokens
        if samples:
            s.seq.token_ids.append(7)
    return out


def names(seqs) -> list[str]:
    return [getattr(s, "seq", s).request_id for s in seqs]


def test_a_tenant_filling_the_kv_pool_makes_room_for_another_tenants_request():
    scheduler = Scheduler(BlockManager(16, 4, True), max_num_seqs=8, max_num_batched_tokens=256)
    hog = [seq(f"hog-{i}", 13, "hog") for i in range(4)]  # 4 blocks each: the whole pool, 3 free slots each
    for s in hog:
        scheduler.add(s)
    run_step(scheduler)
    assert scheduler.block_manager.num_free_blocks == 0
    light = seq("light", 3, "light")
    scheduler.add(light)
    out = run_step(scheduler)
    assert "light" in names(out.scheduled) and names(out.preempted) == ["hog-3"]  # the hog's latest gave way
    for _ in range(12):  # the hog's sequences grow and preempt each other; never the light one
        out = run_step(scheduler)
        assert "light" in names(out.scheduled)
    assert light.num_preemptions == 0 and any(s.status is SequenceStatus.RUNNING for s in hog)


def test_without_another_tenant_the_hog_keeps_fcfs_and_a_tenantless_request_waits_its_turn():
    scheduler = Scheduler(BlockManager(16, 4, True), max_num_seqs=8, max_num_batched_tokens=256)
    for i in range(4):
        scheduler.add(seq(f"hog-{i}", 13, "hog"))
    run_step(scheduler)
    anonymous = seq("anonymous", 3)
    scheduler.add(anonymous)
    out = run_step(scheduler)
    assert "anonymous" not in names(out.scheduled) and not out.preempted
    assert anonymous.status is SequenceStatus.WAITING


def test_a_tenant_holding_every_seat_gives_one_up_and_the_displaced_sequence_does_not_displace_back():
    scheduler = Scheduler(BlockManager(256, 16, True), max_num_seqs=4, max_num_batched_tokens=256)
    hog = [seq(f"hog-{i}", 5, "hog") for i in range(4)]
    for s in hog:
        scheduler.add(s)
    run_step(scheduler)
    light = seq("light", 5, "light")
    scheduler.add(light)
    assert names(run_step(scheduler).preempted) == ["hog-3"]
    for _ in range(10):
        assert sorted(names(run_step(scheduler).scheduled)) == ["hog-0", "hog-1", "hog-2", "light"]
    assert scheduler.num_preemptions == 1 and hog[3].status is SequenceStatus.WAITING


def test_three_tenants_with_a_fractional_share_settle_instead_of_thrashing():
    """16 seats for 3 tenants: 5.33 each. c (4 seats) displaces one of a's 7; then b (5 seats, under its share)
    may not take one of a's 6: a would be left with 5 and b with 6, and a could then take it back, forever."""
    scheduler = Scheduler(BlockManager(1024, 16, True), max_num_seqs=16, max_num_batched_tokens=1024)
    for tenant, count in (("a", 7), ("b", 5), ("c", 4)):
        for i in range(count):
            scheduler.add(seq(f"{tenant}-{i}", 5, tenant))
    run_step(scheduler)
    scheduler.add(seq("c-extra", 5, "c"))
    assert names(run_step(scheduler).preempted) == ["a-6"]
    scheduler.add(seq("b-extra", 5, "b"))
    for _ in range(20):
        out = run_step(scheduler)
        assert not out.preempted and len(out.scheduled) == 16
    held = {t: sum(s.tenant == t for s in scheduler.running) for t in "abc"}
    assert held == {"a": 6, "b": 5, "c": 5} and scheduler.num_preemptions == 1


@pytest.mark.parametrize("prompt_tokens, displaced", [(3, ["hog-3"]), (45, [])])
def test_a_request_displaces_only_what_leaves_the_other_tenant_holding_at_least_as_much(prompt_tokens, displaced):
    """The hog holds 16 of 16 blocks. 1 block: one hog sequence gives way. 12 blocks: the hog would keep 4, the
    newcomer hold 12 (they would swap places), so nobody is displaced; it waits, first in line."""
    scheduler = Scheduler(BlockManager(16, 4, True), max_num_seqs=8, max_num_batched_tokens=256)
    for i in range(4):
        scheduler.add(seq(f"hog-{i}", 13, "hog"))
    run_step(scheduler)
    newcomer = seq("newcomer", prompt_tokens, "light")
    scheduler.add(newcomer)
    out = run_step(scheduler)
    assert names(out.preempted) == displaced
    assert (newcomer.status is SequenceStatus.RUNNING) == bool(displaced)
    if not displaced:  # first in line: a hog sequence preempted later waits behind it
        assert names(scheduler.waiting)[0] == "newcomer"


def test_a_freed_seat_goes_to_the_tenant_with_fewer_sequences_before_an_earlier_arrival():
    """One seat: the light request cannot displace the heavy one (it would then hold the whole batch itself), but
    when the seat frees it goes before the heavy tenant's earlier sequences (both then hold nothing)."""
    scheduler = Scheduler(BlockManager(64, 16, True), max_num_seqs=1, max_num_batched_tokens=256)
    heavy = [seq(f"heavy-{i}", 5, "heavy") for i in range(4)]
    for s in heavy:
        scheduler.add(s)
    run_step(scheduler)
    scheduler.add(seq("light", 5, "light"))
    assert names(run_step(scheduler).scheduled) == ["heavy-0"]
    scheduler.finish(heavy[0], "stop")
    assert names(run_step(scheduler).scheduled) == ["light"]


def test_a_running_sequence_short_of_a_block_takes_it_from_the_tenant_over_its_share_not_from_the_latest():
    """FCFS preempted the latest arrival (the light request); fair sharing takes the hog's latest."""
    scheduler = Scheduler(BlockManager(16, 4, True), max_num_seqs=8, max_num_batched_tokens=256)
    hog = [seq(f"hog-{i}", 13, "hog") for i in range(3)]
    light = seq("light", 13, "light")
    for s in (*hog, light):
        scheduler.add(s)
    assert len(run_step(scheduler).scheduled) == 4 and scheduler.block_manager.num_free_blocks == 0
    preempted = [name for _ in range(4) for name in names(run_step(scheduler).preempted)]
    assert preempted == ["hog-2"] and light.status is SequenceStatus.RUNNING and light.num_preemptions == 0


def test_priorities_come_first_a_replay_gives_way_before_the_hog_and_a_replay_displaces_nobody():
    scheduler = Scheduler(BlockManager(16, 4, True), max_num_seqs=8, max_num_batched_tokens=256)
    for i in range(3):
        scheduler.add(seq(f"hog-{i}", 13, "hog"))
    replay = seq("replay", 13, priority=10)
    scheduler.add(replay)
    run_step(scheduler)
    assert scheduler.block_manager.num_free_blocks == 0
    scheduler.add(seq("light", 3, "light"))
    assert names(run_step(scheduler).preempted) == ["replay"]  # lower priority: it goes before any tenant's
    late_replay = seq("late-replay", 3, "other", priority=10)  # under its share, but behind live traffic
    scheduler.add(late_replay)
    for _ in range(2):
        run_step(scheduler)
    assert late_replay.status is SequenceStatus.WAITING and late_replay.num_preemptions == 0


def test_end_to_end_a_hog_fills_the_kv_pool_and_another_tenants_request_completes_while_it_still_runs(
        checkpoint_dir):
    """A tiny random model's engine with 24 KV blocks, stepped by hand: six long hog sequences fill the pool; a
    light request then finishes while every hog sequence is still generating, with the tokens it gets alone."""
    import torch

    from tiers.engine.kv_cache import kv_bytes_per_block
    from tiers.engine.llm_engine import Engine
    from tiers.models.checkpoint import open_checkpoint

    path = checkpoint_dir("llama")
    block_bytes = kv_bytes_per_block(open_checkpoint(path).config, 16, torch.float32)
    engine = Engine.from_pretrained(path, max_model_len=256, max_num_seqs=8, kv_cache_bytes=24 * block_bytes)
    assert engine.block_manager.num_blocks == 24
    finished: dict[str, list[int]] = {}

    def collect(out) -> None:
        if out.finished:
            finished[out.request_id] = out.token_ids

    hog = SamplingParams(max_tokens=200, ignore_eos=True, temperature=0)
    for i in range(6):
        engine.add_request(list(range(10 + i, 30 + i)), hog, f"hog-{i}", on_output=collect, tenant="hog")
    while engine.block_manager.num_free_blocks > 0:
        engine.step()
    light_prompt, light = list(range(100, 110)), SamplingParams(max_tokens=8, ignore_eos=True, temperature=0)
    engine.add_request(light_prompt, light, "light", on_output=collect, tenant="light")
    for _ in range(50):
        if "light" in finished:
            break
        engine.step()
    assert "light" in finished and not any(name.startswith("hog") for name in finished)
    assert any(s.tenant == "hog" for s in engine.scheduler.running)
    for i in range(6):
        engine.abort(f"hog-{i}")
    assert engine.generate(light_prompt, light)[0].token_ids == finished["light"]
