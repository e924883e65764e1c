"""confidence cascade: each request's confidence and, when a cheaper tier's answer was replaced, that tier, its
confidence and what the replaced answers cost; per day and tier, the cascaded requests and that cost. Nothing to
backfill: no request was cascaded before.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("confidence", sa.Double(), nullable=True))
        batch.add_column(sa.Column("cascade_from_tier", sa.String(), nullable=True))
        batch.add_column(sa.Column("cascade_confidence", sa.Double(), nullable=True))
        batch.add_column(sa.Column("cascade_cost_usd", sa.Double(), nullable=True))
    with op.batch_alter_table("daily_aggregates") as batch:
        batch.add_column(sa.Column("num_cascades", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("cascade_cost_usd", sa.Double(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("daily_aggregates") as batch:
        batch.drop_column("cascade_cost_usd")
        batch.drop_column("num_cascades")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("cascade_cost_usd")
        batch.drop_column("cascade_confidence")
        batch.drop_column("cascade_from_tier")
        batch.drop_column("confidence")
