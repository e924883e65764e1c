"""Acceptance counters of speculative decoding, as vLLM reports them."""
from __future__ import annotations

from dataclasses import dataclass, field


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
class SpecDecodeMetrics:
    max_k: int
    num_verifications: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_rejections: int = 0  # verifications that rejected one of their draft tokens
    num_plain_decodes: int = 0
    proposed_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.proposed_at = [0] * self.max_k
        self.accepted_at = [0] * self.max_k

    def record(self, num_draft: int, num_accepted: int) -> None:
        if not num_draft:
            self.num_plain_decodes += 1
            return
        self.num_verifications += 1
        self.num_draft_tokens += num_draft
        self.num_accepted_tokens += num_accepted
        self.num_rejections += num_accepted < num_draft
        for i in range(num_draft):
            self.proposed_at[i] += 1
            self.accepted_at[i] += i < num_accepted

    def snapshot(self, method: str, current_k: int, cost_ratio: float | None) -> SpecDecodeStats:
        n = self.num_verifications
        return SpecDecodeStats(
            method=method, num_speculative_tokens=self.max_k, num_verifications=n,
            num_draft_tokens=self.num_draft_tokens, num_accepted_tokens=self.num_accepted_tokens,
            acceptance_rate=self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0,
            alpha=self.num_accepted_tokens / trials if (trials := self.num_accepted_tokens + self.num_rejections)
            else 0.0,
            mean_tokens_per_verification=1 + self.num_accepted_tokens / n if n else 0.0,
            per_position_acceptance=[a / p if p else 0.0 for a, p in zip(self.accepted_at, self.proposed_at)],
            num_proposed_per_position=list(self.proposed_at),
            num_plain_decodes=self.num_plain_decodes, current_k=current_k, cost_ratio=cost_ratio)
