"""What the engine hands back for a request."""
from __future__ import annotations

from dataclasses import dataclass, field

from tiers.engine.sequence import TokenLogprob


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]  # generated so far (the whole generation once finished)
    text: str  # generated text so far
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it
    new_token_ids: list[int] = field(default_factory=list)  # since the previous output of this request
    delta_text: str = ""
    logprobs: list[TokenLogprob] | None = None
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    queue_time_s: float | None = None  # arrival to first schedule; None while the request still waits
    error: str | None = None  # set when finish_reason == "error"
    error_kind: str | None = None  # then whose failure it was: tiers.engine.errors' REQUEST_INVALID, ...

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


@dataclass
class SpecDecodeStats:
    method: str  # "draft" or "ngram"
    num_speculative_tokens: int  # the largest k
    num_verifications: int  # sequence-steps that verified at least one draft token
    num_draft_tokens: int
    num_accepted_tokens: int
    acceptance_rate: float  # accepted / draft tokens
    # Leviathan's alpha: the chance that a draft token is accepted once the ones before it were, estimated as
    # accepted / (accepted + rejections): a verification stops at its first rejection, if any
    alpha: float
    mean_tokens_per_verification: float  # tokens emitted per verification: 1 + accepted / verifications
    per_position_acceptance: list[float]  # position i: accepted / proposed at draft position i (0 if never)
    num_proposed_per_position: list[int]  # how often a draft token was proposed at position i
    num_plain_decodes: int  # sequence-steps that decoded without draft tokens (k = 0 chosen, or no proposal)
    current_k: int  # the k the adaptive controller chose last
    cost_ratio: float | None  # a draft forward's time / a target forward's (one token each); 0 for ngram


@dataclass
class EngineStats:
    num_blocks: int
    num_free_blocks: int
    num_used_blocks: int
    kv_cache_usage: float  # used / total blocks
    num_running: int
    num_waiting: int
    prefix_cache_hit_rate: float  # prompt tokens served from the cache / prompt tokens looked up
    num_preemptions: int
    num_steps: int
    speculative: SpecDecodeStats | None = None  # acceptance figures when speculative decoding is on
