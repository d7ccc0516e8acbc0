"""Our extensions (issue 37): a quota share's ``extensions`` block, and when a job last checkpointed (what
a preemption of it loses is counted from then).

Revision ID: 7c3d5e1a2b90
Revises: 4f8a2c6e9b13
Create Date: 2026-12-05 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "7c3d5e1a2b90"
down_revision = "4f8a2c6e9b13"
branch_labels = None
depends_on = None
airflow_quota_version = "0.3.0"


def upgrade() -> None:
    with op.batch_alter_table("quota_share") as batch_op:
        batch_op.add_column(sa.Column("extensions", sa.JSON(), nullable=True))
    with op.batch_alter_table("quota_job") as batch_op:
        batch_op.add_column(sa.Column("last_checkpoint_at", sa.TIMESTAMP(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("quota_job") as batch_op:
        batch_op.drop_column("last_checkpoint_at")
    with op.batch_alter_table("quota_share") as batch_op:
        batch_op.drop_column("extensions")
