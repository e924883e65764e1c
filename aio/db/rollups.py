"""The daily roll-ups of the SQL log, kept next to `requests` so that long dashboard ranges need not scan it:
`daily_aggregates` (sums per UTC day and tier), `daily_histograms` (latency and score bucket counts) and
`daily_usage` (sums per day, tier and API key / user / model).

The log writer (`aio.db.log_writer`) upserts them in the transaction that inserts the rows they count, with the
rows that insert returned, so that each request is counted once.
"""
from __future__ import annotations

import math
from typing import Any

import sqlalchemy as sa

from aio.db.histograms import LATENCY_METRICS, SCORE_METRIC, bucket_of
from aio.db.models import DailyAggregate, DailyHistogram, DailyUsage

NO_TIER = "none"  # the tier under which requests rejected before routing are counted
USAGE_SUMS = ("num_requests", "num_errors", "prompt_tokens", "completion_tokens", "cost_usd", "baseline_cost_usd")
SUM_COLUMNS = (*USAGE_SUMS, "sum_latency_ms", "num_latency", "sum_ttft_ms", "num_ttft", "num_escalations",
               "num_fallbacks", "num_cascades", "cascade_cost_usd")
HISTOGRAM_METRICS = (*LATENCY_METRICS, SCORE_METRIC)
MAX_USER_CHARS = 200  # `user` as kept in daily_usage


def rollup_upserts(insert: Any) -> tuple[sa.Insert, sa.Insert, sa.Insert]:
    """The upserts of daily_aggregates, daily_histograms and daily_usage (the order of `rollup_values`), for
    the dialect's `insert` (sqlite.insert or postgresql.insert)."""
    return (_upsert(insert, DailyAggregate.__table__, SUM_COLUMNS),
            _upsert(insert, DailyHistogram.__table__, ("count",)),
            _upsert(insert, DailyUsage.__table__, USAGE_SUMS))


def rollup_values(rows: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """What `requests` rows add to each roll-up table (the order of `rollup_upserts`)."""
    return _aggregate(rows), _histograms(rows), _usage(rows)


def _upsert(insert: Any, table: sa.Table, sums: tuple[str, ...]) -> sa.Insert:
    """INSERT ... ON CONFLICT (primary key) DO UPDATE: the sums grow by the new values."""
    upsert = insert(table)
    return upsert.on_conflict_do_update(index_elements=list(table.primary_key.columns),
                                        set_={name: table.c[name] + upsert.excluded[name] for name in sums})


def _add_usage(agg: dict[str, Any], row: dict[str, Any]) -> None:
    """Counts `row` into the usage sums (`USAGE_SUMS`) that daily_aggregates and daily_usage both keep."""
    agg["num_requests"] += 1
    agg["num_errors"] += row["status"] != "ok"
    for name in ("prompt_tokens", "completion_tokens", "cost_usd", "baseline_cost_usd"):
        agg[name] += row[name]


def _aggregate(rows: Any) -> list[dict[str, Any]]:
    """Sums per (UTC day, tier), in key order (replicas upserting the same keys then lock them in the same order).
    A cascaded request counts under the tier that served it, with its whole cost (the replaced answers' included)."""
    sums: dict[tuple[Any, str], dict[str, Any]] = {}
    for row in rows:
        day, tier = row["created_at"].date(), row["tier"] or NO_TIER
        agg = sums.setdefault((day, tier), {"day": day, "tier": tier, **dict.fromkeys(SUM_COLUMNS, 0)})
        _add_usage(agg, row)
        if row["latency_ms"] is not None:
            agg["sum_latency_ms"] += row["latency_ms"]
            agg["num_latency"] += 1
        if row["ttft_ms"] is not None:
            agg["sum_ttft_ms"] += row["ttft_ms"]
            agg["num_ttft"] += 1
        agg["num_escalations"] += row["routing_reason"] == "escalation"
        agg["num_fallbacks"] += row["routing_reason"] == "fallback"
        if row["cascade_from_tier"] is not None:  # a cascade's whole cost lands on the tier that answered last
            agg["num_cascades"] += 1
            agg["cascade_cost_usd"] += row["cascade_cost_usd"] or 0.0
    return [sums[key] for key in sorted(sums)]


def _histograms(rows: Any) -> list[dict[str, Any]]:
    """Bucket counts per (UTC day, tier, metric, bucket), in key order; NULL values are not counted."""
    counts: dict[tuple[Any, str, str, int], int] = {}
    for row in rows:
        day, tier = row["created_at"].date(), row["tier"] or NO_TIER
        for metric in HISTOGRAM_METRICS:
            value = row.get(metric)
            if value is not None and math.isfinite(value):
                key = (day, tier, metric, bucket_of(metric, value))
                counts[key] = counts.get(key, 0) + 1
    return [{"day": k[0], "tier": k[1], "metric": k[2], "bucket": k[3], "count": counts[k]} for k in sorted(counts)]


def usage_values(row: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The (dimension, value) pairs a request is counted under in daily_usage."""
    return (("key", str(row["key_id"]) if row["key_id"] is not None else ""),
            ("user", (row["user"] or "")[:MAX_USER_CHARS]), ("model", row["model"] or ""))


def _usage(rows: Any) -> list[dict[str, Any]]:
    """Sums per (UTC day, tier, dimension, value), in key order."""
    sums: dict[tuple[Any, str, str, str], dict[str, Any]] = {}
    for row in rows:
        day, tier = row["created_at"].date(), row["tier"] or NO_TIER
        for dimension, value in usage_values(row):
            agg = sums.setdefault((day, tier, dimension, value),
                                  {"day": day, "tier": tier, "dimension": dimension, "value": value,
                                   **dict.fromkeys(USAGE_SUMS, 0)})
            _add_usage(agg, row)
    return [sums[key] for key in sorted(sums)]
