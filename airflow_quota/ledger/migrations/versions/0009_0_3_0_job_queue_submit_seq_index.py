"""Jobs: an index on (job queue, submission sequence), for the next sequence number a cycle's new jobs
take (the queue's highest so far). Without it the database reads every job the queue ever had, finished
ones too, in each cycle that records submissions: a cost that grew with the ledger's history.

Revision ID: 4f8a2c6e9b13
Revises: 9e4b7d21c3a8
Create Date: 2026-12-02 16:40:00
"""

from __future__ import annotations

from alembic import op

revision = "4f8a2c6e9b13"
down_revision = "9e4b7d21c3a8"
branch_labels = None
depends_on = None
airflow_quota_version = "0.3.0"


def upgrade() -> None:
    op.create_index("quota_job_queue_submit_seq_idx", "quota_job", ["job_queue_name", "submit_seq"])


def downgrade() -> None:
    op.drop_index("quota_job_queue_submit_seq_idx", table_name="quota_job")
