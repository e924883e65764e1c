"""Speculative decoding inside the engine's step: plan k, propose, and undo what verification rejected.

A step: the controller sets each decoding sequence's num_lookahead_tokens; the scheduler gives it slots (blocks
included) for 1 + k tokens when the budget and the pool allow; the proposer writes the draft tokens; the target
verifies all k + 1 positions in the same forward pass as everyone else's prefills and decodes; the rejection
sampler emits the accepted tokens and one more. The KV of rejected positions stays in the sequence's blocks but
behind its computed-token count (vLLM v1's rollback), so later steps overwrite it and nothing leaks: blocks are
freed with the sequence as always. The draft's own count follows: it never exceeds the target's.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from tiers.engine.scheduler import ScheduledSequence, Scheduler
from tiers.engine.sequence import Sequence
from tiers.models.config import ModelConfig
from tiers.models.llama import LlamaForCausalLM
from tiers.spec_decode.adaptive import SpecController
from tiers.spec_decode.draft_runner import DraftRunner
from tiers.spec_decode.metrics import SpecDecodeMetrics, SpecDecodeStats
from tiers.spec_decode.proposer import DraftModelProposer, NgramProposer

logger = logging.getLogger(__name__)


class DraftModelError(ValueError):
    """The draft model cannot draft for the target: a different vocabulary, device or dtype."""


def check_vocabulary(target_path: Any, target_config: ModelConfig, target_tokenizer: Any, draft_name: Any,
                     draft_config: ModelConfig, draft_tokenizer: Any) -> None:
    """A draft must speak the target's token ids: same vocabulary size, and the same tokenizer vocabulary where
    both have one. Raises DraftModelError naming both models."""
    if draft_config.vocab_size != target_config.vocab_size:
        raise DraftModelError(f"the draft model {draft_name} has a vocabulary of {draft_config.vocab_size} tokens "
                              f"but the target {target_path} has {target_config.vocab_size}: speculative decoding "
                              "needs the same tokenizer and vocabulary")
    if target_tokenizer is not None and draft_tokenizer is not None:
        if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
            raise DraftModelError(f"the draft model {draft_name} and the target {target_path} have different "
                                  "tokenizer vocabularies: speculative decoding needs the same tokenizer")


def load_draft(draft: Any, target_path: Path, target_config: ModelConfig, target_tokenizer: Any,
               device: torch.device, dtype: torch.dtype) -> tuple[LlamaForCausalLM, ModelConfig]:
    """The draft's model: another engine's (its weights shared, not copied) or loaded from a checkpoint folder.
    The vocabulary is checked before any weight is loaded."""
    from tiers.engine.llm_engine import Engine, _load_tokenizer
    from tiers.models.loader import load_model

    if isinstance(draft, Engine):
        check_vocabulary(target_path, target_config, target_tokenizer, draft.path, draft.model_config,
                         draft.tokenizer)
        runner = draft.runner
        if runner.device != device or runner.dtype != dtype:
            raise DraftModelError(f"the draft engine ({draft.path}) runs on {runner.device} in {runner.dtype}, the "
                                  f"target on {device} in {dtype}: they must match to share a step")
        return runner.model, draft.model_config
    path = Path(draft)
    config = ModelConfig.from_pretrained(path)
    check_vocabulary(target_path, target_config, target_tokenizer, path, config, _load_tokenizer(path))
    return load_model(path, config, device, dtype), config


class Speculator:
    def __init__(self, method: str, max_k: int, adaptive: bool, draft_runner: DraftRunner | None = None,
                 ngram_min: int = 1, ngram_max: int = 3, max_chunk_tokens: int = 2048) -> None:
        self.method = method
        self.controller = SpecController(max_k, adaptive, draft_has_cost=draft_runner is not None)
        if draft_runner is not None:
            self.proposer: DraftModelProposer | NgramProposer = DraftModelProposer(
                draft_runner, self.controller.observe_draft, max_chunk_tokens)
        else:
            self.proposer = NgramProposer(ngram_min, ngram_max)
        self.metrics = SpecDecodeMetrics(max_k)

    def plan(self, scheduler: Scheduler, max_model_len: int) -> None:
        running = scheduler.running
        pending = sum(s.num_tokens - s.num_computed_tokens for s in running if s.num_tokens - s.num_computed_tokens > 1)
        pending += sum(s.num_tokens for s in scheduler.waiting)
        other = min(pending, scheduler.max_num_batched_tokens)
        self.controller.plan(running, max_model_len, other)

    def propose(self, scheduled: list[ScheduledSequence]) -> None:
        """Fills the draft tokens of the sequences given slots for them; a proposal shorter than its slots (an
        n-gram that does not match) gives the extra slots back to the step."""
        items: list[tuple[Sequence, int]] = []
        for s in scheduled:
            k = s.num_spec_tokens
            if k:
                items.append((s.seq, k))
            else:
                s.seq.spec_token_ids, s.seq.draft_probs = [], None
        if not items:
            return
        self.proposer.propose(items)
        for s in scheduled:
            k = s.num_spec_tokens
            if k > len(s.seq.spec_token_ids):
                s.num_new_tokens -= k - len(s.seq.spec_token_ids)

    def verified(self, seq: Sequence, num_draft: int, num_accepted: int) -> None:
        """After the step's computed-token update: roll back the rejected positions."""
        seq.num_computed_tokens -= num_draft - num_accepted
        seq.num_draft_computed_tokens = min(seq.num_draft_computed_tokens, seq.num_computed_tokens)
        seq.spec_token_ids, seq.draft_probs = [], None
        self.controller.record(seq, num_draft, num_accepted)
        self.metrics.record(num_draft, num_accepted)

    def observe_target(self, num_tokens: int, seconds: float) -> None:
        self.controller.observe_target(num_tokens, seconds)

    def reset_metrics(self) -> None:
        """Starts the acceptance counters afresh (the adaptive controller keeps what it learnt)."""
        self.metrics = SpecDecodeMetrics(self.metrics.max_k)

    def stats(self) -> SpecDecodeStats:
        return self.metrics.snapshot(self.method, self.controller.last_k, self.controller.cost_ratio())
