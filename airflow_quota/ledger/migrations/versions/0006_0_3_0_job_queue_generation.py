"""Job queues: a generation counter that every transaction writing a queue's jobs or configuration bumps,
so an allocator that keeps the queue's state between cycles knows whether anyone else committed since.

Revision ID: a41c9e07d2b6
Revises: 7264ee896a91
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "a41c9e07d2b6"
down_revision = "7264ee896a91"
branch_labels = None
depends_on = None
airflow_quota_version = "0.3.0"


def upgrade() -> None:
    with op.batch_alter_table("quota_job_queue") as batch_op:
        batch_op.add_column(sa.Column("generation", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("quota_job_queue") as batch_op:
        batch_op.drop_column("generation")
