"""What the monitor needs from the product, handed to it by `aio` (the monitor imports neither aio nor SQL)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Candidate:
    """A finished low-tier answer that may be verified."""
    request_id: str
    tier: str
    messages: list[dict[str, str]]
    answer: str
    max_tokens: int
    routing_score: float | None = None  # P(this tier answers well), when the classifier routed it
    threshold: float | None = None  # the quality threshold it was routed against
    classifier_version: str | None = None


@dataclass(frozen=True)
class ReplayResult:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float  # the judge cost: what the replay cost at the reference tier's prices


@dataclass(frozen=True)
class Verdict:
    candidate: Candidate
    reference_tier: str
    replay: ReplayResult
    similarity: float
    method: str  # "cosine" | "exact" | "number" | "choice" | "json" | "final_answer"
    passed: bool
    detail: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ThresholdChange:
    tier: str
    old_offset: float
    new_offset: float
    failure_rate: float
    num_verdicts: int
    reason: str
    retrain_due: bool


class Replayer(Protocol):
    async def __call__(self, candidate: Candidate) -> ReplayResult: ...


class VerdictStore(Protocol):
    def save(self, verdict: Verdict) -> None: ...

    def recent_outcomes(self, tier: str, limit: int) -> list[bool]: ...

    def offsets(self) -> dict[str, float]: ...

    def shift(self, change: ThresholdChange, max_offset: float) -> dict[str, float]:
        """Add `change.new_offset - change.old_offset` to the tier's stored offset (kept in [0, max_offset]) in
        one transaction; returns the stored offsets afterwards."""
        ...

    def verdicts_after(self, cursor: int | None, limit: int = 1000) -> tuple[list[tuple[str, bool]], int | None]:
        """(tier, passed) of the stored verdicts after `cursor`, oldest first, and the cursor past them; with
        `cursor` None: no verdicts and the cursor past the newest."""
        ...


class Leadership(Protocol):
    """A lease one process of a deployment holds at a time (e.g. a row in the shared database)."""

    def hold(self) -> bool:
        """Take or renew the lease; True while this process holds it."""
        ...

    def release(self) -> None: ...
