"""Jobs: when their task was first seen ended (a local orphan's stop is counted from it); indexes the
REST API's paginated queries use.

Revision ID: 9d4f2a61c3e8
Revises: 5b1e0c2f9a7d
Create Date: 2026-11-30 21:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "9d4f2a61c3e8"
down_revision = "5b1e0c2f9a7d"
branch_labels = None
depends_on = None
airflow_quota_version = "0.3.0"


def upgrade() -> None:
    with op.batch_alter_table("quota_job") as batch_op:
        batch_op.add_column(sa.Column("task_ended_seen_at", sa.TIMESTAMP(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("quota_job") as batch_op:
        batch_op.drop_column("task_ended_seen_at")
