"""Audit log: an index on (related job, id), for the GPU Quotas page's job filter, which reads a job's own
decisions and those naming it as the other job (its preemptor or victim), newest first, from an audit log
kept as long as the ledger.

Revision ID: 9e4b7d21c3a8
Revises: c5d2e8a17f40
Create Date: 2026-12-01 20:20:00
"""

from __future__ import annotations

from alembic import op

revision = "9e4b7d21c3a8"
down_revision = "c5d2e8a17f40"
branch_labels = None
depends_on = None
airflow_quota_version = "0.3.0"


def upgrade() -> None:
    op.create_index("quota_audit_log_related_job_idx", "quota_audit_log", ["related_job_id", "id"])


def downgrade() -> None:
    op.drop_index("quota_audit_log_related_job_idx", table_name="quota_audit_log")
