"""Continuous batching with a per-step token budget (vLLM v1's rule).

There are no prefill and decode phases: each sequence has computed tokens and a target (all its tokens). A step
serves running sequences first, then admits waiting ones, until the token budget or max_num_seqs is used up.
A prompt longer than the remaining budget is prefilled in chunks over several steps. When the KV pool runs
out, the lowest-priority running sequence is preempted: its blocks are freed and it is recomputed later. Between
tenants (the callers' opaque ids: API keys) the seats and blocks are shared fairly (tiers.engine.fair_share).
A decoding sequence may also get slots for `num_lookahead_tokens` draft tokens (speculative decoding): when the
budget or the blocks do not allow them, it decodes plainly rather than preempting anyone.
"""
from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

from tiers.engine.block_manager import BlockManager
from tiers.engine.fair_share import FairShare, Holding
from tiers.engine.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledSequence:
    seq: Sequence
    num_new_tokens: int

    @property
    def samples(self) -> bool:
        """After this step the sequence has computed all its tokens, so the step samples its next token (or, with
        draft tokens, verifies them and samples one more)."""
        return self.seq.num_computed_tokens + self.num_new_tokens >= self.seq.num_tokens

    @property
    def num_spec_tokens(self) -> int:
        """Draft tokens scheduled for verification after the sequence's own tokens."""
        return max(0, self.seq.num_computed_tokens + self.num_new_tokens - self.seq.num_tokens)


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledSequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    num_tokens: int = 0  # scheduled in this step

    def add(self, seq: Sequence, num_new_tokens: int) -> None:
        self.scheduled.append(ScheduledSequence(seq, num_new_tokens))
        self.num_tokens += num_new_tokens

    def remove(self, seq: Sequence) -> None:
        """Takes back a sequence scheduled earlier in this step (it was preempted), and its tokens."""
        for i, s in enumerate(self.scheduled):
            if s.seq is seq:
                self.num_tokens -= self.scheduled.pop(i).num_new_tokens
                return


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: list[Sequence] = []  # sorted by sort_key
        self.running: list[Sequence] = []  # sorted by sort_key
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        bisect.insort(self.waiting, seq, key=lambda s: s.sort_key)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def num_pending_prefill_tokens(self) -> int:
        """The tokens the next step would compute besides single-token decodes (running prefill chunks and
        waiting prompts), at most the step's token budget."""
        pending = sum(n for s in self.running if (n := s.num_tokens - s.num_computed_tokens) > 1)
        pending += sum(s.num_tokens for s in self.waiting)
        return min(pending, self.max_num_batched_tokens)

    def schedule(self) -> SchedulerOutput:
        """Candidates in priority order, running before waiting within a priority: a waiting sequence that
        outranks running ones is served before them, and takes blocks or a seat from the lowest-priority running
        ones if it must; within one priority, running sequences go first in arrival order, and waiting ones in the
        order of their tenants' holdings (FairShare.admission_rank), then of arrival."""
        out = SchedulerOutput()
        fair = self._fair_share() if self.waiting else None
        order = sorted([(s.priority, 0, (0.0, 0), s.arrival_index, s) for s in self.running] +
                       [(s.priority, 1, fair.admission_rank(s), s.arrival_index, s) for s in self.waiting],
                       key=lambda c: c[:4])
        admitting = True  # stops once a waiting sequence cannot be admitted (FCFS) or a running one was preempted
        for _, is_waiting, _, _, seq in order:
            budget = self.max_num_batched_tokens - out.num_tokens
            if budget <= 0:
                break
            if not is_waiting:
                if seq.status is not SequenceStatus.RUNNING:
                    continue  # preempted earlier in this step
                num_preempted = len(out.preempted)
                self._schedule_running(seq, budget, out)
                if len(out.preempted) > num_preempted:
                    admitting = False  # blocks are short: admitting now would only preempt again (vLLM's rule)
            elif admitting and not self._admit(seq, budget, out):
                admitting = False
        return out

    def _fair_share(self) -> FairShare:
        return FairShare(self.running, self.waiting, self.max_num_seqs, self.block_manager.num_blocks)

    def _schedule_running(self, seq: Sequence, budget: int, out: SchedulerOutput) -> None:
        num_new = min(seq.num_tokens - seq.num_computed_tokens, budget)
        assert num_new > 0, "a running sequence has nothing to compute"
        num_spec = min(seq.num_lookahead_tokens, budget - num_new) if seq.num_tokens - seq.num_computed_tokens == 1 \
            else 0
        if num_spec > 0 and self._lookahead_fits(seq, num_new + num_spec) and \
                self.block_manager.allocate_slots(seq, num_new + num_spec):
            out.add(seq, num_new + num_spec)
            return
        while not self.block_manager.allocate_slots(seq, num_new):
            victim = self._fair_share().victim(self.running)
            self._preempt(victim, out)
            if victim is seq:
                return
        out.add(seq, num_new)

    def _lookahead_fits(self, seq: Sequence, num_new: int) -> bool:
        """Draft-token slots are a bonus: taken only while the pool keeps a free block per running sequence, so
        speculation does not use up the blocks the others need for their next tokens."""
        bm = self.block_manager
        extra = bm.num_blocks_for(seq.num_computed_tokens + num_new) - len(seq.blocks)
        return extra <= 0 or bm.num_free_blocks - extra >= len(self.running)

    def _admit(self, seq: Sequence, budget: int, out: SchedulerOutput) -> bool:
        while len(self.running) >= self.max_num_seqs:
            if not self._make_room(seq, out, len(self.running) + 1 - self.max_num_seqs, 0):
                return False
        bm = self.block_manager
        while True:
            computed = bm.get_computed_blocks(seq)  # again after a preemption: the victim may have held prefix blocks
            num_cached = len(computed) * bm.block_size
            num_new = min(seq.num_tokens - num_cached, budget)
            if bm.allocate_slots(seq, num_new, computed):
                break
            evictable_hits = sum(1 for b in computed if b.ref_count == 0)  # free-list blocks it would take too
            blocks_short = bm.num_blocks_for(num_cached + num_new) - len(computed) + evictable_hits \
                - bm.num_free_blocks
            if not self._make_room(seq, out, 0, max(1, blocks_short)):
                return False
        self.waiting.remove(seq)
        if seq.num_preemptions == 0:
            seq.num_cached_tokens = num_cached
            seq.first_scheduled_time = time.monotonic()
            bm.record_prefix_lookup(seq.num_prompt_tokens, num_cached)
        seq.num_computed_tokens = num_cached
        seq.status = SequenceStatus.RUNNING
        bisect.insort(self.running, seq, key=lambda s: s.sort_key)
        out.add(seq, num_new)
        return True

    def _make_room(self, seq: Sequence, out: SchedulerOutput, seats_short: int, blocks_short: int) -> bool:
        """Preempts for waiting `seq`: the lowest-priority running sequence if `seq` strictly outranks it, else
        what fair sharing lets it displace (nothing when its tenant holds its share). False if nobody."""
        if self.running and self.running[-1].priority > seq.priority:
            victims = [self.running[-1]]
        else:
            need = Holding(1, self.block_manager.num_blocks_for(seq.num_tokens))
            victims = self._fair_share().displace(seq, self.running, seats_short, blocks_short, need)
        for victim in victims:
            self._preempt(victim, out)
        return bool(victims)

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        out.remove(seq)
        out.preempted.append(seq)
        self.block_manager.free(seq)
        seq.num_computed_tokens = seq.num_draft_computed_tokens = 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.add(seq)

    def finish(self, seq: Sequence, reason: str, discard_cached: bool = False) -> None:
        """Remove a sequence wherever it is and free its blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.block_manager.free(seq, discard_cached=discard_cached)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
