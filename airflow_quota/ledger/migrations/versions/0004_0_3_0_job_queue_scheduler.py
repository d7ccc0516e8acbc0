"""Job queues: who schedules each one (the quota file's ``scheduler``: AIRFLOW or AWS_BATCH; NULL when the
file leaves it out, which is AIRFLOW), so a change of that line alone is a new revision.

Revision ID: 3c7e51b0d9a4
Revises: 9d4f2a61c3e8
Create Date: 2026-12-01 06:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "3c7e51b0d9a4"
down_revision = "9d4f2a61c3e8"
branch_labels = None
depends_on = None
airflow_quota_version = "0.3.0"


def upgrade() -> None:
    with op.batch_alter_table("quota_job_queue") as batch_op:
        batch_op.add_column(sa.Column("scheduler", sa.String(length=20), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("quota_job_queue") as batch_op:
        batch_op.drop_column("scheduler")
