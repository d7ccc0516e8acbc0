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


PAGE_INDEXES = [
    ("quota_job_submitted_idx", "quota_job", ["submitted_at", "submit_seq"]),
    ("quota_job_status_submitted_idx", "quota_job", ["status", "submitted_at", "submit_seq"]),
    ("quota_audit_log_at_idx", "quota_audit_log", ["at"]),
    ("quota_audit_log_share_idx", "quota_audit_log", ["job_queue_name", "quota_share_name", "id"]),
]


def upgrade() -> None:
    with op.batch_alter_table("quota_job") as batch_op:
        batch_op.add_column(sa.Column("task_ended_seen_at", sa.TIMESTAMP(timezone=True), nullable=True))
    # The REST API's and the CLI's pages of jobs and events.
    for name, table, columns in PAGE_INDEXES:
        op.create_index(name, table, columns)


def downgrade() -> None:
    for name, table, _ in PAGE_INDEXES:
        op.drop_index(name, table_name=table)
    with op.batch_alter_table("quota_job") as batch_op:
        batch_op.drop_column("task_ended_seen_at")
