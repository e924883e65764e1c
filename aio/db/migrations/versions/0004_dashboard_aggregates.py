"""cost dashboard: inter-token and queue latency on requests; escalation counts on daily_aggregates; daily latency
and routing-score histograms, daily usage by key/user/model, and the history of threshold changes. Existing
requests are counted into the new aggregates.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The buckets of aio.db.histograms, repeated so that this file never imports the application (they never change).
_LATENCY_METRICS = ("ttft_ms", "latency_ms")  # the latency columns existing rows have
_OFFSET, _PER_DOUBLING, _NUM_LATENCY, _NUM_SCORE = 40, 4, 120, 20
_BACKFILL_CHUNK = 20_000


def _latency_bucket(value: float) -> int:
    if not value > 0:
        return 0
    return min(max(math.floor(math.log2(value) * _PER_DOUBLING) + _OFFSET, 0), _NUM_LATENCY - 1)


def _score_bucket(value: float) -> int:
    return min(max(math.floor(value * _NUM_SCORE), 0), _NUM_SCORE - 1)


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("itl_ms", sa.Double(), nullable=True))
        batch.add_column(sa.Column("queue_ms", sa.Double(), nullable=True))
    with op.batch_alter_table("daily_aggregates") as batch:
        batch.add_column(sa.Column("num_escalations", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("num_fallbacks", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "daily_histograms",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("tier", sa.String(), nullable=False),
        sa.Column("metric", sa.String(), nullable=False),
        sa.Column("bucket", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day", "tier", "metric", "bucket", name=op.f("pk_daily_histograms")),
    )
    op.create_table(
        "daily_usage",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("tier", sa.String(), nullable=False),
        sa.Column("dimension", sa.String(), nullable=False),
        sa.Column("value", sa.String(), nullable=False),
        sa.Column("num_requests", sa.Integer(), nullable=False),
        sa.Column("num_errors", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("baseline_cost_usd", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("day", "tier", "dimension", "value", name=op.f("pk_daily_usage")),
    )
    op.create_table(
        "threshold_changes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("quality", sa.Double(), nullable=True),
        sa.Column("offsets", sa.JSON(), nullable=True),
        sa.Column("updated_by", sa.String(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_threshold_changes")),
    )
    op.create_index(op.f("ix_threshold_changes_changed_at"), "threshold_changes", ["changed_at"], unique=False)
    _backfill()


def _backfill() -> None:
    """Counts the requests already logged into the new aggregates (one pass, in chunks)."""
    bind = op.get_bind()
    requests = sa.table("requests", sa.column("created_at", sa.DateTime(timezone=True)), sa.column("tier"),
                        sa.column("key_id"), sa.column("user"), sa.column("model"), sa.column("status"),
                        sa.column("routing_reason"), sa.column("routing_score"), sa.column("prompt_tokens"),
                        sa.column("completion_tokens"), sa.column("cost_usd"), sa.column("baseline_cost_usd"),
                        sa.column("ttft_ms"), sa.column("latency_ms"))
    histograms: dict[tuple, int] = {}
    usage: dict[tuple, list] = {}
    reasons: dict[tuple, list[int]] = {}
    result = bind.execute(sa.select(requests).execution_options(yield_per=_BACKFILL_CHUNK))
    for row in result.mappings():
        created = row["created_at"]
        if isinstance(created, str):  # SQLite without the application's type: UTC wall time as text
            from datetime import datetime

            created = datetime.fromisoformat(created)
        elif created.tzinfo is not None:
            from datetime import timezone

            created = created.astimezone(timezone.utc)
        day, tier = created.date(), row["tier"] or "none"
        for metric in _LATENCY_METRICS:
            if row[metric] is not None:
                key = (day, tier, metric, _latency_bucket(row[metric]))
                histograms[key] = histograms.get(key, 0) + 1
        if row["routing_score"] is not None:
            key = (day, tier, "routing_score", _score_bucket(row["routing_score"]))
            histograms[key] = histograms.get(key, 0) + 1
        values = (1, row["status"] != "ok", row["prompt_tokens"], row["completion_tokens"], row["cost_usd"],
                  row["baseline_cost_usd"])
        for dimension, value in (("key", "" if row["key_id"] is None else str(row["key_id"])),
                                 ("user", (row["user"] or "")[:200]), ("model", row["model"] or "")):
            sums = usage.setdefault((day, tier, dimension, value), [0, 0, 0, 0, 0.0, 0.0])
            for i, amount in enumerate(values):
                sums[i] += amount
        counts = reasons.setdefault((day, tier), [0, 0])
        counts[0] += row["routing_reason"] == "escalation"
        counts[1] += row["routing_reason"] == "fallback"
    _insert_chunks("daily_histograms", [dict(day=k[0], tier=k[1], metric=k[2], bucket=k[3], count=n)
                                        for k, n in histograms.items()])
    _insert_chunks("daily_usage", [dict(day=k[0], tier=k[1], dimension=k[2], value=k[3], num_requests=v[0],
                                        num_errors=v[1], prompt_tokens=v[2], completion_tokens=v[3], cost_usd=v[4],
                                        baseline_cost_usd=v[5]) for k, v in usage.items()])
    aggregates = sa.table("daily_aggregates", sa.column("day", sa.Date()), sa.column("tier"),
                          sa.column("num_escalations"), sa.column("num_fallbacks"))
    for (day, tier), (escalations, fallbacks) in reasons.items():
        if escalations or fallbacks:
            bind.execute(aggregates.update().where(aggregates.c.day == day, aggregates.c.tier == tier)
                         .values(num_escalations=escalations, num_fallbacks=fallbacks))


def _insert_chunks(name: str, rows: list[dict]) -> None:
    if not rows:
        return
    table = sa.table(name, *(sa.column(c, sa.Date() if c == "day" else None) for c in rows[0]))
    for start in range(0, len(rows), _BACKFILL_CHUNK):
        op.get_bind().execute(table.insert(), rows[start:start + _BACKFILL_CHUNK])


def downgrade() -> None:
    op.drop_index(op.f("ix_threshold_changes_changed_at"), table_name="threshold_changes")
    op.drop_table("threshold_changes")
    op.drop_table("daily_usage")
    op.drop_table("daily_histograms")
    with op.batch_alter_table("daily_aggregates") as batch:
        batch.drop_column("num_fallbacks")
        batch.drop_column("num_escalations")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("queue_ms")
        batch.drop_column("itl_ms")
