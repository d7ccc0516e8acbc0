"""Jobs: the local device indices they hold, when their stop was signalled, their training job.

Revision ID: 5b1e0c2f9a7d
Revises: 07ac53478b6a
Create Date: 2026-11-30 05:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "5b1e0c2f9a7d"
down_revision = "07ac53478b6a"
branch_labels = None
depends_on = None
airflow_quota_version = "0.2.0"


def upgrade() -> None:
    with op.batch_alter_table("quota_job") as batch_op:
        batch_op.add_column(sa.Column("held_devices", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("stop_signalled_at", sa.TIMESTAMP(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("training_job", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("quota_job") as batch_op:
        batch_op.drop_column("training_job")
        batch_op.drop_column("stop_signalled_at")
        batch_op.drop_column("held_devices")
