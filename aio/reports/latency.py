"""Latency per tier: TTFT, inter-token, end-to-end and queue time at p50/p95/p99, and the p99/p50 ratio.

Long ranges: from the daily bucket counts (`daily_histograms`; within 19% of the exact value, see
`aio.db.histograms`). Ranges of up to 48 hours: exact nearest-rank percentiles of the raw rows.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from aio.db.histograms import LATENCY_METRICS, exact_percentile, percentile_from_buckets
from aio.db.models import DailyHistogram, Request
from aio.reports.ranges import TimeRange
from aio.reports.sql import day_filter, raw_filter, request_tier, tier_sort_key

QUANTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
CONTENTION_RATIO = 10.0  # p99 / p50 above this: requests wait on each other
# ... but only when the ratio means something: enough samples for a p99 that is not the single slowest request,
# and a p50 well above the timer's noise (a sub-millisecond queue time makes any ratio huge)
CONTENTION_MIN_SAMPLES = 50
CONTENTION_MIN_P50_MS = 1.0
ALL = "all"


def _summary(count: int, quantile) -> dict[str, Any]:
    out: dict[str, Any] = {"count": count, **{name: quantile(q) for name, q in QUANTILES.items()}}
    out["p99_p50_ratio"] = out["p99"] / out["p50"] if out["p50"] else None
    out["contention"] = (out["p99_p50_ratio"] is not None and out["p99_p50_ratio"] > CONTENTION_RATIO
                         and count >= CONTENTION_MIN_SAMPLES and out["p50"] >= CONTENTION_MIN_P50_MS)
    return out


def _from_histograms(connection: Connection, r: TimeRange, metrics: tuple[str, ...]) -> dict[str, dict]:
    h = DailyHistogram
    query = sa.select(h.tier, h.metric, h.bucket, sa.func.sum(h.count)) \
        .where(*day_filter(h.day, r), h.metric.in_(metrics)).group_by(h.tier, h.metric, h.bucket)
    counts: dict[str, dict[str, dict[int, int]]] = defaultdict(lambda: defaultdict(dict))
    for tier, metric, bucket, n in connection.execute(query):
        counts[tier][metric][bucket] = int(n)
        everything = counts[ALL][metric]
        everything[bucket] = everything.get(bucket, 0) + int(n)
    return {tier: {metric: _summary(sum(c.values()), lambda q, c=c: percentile_from_buckets(c, q))
                   for metric, c in by_metric.items()} for tier, by_metric in counts.items()}


def _from_raw(connection: Connection, r: TimeRange, metrics: tuple[str, ...]) -> dict[str, dict]:
    columns = [getattr(Request, m) for m in metrics]
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    query = sa.select(request_tier(), *columns).where(*raw_filter(r))
    for row in connection.execute(query):
        for metric, value in zip(metrics, row[1:]):
            if value is not None:
                values[row[0]][metric].append(value)
                values[ALL][metric].append(value)
    out = {}
    for tier, by_metric in values.items():
        out[tier] = {}
        for metric, v in by_metric.items():
            v.sort()
            out[tier][metric] = _summary(len(v), lambda q, v=v: exact_percentile(v, q))
    return out


def latency(connection: Connection, r: TimeRange, metrics: tuple[str, ...] = LATENCY_METRICS) -> dict[str, Any]:
    """{tier: {metric: {count, p50, p95, p99, p99_p50_ratio, contention}}} in ms, tier "all" for every request;
    a metric without values is left out of its tier."""
    found = _from_histograms(connection, r, metrics) if r.source == "aggregates" else _from_raw(connection, r, metrics)
    order = sorted((t for t in found if t != ALL), key=tier_sort_key) + ([ALL] if ALL in found else [])
    return {"metrics": list(metrics), "contention_ratio": CONTENTION_RATIO,
            "contention_min_samples": CONTENTION_MIN_SAMPLES, "contention_min_p50_ms": CONTENTION_MIN_P50_MS,
            "method": "histogram" if r.source == "aggregates" else "exact",
            "tiers": {tier: found[tier] for tier in order}}
