"""One request inside the engine: its tokens, progress and KV blocks."""
from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import torch

from tiers.engine.block_pool import Block
from tiers.engine.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]]  # (token id, logprob), best first


_counter = itertools.count()


@dataclass(eq=False)
class Sequence:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int = 0
    tenant: Hashable | None = None  # who asked (an API key's id): the scheduler shares fairly between tenants
    on_output: Callable[[Any], None] | None = None
    stream: bool = False
    arrival_time: float = field(default_factory=time.monotonic)
    arrival_index: int = field(default_factory=lambda: next(_counter))
    generator: torch.Generator | None = None
    grammar: Any = None  # structured output: the sequence's GrammarState (tiers.engine.structured_output)
    min_tokens_stop_ids: frozenset[int] = frozenset()  # masked while fewer than params.min_tokens were generated

    def __post_init__(self) -> None:
        self.token_ids: list[int] = list(self.prompt_token_ids)
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # prompt tokens served from the prefix cache at first schedule
        self.blocks: list[Block] = []
        self.num_hashed_blocks = 0
        self.status = SequenceStatus.WAITING
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.logprobs: list[TokenLogprob] = []
        self.first_scheduled_time: float | None = None  # when the scheduler first admitted it (queue time ends)
        self.num_preemptions = 0
        # Speculative decoding: the draft tokens this step verifies (after token_ids, never part of them), the
        # draft's distributions for them when the request samples (None: the proposals were deterministic), the
        # draft's confidence in each (a draft model's; empty otherwise), how many of them the controller asked
        # for, and how many tokens the draft model's own KV cache holds.
        self.spec_token_ids: list[int] = []
        self.draft_probs: torch.Tensor | None = None
        self.draft_confidences: list[float] = []
        self.num_lookahead_tokens = 0
        self.num_draft_computed_tokens = 0
        self.spec_acceptance: Any = None  # the adaptive controller's per-request acceptance estimate
        # Incremental detokenization state (used for streams and stop strings).
        self.text = ""
        self.prefix_offset = max(0, self.num_prompt_tokens - 5)
        self.read_offset = self.num_prompt_tokens
        self.num_text_sent = 0
        self.num_tokens_sent = 0

    @property
    def queue_time(self) -> float | None:
        """Seconds from arrival to the first schedule (vLLM's queue time); None while still waiting."""
        return None if self.first_scheduled_time is None else self.first_scheduled_time - self.arrival_time

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def min_tokens_pending(self) -> bool:
        return self.num_output_tokens < self.params.min_tokens and bool(self.min_tokens_stop_ids)

    @property
    def processes_logits(self) -> bool:
        """The next token is chosen from processed logits (tiers.engine.logits_processor); such a sequence decodes
        without speculation, so its output is the same with or without a draft."""
        return self.params.processes_logits or self.min_tokens_pending

    def clear_draft(self) -> None:
        """No draft tokens (nor their distributions and confidences) pending verification."""
        self.spec_token_ids, self.draft_probs, self.draft_confidences = [], None, []

    def tokens_at(self, start: int, end: int) -> list[int]:
        """Tokens at positions start:end, the draft tokens continuing token_ids."""
        if end <= len(self.token_ids):
            return self.token_ids[start:end]
        return (self.token_ids + self.spec_token_ids)[start:end]

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def block_ids(self) -> list[int]:
        return [b.block_id for b in self.blocks]

    @property
    def sort_key(self) -> tuple[int, int]:
        """Lower is served first and preempted last."""
        return (self.priority, self.arrival_index)
