"""AWS Batch's ``jobStateTimeLimitActions`` on a job queue (issue 35), and since when a RUNNABLE job has
waited with a statusReason one of them names.

Revision ID: 2b6f0d4c8e17
Revises: 7c3d5e1a2b90
Create Date: 2026-12-06 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "2b6f0d4c8e17"
down_revision = "7c3d5e1a2b90"
branch_labels = None
depends_on = None
airflow_quota_version = "0.3.0"


def upgrade() -> None:
    with op.batch_alter_table("quota_job_queue") as batch_op:
        batch_op.add_column(sa.Column("job_state_time_limit_actions", sa.JSON(), nullable=True))
    with op.batch_alter_table("quota_job") as batch_op:
        batch_op.add_column(sa.Column("time_limit_reason_since", sa.TIMESTAMP(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("quota_job") as batch_op:
        batch_op.drop_column("time_limit_reason_since")
    with op.batch_alter_table("quota_job_queue") as batch_op:
        batch_op.drop_column("job_state_time_limit_actions")
