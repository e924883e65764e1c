"""dashboard sessions (a random token per sign-in, stored hashed) and verdicts marked as coming from demo tiers.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dashboard_sessions",
        sa.Column("token_hash", sa.String(), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=True),
        sa.Column("admin_binding", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("client", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(["key_id"], ["api_keys.id"], name=op.f("fk_dashboard_sessions_key_id_api_keys")),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_dashboard_sessions")),
    )
    op.create_index(op.f("ix_dashboard_sessions_key_id"), "dashboard_sessions", ["key_id"], unique=False)
    op.create_index(op.f("ix_dashboard_sessions_expires_at"), "dashboard_sessions", ["expires_at"], unique=False)
    with op.batch_alter_table("verifications") as batch:
        batch.add_column(sa.Column("demo_tiers", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("verifications") as batch:
        batch.drop_column("demo_tiers")
    op.drop_index(op.f("ix_dashboard_sessions_expires_at"), table_name="dashboard_sessions")
    op.drop_index(op.f("ix_dashboard_sessions_key_id"), table_name="dashboard_sessions")
    op.drop_table("dashboard_sessions")
