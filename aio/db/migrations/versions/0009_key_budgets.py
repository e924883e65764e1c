"""key budgets: a spend cap per API key (USD per day, week, month or in total, with an optional soft share); an
index on the request log by key and time, which the spend of a key's current period is summed over; and the holds of
budgeted requests in flight, which every replica counts until their rows are written. Nothing to backfill: no key
had a budget before.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("budget_usd", sa.Double(), nullable=True))
        batch.add_column(sa.Column("budget_period", sa.String(), nullable=True))
        batch.add_column(sa.Column("budget_soft", sa.Double(), nullable=True))
    op.create_index("ix_requests_key_id_created_at", "requests", ["key_id", "created_at"])
    op.create_table(
        "budget_holds",
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("estimate_usd", sa.Double(), nullable=False),
        sa.Column("replica", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_budget_holds")),
    )
    op.create_index(op.f("ix_budget_holds_key_id"), "budget_holds", ["key_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_budget_holds_key_id"), table_name="budget_holds")
    op.drop_table("budget_holds")
    op.drop_index("ix_requests_key_id_created_at", table_name="requests")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("budget_soft")
        batch.drop_column("budget_period")
        batch.drop_column("budget_usd")
