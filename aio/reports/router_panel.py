"""The router: routing-score histogram per tier against the thresholds in force, escalations and fallbacks over
time, threshold changes, and classifier versions (markers with their metrics)."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from aio.reports.ranges import TimeRange, iso
from aio.reports.sql import bucket_label, bucket_labels, day_filter, hour_of, raw_filter, request_tier, tier_sort_key
from aio.db.histograms import NUM_SCORE_BUCKETS, SCORE_METRIC, score_bounds, score_bucket
from aio.db.models import ClassifierVersion, DailyAggregate, DailyHistogram, Request, ThresholdChange


def score_histogram(connection: Connection, r: TimeRange) -> dict[str, Any]:
    """Per tier, how many requests had a routing score in each of 20 bins over [0, 1]."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * NUM_SCORE_BUCKETS)
    if r.source == "aggregates":
        h = DailyHistogram
        query = sa.select(h.tier, h.bucket, sa.func.sum(h.count)) \
            .where(*day_filter(h.day, r), h.metric == SCORE_METRIC).group_by(h.tier, h.bucket)
        for tier, bucket, n in connection.execute(query):
            counts[tier][bucket] += int(n)
    else:
        query = sa.select(request_tier(), Request.routing_score) \
            .where(*raw_filter(r), Request.routing_score.is_not(None))
        for tier, score in connection.execute(query):
            counts[tier][score_bucket(score)] += 1
    return {"edges": [score_bounds(b)[0] for b in range(NUM_SCORE_BUCKETS)] + [1.0],
            "tiers": {tier: counts[tier] for tier in sorted(counts, key=tier_sort_key)}}


def reroutes(connection: Connection, r: TimeRange) -> dict[str, Any]:
    """Escalations (the prompt did not fit the chosen tier) and fallbacks (the tier was down) per bucket."""
    cells: dict[str, list[int]] = {}
    if r.source == "aggregates":
        a = DailyAggregate
        query = sa.select(a.day, sa.func.sum(a.num_escalations), sa.func.sum(a.num_fallbacks)) \
            .where(*day_filter(a.day, r)).group_by(a.day)
        for day, escalations, fallbacks in connection.execute(query):
            cells[bucket_label(day)] = [int(escalations or 0), int(fallbacks or 0)]
    else:
        q = Request
        hour = hour_of(q.created_at, connection.dialect.name)
        query = sa.select(hour, sa.func.sum(sa.case((q.routing_reason == "escalation", 1), else_=0)),
                          sa.func.sum(sa.case((q.routing_reason == "fallback", 1), else_=0))) \
            .where(*raw_filter(r)).group_by(hour)
        for label, escalations, fallbacks in connection.execute(query):
            cells[bucket_label(label)] = [int(escalations or 0), int(fallbacks or 0)]
    labels = bucket_labels(r)
    escalations = [cells.get(label, [0, 0])[0] for label in labels]
    fallbacks = [cells.get(label, [0, 0])[1] for label in labels]
    return {"buckets": labels, "escalations": escalations, "fallbacks": fallbacks,
            "total_escalations": sum(escalations), "total_fallbacks": sum(fallbacks)}


def threshold_changes(connection: Connection, r: TimeRange) -> list[dict[str, Any]]:
    t = ThresholdChange
    query = sa.select(t).where(t.changed_at >= r.start, t.changed_at < r.end).order_by(t.changed_at, t.id)
    return [{"changed_at": iso(c.changed_at), "quality": c.quality, "offsets": c.offsets or {},
             "updated_by": c.updated_by, "note": c.note} for c in Session(bind=connection).scalars(query)]


def classifier_versions(connection: Connection, r: TimeRange) -> list[dict[str, Any]]:
    """Every version, oldest first; `in_range` when it was created or promoted within the range."""
    out = []
    for v in Session(bind=connection).scalars(sa.select(ClassifierVersion).order_by(ClassifierVersion.created_at)):
        moments = [m for m in (v.created_at, v.promoted_at) if m is not None]
        out.append({"version": v.version, "kind": v.kind, "status": v.status, "active": v.active,
                    "created_at": iso(v.created_at), "promoted_at": iso(v.promoted_at) if v.promoted_at else None,
                    "metrics": v.metrics or {}, "num_train_examples": v.num_train_examples,
                    "in_range": any(r.start <= m < r.end for m in moments)})
    return out


def thresholds(quality: float, offsets: dict[str, float], tiers: list[str]) -> dict[str, Any]:
    """The thresholds in force: a tier keeps a request when P(it answers well) >= quality + its offset (the
    largest tier always accepts)."""
    return {"quality": quality, "offsets": offsets,
            "tiers": {t: (min(1.0, quality + offsets.get(t, 0.0)) if i < len(tiers) - 1 else None)
                      for i, t in enumerate(tiers)}}
