"""Priority scheduling: live requests (priority 0) are never held back by low-priority work (the quality
monitor's replays): they are served before it in the token budget, and take its seats and KV blocks."""
from tiers.engine.block_manager import BlockManager
from tiers.engine.sampling_params import SamplingParams
from tiers.engine.scheduler import Scheduler
from tiers.engine.sequence import Sequence, SequenceStatus


def seq(name: str, length: int, priority: int) -> Sequence:
    start = 1000 * (sum(map(ord, name)) % 50)  # distinct prompts: no prefix-cache hits between sequences
    return Sequence(name, list(range(start, start + length)), SamplingParams(max_tokens=50), priority=priority)


def run_step(scheduler: Scheduler) -> dict[str, int]:
    """Schedules one step and pretends the model ran it (each sampled sequence gets one token)."""
    out = scheduler.schedule()
    for s in out.scheduled:
        samples = s.samples
        s.seq.num_computed_tokens += s.num_new_tokens
        if samples:
            s.seq.token_ids.append(7)
    return {s.seq.request_id: s.num_new_tokens for s in out.scheduled}


def test_a_live_request_goes_before_a_running_replay_in_the_token_budget():
    scheduler = Scheduler(BlockManager(64, 16, True), max_num_seqs=8, max_num_batched_tokens=64)
    replay = seq("replay", 200, priority=10)
    scheduler.add(replay)
    assert run_step(scheduler) == {"replay": 64}  # the replay's prefill takes the whole budget
    scheduler.add(seq("live", 40, priority=0))
    assert run_step(scheduler) == {"live": 40, "replay": 24}  # live first, the replay gets what is left


def test_a_live_request_takes_a_seat_from_a_replay():
    scheduler = Scheduler(BlockManager(64, 16, True), max_num_seqs=1, max_num_batched_tokens=64)
    replay = seq("replay", 10, priority=10)
    scheduler.add(replay)
    run_step(scheduler)
    scheduler.add(seq("live", 10, priority=0))
    assert run_step(scheduler) == {"live": 10}
    assert replay.status is SequenceStatus.WAITING and replay.num_preemptions == 1 and not replay.blocks


def test_a_live_request_takes_kv_blocks_from_a_replay_but_not_from_another_live_one():
    scheduler = Scheduler(BlockManager(4, 16, True), max_num_seqs=8, max_num_batched_tokens=256)
    replay = seq("replay", 60, priority=10)  # 4 blocks: the whole pool
    scheduler.add(replay)
    run_step(scheduler)
    scheduler.add(seq("live", 30, priority=0))
    assert run_step(scheduler) == {"live": 30}
    assert replay.status is SequenceStatus.WAITING
    other = seq("live-2", 40, priority=0)  # needs 3 blocks; the first live request holds 2 of 4
    scheduler.add(other)
    assert "live-2" not in run_step(scheduler)  # equal priority: it waits its turn, nobody is preempted
    assert other.status is SequenceStatus.WAITING and scheduler.running[0].request_id == "live"


def test_equal_priorities_keep_arrival_order():
    scheduler = Scheduler(BlockManager(64, 16, True), max_num_seqs=8, max_num_batched_tokens=30)
    for name in ("a", "b", "c"):
        scheduler.add(seq(name, 20, priority=0))
    assert run_step(scheduler) == {"a": 20, "b": 10}
