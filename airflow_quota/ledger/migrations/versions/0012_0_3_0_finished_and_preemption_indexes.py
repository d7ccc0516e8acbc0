"""Jobs: an index on (status, last change), for pages of finished jobs by when they finished, latest first
(the GPU Quotas page's Recently finished: a finished job's last change is its finish). Audit log: an index
on (job queue, kind, time), for the work a queue's preemptions lost over a window (the snapshot's
``lostWork``), read from its PREEMPTED rows alone however long the audit log.

Revision ID: eb6845648415
Revises: 2b6f0d4c8e17
Create Date: 2026-12-07 10:00:00
"""

from __future__ import annotations

from alembic import op

revision = "eb6845648415"
down_revision = "2b6f0d4c8e17"
branch_labels = None
depends_on = None
airflow_quota_version = "0.3.0"


def upgrade() -> None:
    op.create_index("quota_job_status_updated_idx", "quota_job", ["status", "updated_at"])
    op.create_index("quota_audit_log_queue_kind_idx", "quota_audit_log", ["job_queue_name", "kind", "at"])


def downgrade() -> None:
    op.drop_index("quota_audit_log_queue_kind_idx", table_name="quota_audit_log")
    op.drop_index("quota_job_status_updated_idx", table_name="quota_job")
