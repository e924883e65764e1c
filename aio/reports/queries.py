"""Usage and cost: the KPI sums per tier, the series over time, and the top-N breakdowns (tier, key, user, model).

Every function reads the daily aggregates for long ranges and raw `requests` rows for ranges of up to 48 hours
(see `aio.reports.ranges`); both give the same sums.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from aio.reports.ranges import TimeRange
from aio.reports.sql import (bucket_label, bucket_labels, day_filter, hour_of, ratio, raw_filter, request_tier,
                               tier_sort_key)
from aio.db.budgets import budget_states
from aio.db.models import ApiKey, DailyAggregate, DailyUsage, Request
from aio.db.records import utcnow

SUMS = ("requests", "errors", "prompt_tokens", "completion_tokens", "cost_usd", "baseline_cost_usd")
BREAKDOWNS = ("tier", "key", "user", "model")


def _aggregate_sums() -> list[sa.ColumnElement[Any]]:
    a = DailyAggregate
    return [sa.func.sum(a.num_requests), sa.func.sum(a.num_errors), sa.func.sum(a.prompt_tokens),
            sa.func.sum(a.completion_tokens), sa.func.sum(a.cost_usd), sa.func.sum(a.baseline_cost_usd)]


def _raw_sums() -> list[sa.ColumnElement[Any]]:
    r = Request
    return [sa.func.count(), sa.func.sum(sa.case((r.status != "ok", 1), else_=0)), sa.func.sum(r.prompt_tokens),
            sa.func.sum(r.completion_tokens), sa.func.sum(r.cost_usd), sa.func.sum(r.baseline_cost_usd)]


def with_derived(sums: dict[str, float]) -> dict[str, Any]:
    """The sums plus tokens, savings ($ and % of the baseline) and the error rate."""
    out: dict[str, Any] = {name: (float if name.endswith("_usd") else int)(sums.get(name) or 0) for name in SUMS}
    out["tokens"] = out["prompt_tokens"] + out["completion_tokens"]
    out["savings_usd"] = out["baseline_cost_usd"] - out["cost_usd"]
    savings_pct = ratio(out["savings_usd"], out["baseline_cost_usd"])
    out["savings_pct"] = None if savings_pct is None else 100 * savings_pct
    out["error_rate"] = ratio(out["errors"], out["requests"])
    return out


def _total(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return with_derived({name: sum(row[name] for row in rows) for name in SUMS})


def sums_by_tier(connection: Connection, r: TimeRange) -> dict[str, dict[str, Any]]:
    """Per tier (tier "none": rejected before routing): requests, errors, tokens, cost, baseline, savings."""
    if r.source == "aggregates":
        query = sa.select(DailyAggregate.tier, *_aggregate_sums()).where(*day_filter(DailyAggregate.day, r)) \
            .group_by(DailyAggregate.tier)
    else:
        tier = request_tier()
        query = sa.select(tier, *_raw_sums()).where(*raw_filter(r)).group_by(tier)
    by_tier = {row[0]: with_derived(dict(zip(SUMS, row[1:]))) for row in connection.execute(query)}
    return {tier: by_tier[tier] for tier in sorted(by_tier, key=tier_sort_key)}


def totals(by_tier: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return _total(list(by_tier.values()))


def cascades_by_tier(connection: Connection, r: TimeRange) -> dict[str, dict[str, Any]]:
    """Per tier that served them: the requests the confidence cascade answered again (`cascades`) and what their
    replaced cheaper answers cost (`cascade_cost_usd`, already part of that tier's `cost_usd`)."""
    if r.source == "aggregates":
        a = DailyAggregate
        query = sa.select(a.tier, sa.func.sum(a.num_cascades), sa.func.sum(a.cascade_cost_usd)) \
            .where(*day_filter(a.day, r)).group_by(a.tier)
    else:
        tier = request_tier()
        query = sa.select(tier, sa.func.count(Request.cascade_from_tier), sa.func.sum(Request.cascade_cost_usd)) \
            .where(*raw_filter(r)).group_by(tier)
    return {row[0]: {"cascades": int(row[1] or 0), "cascade_cost_usd": float(row[2] or 0.0)}
            for row in connection.execute(query)}


def series(connection: Connection, r: TimeRange) -> dict[str, Any]:
    """Per time bucket (hour or day) and tier: the sums; plus per-bucket totals, tier shares of requests and
    tokens, and the cumulative savings."""
    if r.source == "aggregates":
        bucket = DailyAggregate.day
        query = sa.select(bucket, DailyAggregate.tier, *_aggregate_sums()).where(*day_filter(bucket, r)) \
            .group_by(bucket, DailyAggregate.tier)
    else:
        bucket, tier = hour_of(Request.created_at, connection.dialect.name), request_tier()
        query = sa.select(bucket, tier, *_raw_sums()).where(*raw_filter(r)).group_by(bucket, tier)
    cells: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in connection.execute(query):
        cells[row[1]][bucket_label(row[0])] = dict(zip(SUMS, row[2:]))
    labels = bucket_labels(r)
    for tier_cells in cells.values():  # buckets the labels miss (should not happen) still count
        labels += [label for label in tier_cells if label not in labels]
    labels.sort()
    empty = dict.fromkeys(SUMS, 0)
    tiers = {}
    for tier in sorted(cells, key=tier_sort_key):
        points = [with_derived(cells[tier].get(label, empty)) for label in labels]
        tiers[tier] = {name: [p[name] for p in points]
                       for name in (*SUMS, "tokens", "savings_usd")}
    total_points = [_total([cells[t].get(label, empty) for t in cells]) for label in labels]
    total = {name: [p[name] for p in total_points] for name in (*SUMS, "tokens", "savings_usd")}
    cumulative, running = [], 0.0
    for saving in total["savings_usd"]:
        running += saving
        cumulative.append(running)
    total["cumulative_savings_usd"] = cumulative
    for tier, values in tiers.items():
        values["request_share"] = [ratio(n, t) for n, t in zip(values["requests"], total["requests"])]
        values["token_share"] = [ratio(n, t) for n, t in zip(values["tokens"], total["tokens"])]
    return {"buckets": labels, "tiers": tiers, "total": total}


def _raw_dimension(name: str) -> sa.ColumnElement[Any]:
    return {"tier": request_tier(), "key": sa.func.coalesce(Request.key_id, 0),
            "user": sa.func.coalesce(sa.func.substr(Request.user, 1, 200), ""),
            "model": sa.func.coalesce(Request.model, "")}[name]


def _grouped(connection: Connection, r: TimeRange, by: str) -> list[tuple[Any, dict[str, Any]]]:
    """(value, sums) per value of the dimension, most expensive first."""
    if r.source == "raw":
        dim, sums, where = _raw_dimension(by), _raw_sums(), raw_filter(r)
        query = sa.select(dim, *sums).where(*where).group_by(dim)
    elif by == "tier":
        query = sa.select(DailyAggregate.tier, *_aggregate_sums()).where(*day_filter(DailyAggregate.day, r)) \
            .group_by(DailyAggregate.tier)
    else:
        u = DailyUsage
        sums = [sa.func.sum(u.num_requests), sa.func.sum(u.num_errors), sa.func.sum(u.prompt_tokens),
                sa.func.sum(u.completion_tokens), sa.func.sum(u.cost_usd), sa.func.sum(u.baseline_cost_usd)]
        query = sa.select(u.value, *sums).where(*day_filter(u.day, r), u.dimension == by).group_by(u.value)
    rows = []
    for row in connection.execute(query):
        value = row[0]
        if by == "key":
            value = int(value) if value not in ("", None) else 0
        rows.append((value, with_derived(dict(zip(SUMS, row[1:])))))
    rows.sort(key=lambda item: (-item[1]["cost_usd"], str(item[0])))
    return rows


def breakdown(connection: Connection, r: TimeRange, by: str, limit: int) -> dict[str, Any]:
    """The top `limit` groups by cost for one dimension (tier, key, user or model), with the rest summed as
    `other`. No key is key 0 ("open endpoint or admin key"); no user or model is null."""
    rows = _grouped(connection, r, by)
    total = _total([values for _, values in rows])
    names, budgets = {}, {}
    if by == "key":
        names = dict(connection.execute(sa.select(ApiKey.id, ApiKey.name)).all())
        budgets = budget_states(connection, utcnow())
    top = []
    for value, values in rows[:limit]:
        label = value
        if by == "key":
            label = names.get(value, f"key {value}") if value else "(no key)"
        elif by in ("user", "model") and value == "":
            value, label = None, "(none)"
        top.append({by: value, "label": label, **values, "cost_share": ratio(values["cost_usd"], total["cost_usd"])})
        if by == "key" and value and int(value) in budgets:  # spent, left and the next reset, in its own period
            top[-1]["budget"] = budgets[int(value)].as_json()
    rest = [values for _, values in rows[limit:]]
    other = {**_total(rest), "groups": len(rest)} if rest else None
    return {"by": by, "rows": top, "other": other, "total": total, "num_groups": len(rows)}
