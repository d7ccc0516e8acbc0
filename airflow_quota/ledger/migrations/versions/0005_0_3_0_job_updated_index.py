"""Jobs: an index on (job queue, last change), for the GPU timeline's jobs of a window (the unfinished ones
and those that changed since the window's start).

Revision ID: 7264ee896a91
Revises: 3c7e51b0d9a4
Create Date: 2026-12-01 09:50:00
"""

from __future__ import annotations

from alembic import op

revision = "7264ee896a91"
down_revision = "3c7e51b0d9a4"
branch_labels = None
depends_on = None
airflow_quota_version = "0.3.0"


def upgrade() -> None:
    op.create_index("quota_job_queue_updated_idx", "quota_job", ["job_queue_name", "updated_at"])


def downgrade() -> None:
    op.drop_index("quota_job_queue_updated_idx", table_name="quota_job")
