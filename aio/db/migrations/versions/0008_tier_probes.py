"""tier probes: the built-in probe set's outcomes per tier model (`aio calibrate`), each probe run's progress, and
the routing fits made from those outcomes (per-tier calibration, thresholds for the quality target, the answer
scorer). Nothing to backfill: no tier was probed before.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "probe_runs",
        sa.Column("fingerprint", sa.String(), nullable=False),
        sa.Column("tier", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("probe_set", sa.String(), nullable=False),
        sa.Column("planned", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("fingerprint", name=op.f("pk_probe_runs")),
    )
    op.create_table(
        "probe_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fingerprint", sa.String(), nullable=False),
        sa.Column("tier", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("category", sa.String(), nullable=False),
        sa.Column("difficulty", sa.Integer(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("correct", sa.Boolean(), nullable=False),
        sa.Column("finish_reason", sa.String(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("latency_ms", sa.Double(), nullable=True),
        sa.Column("token_logprobs", sa.JSON(), nullable=True),
        sa.Column("token_margins", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_probe_results")),
        sa.UniqueConstraint("fingerprint", "task_id", name=op.f("uq_probe_results_fingerprint")),
    )
    op.create_index(op.f("ix_probe_results_fingerprint"), "probe_results", ["fingerprint"])
    op.create_table(
        "routing_fits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("classifier_version", sa.String(), nullable=False),
        sa.Column("fingerprints", sa.JSON(), nullable=False),
        sa.Column("fit", sa.JSON(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_routing_fits")),
    )


def downgrade() -> None:
    op.drop_table("routing_fits")
    op.drop_index(op.f("ix_probe_results_fingerprint"), table_name="probe_results")
    op.drop_table("probe_results")
    op.drop_table("probe_runs")
