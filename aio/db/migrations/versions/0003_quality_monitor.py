"""quality monitor: verified answer, classifier version, routing score and judge cost on verifications;
retrain-due flag on router_settings

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("verifications") as batch:
        batch.add_column(sa.Column("answer", sa.Text(), nullable=True))
        batch.add_column(sa.Column("classifier_version", sa.String(), nullable=True))
        batch.add_column(sa.Column("routing_score", sa.Double(), nullable=True))
        batch.add_column(sa.Column("judge_prompt_tokens", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("judge_completion_tokens", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("judge_cost_usd", sa.Double(), nullable=False, server_default="0"))
        batch.create_index(batch.f("ix_verifications_created_at"), ["created_at"], unique=False)
    with op.batch_alter_table("router_settings") as batch:
        batch.add_column(sa.Column("retrain_due_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("retrain_due_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("router_settings") as batch:
        batch.drop_column("retrain_due_reason")
        batch.drop_column("retrain_due_at")
    with op.batch_alter_table("verifications") as batch:
        batch.drop_index(batch.f("ix_verifications_created_at"))
        for column in ("judge_cost_usd", "judge_completion_tokens", "judge_prompt_tokens", "routing_score",
                       "classifier_version", "answer"):
            batch.drop_column(column)
