"""classifier lifecycle: version status, data counts and parent; router_settings (thresholds the CLI sets)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("classifier_versions") as batch:
        batch.add_column(sa.Column("status", sa.String(), nullable=False, server_default="candidate"))
        batch.add_column(sa.Column("data_counts", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("parent_version", sa.String(), nullable=True))
    op.execute("UPDATE classifier_versions SET status = 'active' WHERE active")
    op.create_table(
        "router_settings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("quality", sa.Double(), nullable=True),
        sa.Column("offsets", sa.JSON(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_router_settings")),
    )


def downgrade() -> None:
    op.drop_table("router_settings")
    with op.batch_alter_table("classifier_versions") as batch:
        batch.drop_column("parent_version")
        batch.drop_column("data_counts")
        batch.drop_column("status")
