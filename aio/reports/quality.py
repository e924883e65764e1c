"""The quality monitor's figures: pass rate per tier per day with Wilson 95% intervals, the failing samples
(prompt and both answers; "[redacted]" where the log keeps no text) and the judge cost, apart from user cost.

Verdicts are few (a sampled fraction of answers), so they are read raw, by the day the verdict was given.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from aio.reports.ranges import TimeRange, iso
from aio.reports.sql import bucket_label, bucket_labels, day_of, hour_of, tier_sort_key
from aio.db.models import Request, Verification

REDACTED = "[redacted]"
Z_95 = 1.959963984540054


def wilson_interval(passed: int, total: int, z: float = Z_95) -> tuple[float, float] | None:
    """The Wilson score interval of a pass rate (95% by default); None without verdicts."""
    if total <= 0:
        return None
    p = passed / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _rate(passed: int, total: int, judge_cost: float) -> dict[str, Any]:
    interval = wilson_interval(passed, total)
    return {"verdicts": total, "passed": passed, "failed": total - passed,
            "pass_rate": passed / total if total else None,
            "ci_low": interval[0] if interval else None, "ci_high": interval[1] if interval else None,
            "judge_cost_usd": judge_cost}


def _where(r: TimeRange) -> list[sa.ColumnElement[bool]]:
    return [Verification.created_at >= r.start, Verification.created_at < r.end]


def pass_rates(connection: Connection, r: TimeRange) -> dict[str, Any]:
    """Per tier: the overall pass rate and one point per bucket (day, or hour for short ranges)."""
    v = Verification
    bucket = (hour_of if r.granularity == "hour" else day_of)(v.created_at, connection.dialect.name)
    query = sa.select(bucket, v.tier, sa.func.count(), sa.func.sum(sa.case((v.passed, 1), else_=0)),
                      sa.func.sum(v.judge_cost_usd)).where(*_where(r)).group_by(bucket, v.tier)
    cells: dict[str, dict[str, tuple[int, int, float]]] = defaultdict(dict)
    for label, tier, total, passed, cost in connection.execute(query):
        cells[tier][bucket_label(label)] = (int(passed or 0), int(total), float(cost or 0.0))
    labels = bucket_labels(r)
    tiers, all_total, all_passed, all_cost = {}, 0, 0, 0.0
    for tier in sorted(cells, key=tier_sort_key):
        passed = sum(c[0] for c in cells[tier].values())
        total = sum(c[1] for c in cells[tier].values())
        cost = sum(c[2] for c in cells[tier].values())
        all_total, all_passed, all_cost = all_total + total, all_passed + passed, all_cost + cost
        tiers[tier] = {**_rate(passed, total, cost),
                       "series": [_rate(*cells[tier].get(label, (0, 0, 0.0))) for label in labels]}
    return {"buckets": labels, "tiers": tiers, "total": _rate(all_passed, all_total, all_cost)}


def _prompt_text(prompt: str) -> str:
    """The logged messages as "role: content" lines (the raw text when it is not the usual JSON)."""
    try:
        messages = json.loads(prompt)
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages)
    except (ValueError, TypeError, KeyError):
        return prompt


def failing_samples(connection: Connection, r: TimeRange, limit: int) -> list[dict[str, Any]]:
    """The latest failed verdicts with the prompt, the tier's answer and the reference answer. A request logged
    without its text (log_prompts = false) shows "[redacted]" for all three, whatever the verdict row holds."""
    v, q = Verification, Request
    query = (sa.select(v.id, v.request_id, v.created_at, v.tier, v.reference_tier, v.similarity, v.method,
                       v.answer.label("verified_answer"), v.reference_answer, v.judge_cost_usd, q.prompt,
                       q.answer.label("logged_answer"))
             .join(q, q.request_id == v.request_id)
             .where(*_where(r), v.passed.is_(False)).order_by(v.created_at.desc(), v.id.desc()).limit(limit))
    samples = []
    for row in connection.execute(query).mappings():
        redacted = row["prompt"] is None
        answer = row["verified_answer"] if row["verified_answer"] is not None else row["logged_answer"]
        samples.append({
            "verification_id": row["id"], "request_id": row["request_id"], "created_at": iso(row["created_at"]),
            "tier": row["tier"], "reference_tier": row["reference_tier"], "similarity": row["similarity"],
            "method": row["method"], "judge_cost_usd": row["judge_cost_usd"], "redacted": redacted,
            "prompt": REDACTED if redacted else _prompt_text(row["prompt"]),
            "answer": REDACTED if redacted or answer is None else answer,
            "reference_answer": REDACTED if redacted or row["reference_answer"] is None else row["reference_answer"]})
    return samples
