"""Which finished answers to verify.

A fixed base rate (default 5%), doubled for answers routed near the quality threshold (|score − threshold| <
0.1: the verdicts that move the classifier's boundary and that retraining learns most from) and lowered to
0.75× elsewhere, so a typical mix keeps about the base rate overall. The draw is a hash of the request id, so
every replica and an external `aio monitor` make the same decision for the same request.
"""
from __future__ import annotations

import hashlib

NEAR_BAND = 0.1
NEAR_WEIGHT = 2.0
FAR_WEIGHT = 0.75


class Sampler:
    def __init__(self, rate: float, tiers: tuple[str, ...] = ("small", "medium")) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"the sample rate must be in [0, 1], got {rate}")
        self.rate = rate
        self.tiers = tiers

    def probability(self, routing_score: float | None, threshold: float | None) -> float:
        if routing_score is None or threshold is None or self.rate >= 1.0:
            return self.rate  # a rate of 1 verifies everything
        weight = NEAR_WEIGHT if abs(routing_score - threshold) < NEAR_BAND else FAR_WEIGHT
        return min(1.0, self.rate * weight)

    def should_sample(self, request_id: str, tier: str, routing_score: float | None = None,
                      threshold: float | None = None) -> bool:
        if tier not in self.tiers or self.rate == 0.0:
            return False
        draw = int(hashlib.sha256(request_id.encode()).hexdigest()[:12], 16) / float(1 << 48)
        return draw < self.probability(routing_score, threshold)
