"""Jobs: PostgreSQL leaves 30% of each table page of ``quota_job`` free (fillfactor 70), so that a waiting
job's new statusReason is written in place (a heap-only tuple update: none of the table's seven indexes
gets a new entry). An allocation cycle at 10,000 waiting rewrites thousands of reasons when capacity turns
over. Pages written from now on leave the room; SQLite has no such setting.

Revision ID: c5d2e8a17f40
Revises: a41c9e07d2b6
Create Date: 2026-12-01 13:30:00
"""

from __future__ import annotations

from alembic import op

revision = "c5d2e8a17f40"
down_revision = "a41c9e07d2b6"
branch_labels = None
depends_on = None
airflow_quota_version = "0.3.0"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE quota_job SET (fillfactor = 70)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE quota_job RESET (fillfactor)")
