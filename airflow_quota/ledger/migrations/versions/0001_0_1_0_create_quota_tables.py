"""Create the quota ledger's tables: job queues, quota shares, configuration revisions, jobs, audit log.

Revision ID: 07ac53478b6a
Revises:
Create Date: 2026-11-30 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "07ac53478b6a"
down_revision = None
branch_labels = None
depends_on = None
airflow_quota_version = "0.1.0"

_NAME = sa.String(length=128)
_UNIT = sa.String(length=256)
_JOB_ID = sa.String(length=512)
_ID = sa.String(length=250)


def _utc() -> sa.TIMESTAMP:
    return sa.TIMESTAMP(timezone=True)


def upgrade() -> None:
    op.create_table(
        "quota_job_queue",
        sa.Column("job_queue_name", _NAME, nullable=False),
        sa.Column("capacity_limits", sa.JSON(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("updated_at", _utc(), nullable=False),
        sa.PrimaryKeyConstraint("job_queue_name", name=op.f("quota_job_queue_pkey")),
    )
    op.create_table(
        "quota_share",
        sa.Column("job_queue_name", _NAME, nullable=False),
        sa.Column("quota_share_name", _NAME, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("capacity_limits", sa.JSON(), nullable=False),
        sa.Column("strategy", sa.String(length=20), nullable=False),
        sa.Column("borrow_limit", sa.Integer(), nullable=True),
        sa.Column("in_share_preemption", sa.String(length=10), nullable=False),
        sa.Column("state", sa.String(length=10), nullable=False),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("updated_at", _utc(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_queue_name"],
            ["quota_job_queue.job_queue_name"],
            name=op.f("quota_share_job_queue_name_fkey"),
        ),
        sa.PrimaryKeyConstraint("job_queue_name", "quota_share_name", name=op.f("quota_share_pkey")),
    )
    op.create_table(
        "quota_config_revision",
        sa.Column("job_queue_name", _NAME, nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("applied_at", _utc(), nullable=False),
        sa.Column("applied_by", sa.String(length=256), nullable=False),
        sa.Column("source", sa.String(length=1024), nullable=False),
        sa.Column("config", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("job_queue_name", "revision", name=op.f("quota_config_revision_pkey")),
    )
    op.create_table(
        "quota_job",
        sa.Column("job_id", _JOB_ID, nullable=False),
        sa.Column("job_queue_name", _NAME, nullable=False),
        sa.Column("quota_share_name", _NAME, nullable=False),
        sa.Column("job_name", _NAME, nullable=False),
        sa.Column("capacity_unit", _UNIT, nullable=False),
        sa.Column("instance_count", sa.Integer(), nullable=False),
        sa.Column("scheduling_priority", sa.Integer(), nullable=False),
        sa.Column("preemption_retries_before_termination", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("status_reason", sa.Text(), nullable=False),
        sa.Column("submitted_at", _utc(), nullable=False),
        sa.Column("submit_seq", sa.Integer(), nullable=False),
        sa.Column("started_at", _utc(), nullable=True),
        sa.Column("start_seq", sa.Integer(), nullable=True),
        sa.Column("stop_cause", sa.String(length=20), nullable=True),
        sa.Column("preempted_by", _JOB_ID, nullable=True),
        sa.Column("preemption_rule", sa.String(length=30), nullable=True),
        sa.Column("awaiting_victims", sa.JSON(), nullable=False),
        sa.Column("preempted_attempt_count", sa.Integer(), nullable=False),
        sa.Column("recent_preempted_attempts", sa.JSON(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("held_capacity_unit", _UNIT, nullable=True),
        sa.Column("held_instance_count", sa.Integer(), nullable=False),
        sa.Column("borrowed_instance_count", sa.Integer(), nullable=False),
        sa.Column("borrowed_from", sa.JSON(), nullable=True),
        sa.Column("dag_id", _ID, nullable=False),
        sa.Column("run_id", _ID, nullable=False),
        sa.Column("task_id", _ID, nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("ti_id", sa.String(length=36), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("updated_at", _utc(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("quota_job_pkey")),
    )
    op.create_index("quota_job_queue_status_idx", "quota_job", ["job_queue_name", "status"])
    op.create_index(
        "quota_job_share_status_idx", "quota_job", ["job_queue_name", "quota_share_name", "status"]
    )
    op.create_index("quota_job_task_instance_idx", "quota_job", ["dag_id", "run_id", "task_id", "map_index"])
    op.create_table(
        "quota_audit_log",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("at", _utc(), nullable=False),
        sa.Column("job_queue_name", _NAME, nullable=False),
        sa.Column("kind", sa.String(length=30), nullable=False),
        sa.Column("quota_share_name", _NAME, nullable=True),
        sa.Column("job_id", _JOB_ID, nullable=True),
        sa.Column("related_job_id", _JOB_ID, nullable=True),
        sa.Column("rule", sa.String(length=30), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("quota_audit_log_pkey")),
    )
    op.create_index("quota_audit_log_queue_idx", "quota_audit_log", ["job_queue_name", "id"])
    op.create_index("quota_audit_log_job_idx", "quota_audit_log", ["job_id", "id"])


def downgrade() -> None:
    op.drop_table("quota_audit_log")
    op.drop_table("quota_job")
    op.drop_table("quota_config_revision")
    op.drop_table("quota_share")
    op.drop_table("quota_job_queue")
