"""answer cache: the SQL store of the exact answer cache (answers under the hash of their request's key), and on
the request log whether a request was a hit and the cost it saved. Nothing to backfill: no request was a hit.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "answer_cache",
        sa.Column("key_hash", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("tier", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("baseline_cost_usd", sa.Double(), nullable=False),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("key_hash", name=op.f("pk_answer_cache")),
    )
    op.create_index(op.f("ix_answer_cache_created_at"), "answer_cache", ["created_at"])
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("cache_hit", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("cache_saved_usd", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("cache_saved_usd")
        batch.drop_column("cache_hit")
    op.drop_index(op.f("ix_answer_cache_created_at"), table_name="answer_cache")
    op.drop_table("answer_cache")
