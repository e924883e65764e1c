"""Fixed histogram buckets kept per UTC day and tier in `daily_histograms` (see the log writer), so percentiles over
any range of days come from bucket counts instead of raw rows.

Latencies (milliseconds) use log-spaced buckets, 4 per doubling: bucket b holds [2^((b-OFFSET)/4), 2^((b-OFFSET+1)/4))
ms, so an estimate read from a bucket is within a factor 2^(1/4) (19%) of the true value; bucket 0 also holds
everything below ~1 µs (and zero), the last bucket everything above ~17 minutes. The routing score uses 20 equal
bins over [0, 1]. THE BUCKETS ARE PART OF THE STORED DATA: never change them (migration 0004 repeats them).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

LATENCY_METRICS = ("ttft_ms", "itl_ms", "latency_ms", "queue_ms")  # request columns histogrammed per day and tier
SCORE_METRIC = "routing_score"
BUCKETS_PER_DOUBLING = 4
OFFSET = 40  # bucket 0 starts at 2^-10 ms
NUM_LATENCY_BUCKETS = 120  # up to 2^20 ms
NUM_SCORE_BUCKETS = 20


def latency_bucket(value_ms: float) -> int:
    if not value_ms > 0 or math.isnan(value_ms):
        return 0
    b = math.floor(math.log2(value_ms) * BUCKETS_PER_DOUBLING) + OFFSET
    return min(max(b, 0), NUM_LATENCY_BUCKETS - 1)


def latency_bounds(bucket: int) -> tuple[float, float]:
    """[lower, upper) of a latency bucket in ms (bucket 0's lower bound is 0)."""
    lower = 0.0 if bucket == 0 else 2.0 ** ((bucket - OFFSET) / BUCKETS_PER_DOUBLING)
    return lower, 2.0 ** ((bucket + 1 - OFFSET) / BUCKETS_PER_DOUBLING)


def score_bucket(score: float) -> int:
    if math.isnan(score):
        return 0
    return min(max(math.floor(score * NUM_SCORE_BUCKETS), 0), NUM_SCORE_BUCKETS - 1)


def score_bounds(bucket: int) -> tuple[float, float]:
    return bucket / NUM_SCORE_BUCKETS, (bucket + 1) / NUM_SCORE_BUCKETS


def bucket_of(metric: str, value: float) -> int:
    return score_bucket(value) if metric == SCORE_METRIC else latency_bucket(value)


def percentile_from_buckets(counts: Mapping[int, int], q: float) -> float | None:
    """The q-quantile (0 < q <= 1) of a latency histogram: the bucket holding the nearest-rank value, with the
    position inside it interpolated geometrically by rank. None for an empty histogram."""
    total = sum(counts.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for bucket in sorted(counts):
        n = counts[bucket]
        if n <= 0:
            continue
        if seen + n >= rank:
            lower, upper = latency_bounds(bucket)
            if lower == 0.0:
                return upper * (rank - seen) / n
            return lower * (upper / lower) ** ((rank - seen) / n)
        seen += n
    return latency_bounds(max(counts))[1]  # unreachable


def exact_percentile(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank q-quantile of raw values (what `percentile_from_buckets` estimates)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]
