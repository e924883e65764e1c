"""Acceptance counters of speculative decoding, as vLLM reports them."""
from __future__ import annotations

from dataclasses import dataclass, field

from tiers.engine.outputs import SpecDecodeStats


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
