"""SQL building blocks shared by the dashboard's panels: range filters, hour buckets, tier order."""
from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from aio.db.models import Request
from aio.db.rollups import NO_TIER
from aio.reports.ranges import TimeRange, iso
from aio.settings import TIER_ORDER


def tier_sort_key(tier: str) -> tuple[int, str]:
    return (TIER_ORDER.index(tier) if tier in TIER_ORDER else len(TIER_ORDER) + (tier == NO_TIER), tier)


def request_tier() -> sa.ColumnElement[str]:
    return sa.func.coalesce(Request.tier, NO_TIER)


def raw_filter(r: TimeRange) -> list[sa.ColumnElement[bool]]:
    return [Request.created_at >= r.start, Request.created_at < r.end]


def day_filter(column: Any, r: TimeRange) -> list[sa.ColumnElement[bool]]:
    return [column >= r.first_day, column <= r.last_day]


def hour_of(column: Any, dialect: str) -> sa.ColumnElement[Any]:
    """The UTC hour of a timestamp column, as SQL computes it (text on SQLite, a timestamp on PostgreSQL)."""
    if dialect == "sqlite":  # stored as UTC wall time text, "YYYY-MM-DD HH:MM:SS.ffffff"
        return sa.func.substr(column, 1, 13, type_=sa.String)
    return sa.func.date_trunc("hour", sa.func.timezone("UTC", column), type_=sa.DateTime)


def day_of(column: Any, dialect: str) -> sa.ColumnElement[Any]:
    if dialect == "sqlite":
        return sa.func.substr(column, 1, 10, type_=sa.String)
    return sa.cast(sa.func.timezone("UTC", column), sa.Date)


def bucket_label(value: Any) -> str:
    """An hour (from `hour_of`) or a day, as the ISO string the series use."""
    if isinstance(value, str):
        if len(value) == 10:
            return value
        return value[:10] + "T" + value[11:13] + ":00:00Z"
    if isinstance(value, datetime):
        return iso(value.replace(tzinfo=timezone.utc, minute=0, second=0, microsecond=0)
                   if value.tzinfo is None else value.replace(minute=0, second=0, microsecond=0))
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"not a bucket: {value!r}")


def bucket_labels(r: TimeRange) -> list[str]:
    """Every bucket of the range, in order (hours for raw ranges, days otherwise)."""
    if r.granularity == "day":
        return [(r.first_day + timedelta(days=i)).isoformat() for i in range((r.last_day - r.first_day).days + 1)]
    hour = r.start.replace(minute=0, second=0, microsecond=0)
    labels = []
    while hour < r.end:
        labels.append(bucket_label(hour))
        hour += timedelta(hours=1)
    return labels


def ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None
