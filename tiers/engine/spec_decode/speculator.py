"""Speculative decoding inside the engine's step: plan k, propose, and undo what verification rejected.

A step: the controller sets each decoding sequence's num_lookahead_tokens; the scheduler gives it slots (blocks
included) for 1 + k tokens when the budget and the pool allow; the proposer writes the draft tokens; the target
verifies all k + 1 positions in the same forward pass as everyone else's prefills and decodes; the rejection
sampler emits the accepted tokens and one more. The KV of rejected positions stays in the sequence's blocks but
behind its computed-token count (vLLM v1's rollback), so later steps overwrite it and nothing leaks: blocks are
freed with the sequence as always. The draft's own count follows: it never exceeds the target's.
"""
from __future__ import annotations

import time
from typing import Callable

from tiers.engine.config import EngineConfig
from tiers.engine.outputs import SpecDecodeStats
from tiers.engine.scheduler import ScheduledSequence
from tiers.engine.sequence import Sequence
from tiers.engine.spec_decode.adaptive import SpecController
from tiers.engine.spec_decode.draft_runner import DraftRunner
from tiers.engine.spec_decode.metrics import SpecDecodeMetrics
from tiers.engine.spec_decode.proposer import DraftModelProposer, KeepDrafting, NgramProposer


class Speculator:
    def __init__(self, config: EngineConfig, draft_runner: DraftRunner | None = None) -> None:
        """config.speculative: "draft" (with draft_runner) or "ngram"."""
        assert config.speculative is not None
        self.method = config.speculative
        max_k = config.num_speculative_tokens
        self.controller = SpecController(max_k, config.speculative_adaptive, draft_has_cost=draft_runner is not None,
                                         confidence_stop=config.speculative_confidence_stop)
        if draft_runner is not None:
            self.proposer: DraftModelProposer | NgramProposer = DraftModelProposer(
                draft_runner, self.controller.observe_draft, config.max_num_batched_tokens)
        else:
            self.proposer = NgramProposer(config.ngram_min, config.ngram_max)
        self.metrics = SpecDecodeMetrics(max_k)

    def execute(self, scheduled: list[ScheduledSequence], execute_target: Callable[[list[ScheduledSequence]], dict]
                ) -> dict:
        """The step: proposes the draft tokens, then runs `execute_target` (the target's forward and sampling),
        whose time the adaptive controller weighs against the draft's."""
        self.propose(scheduled)
        start = time.perf_counter()
        sampled = execute_target(scheduled)
        self.observe_target(sum(s.num_new_tokens for s in scheduled), time.perf_counter() - start)
        return sampled

    def plan(self, running: list[Sequence], num_prefill_tokens: int, max_model_len: int) -> None:
        """Sets each running sequence's num_lookahead_tokens for the next schedule. num_prefill_tokens: what the
        step will compute besides the decodes (Scheduler.num_pending_prefill_tokens)."""
        self.controller.plan(running, max_model_len, num_prefill_tokens)

    def propose(self, scheduled: list[ScheduledSequence]) -> None:
        """Fills the draft tokens of the sequences given slots for them; a proposal shorter than its slots (an
        n-gram that does not match) gives the extra slots back to the step."""
        items: list[tuple[Sequence, int]] = []
        for s in scheduled:
            k = s.num_spec_tokens
            if k:
                items.append((s.seq, k))
            else:
                s.seq.clear_draft()
        if not items:
            return
        if isinstance(self.proposer, DraftModelProposer):
            self.proposer.propose(items, self._keep_drafting(scheduled))
        else:
            self.proposer.propose(items)
        for s in scheduled:
            k = s.num_spec_tokens
            if k > len(s.seq.spec_token_ids):
                s.num_new_tokens -= k - len(s.seq.spec_token_ids)

    def _keep_drafting(self, scheduled: list[ScheduledSequence]) -> KeepDrafting:
        """The controller's stop rule for this step: the step computes its other tokens (prefills, the decodes'
        next tokens) and every draft token proposed so far."""
        base = sum(s.num_new_tokens - s.num_spec_tokens for s in scheduled)

        def keep(drafts: list[tuple[Sequence, list[float]]]) -> list[bool]:
            drafted = sum(len(s.seq.spec_token_ids) for s in scheduled)
            return self.controller.keep_drafting(drafts, base + drafted)
        return keep

    def verified(self, seq: Sequence, num_draft: int, num_accepted: int) -> None:
        """After the step's computed-token update: roll back the rejected positions."""
        seq.num_computed_tokens -= num_draft - num_accepted
        seq.num_draft_computed_tokens = min(seq.num_draft_computed_tokens, seq.num_computed_tokens)
        self.controller.record(seq, num_draft, num_accepted, seq.draft_confidences)
        seq.clear_draft()
        self.metrics.record(num_draft, num_accepted)

    def observe_target(self, num_tokens: int, seconds: float) -> None:
        self.controller.observe_target(num_tokens, seconds)

    def reset_metrics(self) -> None:
        """Starts the acceptance counters afresh (the adaptive controller keeps what it learnt)."""
        self.metrics = SpecDecodeMetrics(self.metrics.max_k)

    def stats(self) -> SpecDecodeStats:
        return self.metrics.snapshot(self.method, self.controller.last_k, self.controller.cost_ratio())
