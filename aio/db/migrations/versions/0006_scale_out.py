"""scale-out: the replica that served each request; per-key limits; classifier models stored in the database;
leases (one quality-monitor controller per deployment).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("replica", sa.String(), nullable=True))
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("rpm_limit", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("tpm_limit", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_streams", sa.Integer(), nullable=True))
    with op.batch_alter_table("classifier_versions") as batch:
        batch.add_column(sa.Column("model_blob", sa.LargeBinary(), nullable=True))
    op.create_table(
        "leases",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("holder", sa.String(), nullable=False),
        sa.Column("expires_at_s", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leases")),
    )


def downgrade() -> None:
    op.drop_table("leases")
    with op.batch_alter_table("classifier_versions") as batch:
        batch.drop_column("model_blob")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("max_streams")
        batch.drop_column("tpm_limit")
        batch.drop_column("rpm_limit")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("replica")
