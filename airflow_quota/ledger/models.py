"""The ledger's tables: job queues and quota shares as applied, their revision history, jobs, the audit log.

They live in the Airflow metadata DB on their own ``MetaData`` (``ledger_metadata``), never in Airflow's,
all named ``quota_*``, and are created and upgraded by ``QuotaDBManager`` (``ledger/db.py``) with the
migrations in ``ledger/migrations``: a change here needs a new migration there. Configuration columns hold
AWS Batch's field values; job columns hold what the engine's ``Job`` holds (``ledger/job_rows.py`` converts)
plus what only the ledger knows: attempts, the capacity held, the Airflow task instance. Types are
portable (JSON, timezone-aware UTC timestamps) so the same tables work on SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from airflow.models.base import SQL_ALCHEMY_SCHEMA, naming_convention
from airflow.utils.sqlalchemy import UtcDateTime
from sqlalchemy import JSON, BigInteger, ForeignKeyConstraint, Index, Integer, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

#: The ledger's own MetaData: Airflow's schema setting and naming convention, none of Airflow's tables.
ledger_metadata = MetaData(
    schema=(SQL_ALCHEMY_SCHEMA or "").strip() or None, naming_convention=naming_convention
)

NAME_LENGTH = 128
UNIT_LENGTH = 256
JOB_ID_LENGTH = 512
ID_LENGTH = 250  # Airflow's dag_id, run_id and task_id length
#: How many of a job's most recent preempted attempts it keeps.
RECENT_PREEMPTED_ATTEMPTS = 10


class AuditKind(StrEnum):
    """What an audit row records."""

    SUBMITTED = "SUBMITTED"
    GRANTED = "GRANTED"
    PREEMPTED = "PREEMPTED"
    #: A waiting job promised the spare units of stops under way (it waits for them, preempting nobody).
    PROMISED = "PROMISED"
    REQUEUED = "REQUEUED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TERMINATED = "TERMINATED"
    CONFIG_CHANGED = "CONFIG_CHANGED"
    PRIORITY_CHANGED = "PRIORITY_CHANGED"
    HANDED_OVER = "HANDED_OVER"


class LedgerBase(DeclarativeBase):
    """Declarative base of the ledger's tables: they go on ``ledger_metadata``, never on Airflow's."""

    metadata = ledger_metadata


class JobQueueRow(LedgerBase):
    """A job queue as applied; ``revision`` increases with every applied change to it or its shares."""

    __tablename__ = "quota_job_queue"

    job_queue_name: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    #: AWS's ``capacityLimits``: ``[{"capacityUnit": ..., "maxCapacity": ...}]``.
    capacity_limits: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    #: Who schedules it, as the quota file writes it (``AIRFLOW`` or ``AWS_BATCH``); NULL when the file
    #: leaves it out (our allocator).
    scheduler: Mapped[str | None] = mapped_column(String(20), nullable=True)
    #: AWS Batch's ``jobStateTimeLimitActions`` as the quota file wrote them (engine/config.py
    #: ``JobStateTimeLimitAction``); the allocator applies them (allocator/time_limits.py). NULL: none.
    job_state_time_limit_actions: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    revision: Mapped[int] = mapped_column(Integer)
    #: Bumped by every transaction that writes the queue's jobs or configuration (``ledger.generation``):
    #: an allocator keeping the queue's state between cycles trusts it only while no one else bumped it.
    generation: Mapped[int] = mapped_column(Integer, server_default="0", default=0)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class QuotaShareRow(LedgerBase):
    """A quota share as applied, with AWS's field values; ``position`` is its place in the quota file."""

    __tablename__ = "quota_share"
    __table_args__ = (ForeignKeyConstraint(["job_queue_name"], [JobQueueRow.job_queue_name]),)

    job_queue_name: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    quota_share_name: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    capacity_limits: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    strategy: Mapped[str] = mapped_column(String(20))
    #: As written in the quota file; NULL when absent (which means -1, no limit).
    borrow_limit: Mapped[int | None] = mapped_column(Integer)
    in_share_preemption: Mapped[str] = mapped_column(String(10))
    state: Mapped[str] = mapped_column(String(10))
    #: Our extensions block as the quota file wrote it (engine/config.py ``ShareExtensions``); NULL: none.
    extensions: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class ConfigRevisionRow(LedgerBase):
    """One applied revision of a job queue's configuration: the whole queue as the quota file gave it."""

    __tablename__ = "quota_config_revision"

    job_queue_name: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True)
    applied_at: Mapped[datetime] = mapped_column(UtcDateTime)
    applied_by: Mapped[str] = mapped_column(String(256))
    source: Mapped[str] = mapped_column(String(1024))
    #: ``{"jobQueueName", "capacityLimits", "quotaShares": [...]}``; NULL when the queue was removed.
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON)


#: PostgreSQL's fillfactor of ``quota_job``: a cycle rewrites thousands of waiting jobs' statusReasons, and
#: a row rewritten in its own page, no indexed column changed, gets no new index entry (a HOT update).
JOB_FILLFACTOR = 70


class JobRow(LedgerBase):
    """A job: its request, its AWS status, its place in the engine's order, attempts and capacity held."""

    __tablename__ = "quota_job"
    __table_args__ = (
        Index("quota_job_queue_status_idx", "job_queue_name", "status"),
        Index("quota_job_share_status_idx", "job_queue_name", "quota_share_name", "status"),
        Index("quota_job_task_instance_idx", "dag_id", "run_id", "task_id", "map_index"),
        # Pages of jobs, newest first (REST API and CLI), filtered or not by status.
        Index("quota_job_submitted_idx", "submitted_at", "submit_seq"),
        Index("quota_job_status_submitted_idx", "status", "submitted_at", "submit_seq"),
        # The GPU timeline's jobs of a window: unfinished, or changed since the window's start.
        Index("quota_job_queue_updated_idx", "job_queue_name", "updated_at"),
        # Pages of finished jobs by when they finished, latest first: one status at a time (migration 0012).
        Index("quota_job_status_updated_idx", "status", "updated_at"),
        # The next submission sequence number of a queue: its highest so far (migration 0009).
        Index("quota_job_queue_submit_seq_idx", "job_queue_name", "submit_seq"),
        # Room in each page for a waiting job's new statusReason, written in place (migration 0007).
        {"postgresql_with": {"fillfactor": JOB_FILLFACTOR}},
    )

    job_id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), primary_key=True)
    job_queue_name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    quota_share_name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    # The request (AWS SubmitServiceJob's fields that quotas look at).
    job_name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    capacity_unit: Mapped[str] = mapped_column(String(UNIT_LENGTH))
    instance_count: Mapped[int] = mapped_column(Integer)
    scheduling_priority: Mapped[int] = mapped_column(Integer)
    preemption_retries_before_termination: Mapped[int | None] = mapped_column(Integer)
    # Status, as AWS names it.
    status: Mapped[str] = mapped_column(String(20))
    status_reason: Mapped[str] = mapped_column(Text)
    # The engine's order keys: (submitted_at, submit_seq) and (started_at, start_seq).
    submitted_at: Mapped[datetime] = mapped_column(UtcDateTime)
    submit_seq: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    start_seq: Mapped[int | None] = mapped_column(Integer)
    # Two-phase preemption.
    stop_cause: Mapped[str | None] = mapped_column(String(20))
    preempted_by: Mapped[str | None] = mapped_column(String(JOB_ID_LENGTH))
    #: While it is being stopped: the rule of the latest preemption decision that named it as a victim.
    preemption_rule: Mapped[str | None] = mapped_column(String(30))
    #: A reservation's stops (a preemptor's victims, stops whose spare units it was promised): stop's job id
    #: -> units it gives the job (``job_rows.awaited_stops`` also reads the older list of job ids).
    awaiting_victims: Mapped[dict[str, int] | list[str]] = mapped_column(JSON)
    # AWS's preemptionSummary.
    preempted_attempt_count: Mapped[int] = mapped_column(Integer)
    #: When its training last reported a checkpoint (what a preemption loses is counted from it).
    last_checkpoint_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    #: Since when the RUNNABLE job has waited with a statusReason one of its queue's
    #: ``jobStateTimeLimitActions`` names (allocator/time_limits.py); NULL: not waiting with one.
    time_limit_reason_since: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    #: ``[{"attempt", "startedAt", "stoppedAt", "preemptedBy", "rule", "statusReason"}]``, the last 10.
    recent_preempted_attempts: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    #: Grants so far; the current (or last) attempt's number, 0 before the first grant.
    attempt: Mapped[int] = mapped_column(Integer)
    # Capacity held since the grant (none while waiting or after stopping).
    held_capacity_unit: Mapped[str | None] = mapped_column(String(UNIT_LENGTH))
    held_instance_count: Mapped[int] = mapped_column(Integer)
    borrowed_instance_count: Mapped[int] = mapped_column(Integer)
    #: ``{share name: units}`` lent to this job, when known.
    borrowed_from: Mapped[dict[str, int] | None] = mapped_column(JSON)
    #: Local GPUs: the device indices granted (held until the job has stopped).
    held_devices: Mapped[list[int] | None] = mapped_column(JSON)
    #: When the allocator last signalled the job to stop (preempted or terminated), while it stops.
    stop_signalled_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    #: When the allocator first saw the job's task try over while its training job may still run (an
    #: orphan). A local process group's watchdog has begun its stop by then (it starts when the task
    #: process dies), so its devices are free a grace period plus a margin after this, never earlier.
    task_ended_seen_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    #: What the task reported it launched for the current attempt: ``{"backend", "name", "state"}``.
    training_job: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The Airflow task instance the job belongs to.
    dag_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    run_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    task_id: Mapped[str] = mapped_column(String(ID_LENGTH))
    map_index: Mapped[int] = mapped_column(Integer)
    try_number: Mapped[int] = mapped_column(Integer)
    ti_id: Mapped[str | None] = mapped_column(String(36))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    #: The job's last change, but for a waiting job's statusReason alone (``job_rows.write_reasons``):
    #: which finished jobs changed since a time (the GPU timeline's window; an open job is always shown).
    #: Nothing changes a finished job: its ``updated_at`` is when it finished (the moment of its SUCCEEDED
    #: or FAILED audit row), what pages of finished jobs by finish time are ordered by.
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class AuditRow(LedgerBase):
    """One decision or event, appended and never changed; ``id`` orders them."""

    __tablename__ = "quota_audit_log"
    __table_args__ = (
        Index("quota_audit_log_queue_idx", "job_queue_name", "id"),
        Index("quota_audit_log_job_idx", "job_id", "id"),
        # A job's decisions as the other job (its preemptor's, its victims'): the page's job filter.
        Index("quota_audit_log_related_job_idx", "related_job_id", "id"),
        # Pages of events since a time, and of one share's events.
        Index("quota_audit_log_at_idx", "at"),
        Index("quota_audit_log_share_idx", "job_queue_name", "quota_share_name", "id"),
        # A queue's decisions of one kind over a window: the work its preemptions lost (migration 0012).
        Index("quota_audit_log_queue_kind_idx", "job_queue_name", "kind", "at"),
    )

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    job_queue_name: Mapped[str] = mapped_column(String(NAME_LENGTH))
    kind: Mapped[str] = mapped_column(String(30))
    quota_share_name: Mapped[str | None] = mapped_column(String(NAME_LENGTH))
    job_id: Mapped[str | None] = mapped_column(String(JOB_ID_LENGTH))
    #: The other job in the decision: the preemptor of a PREEMPTED job.
    related_job_id: Mapped[str | None] = mapped_column(String(JOB_ID_LENGTH))
    rule: Mapped[str | None] = mapped_column(String(30))
    message: Mapped[str] = mapped_column(Text)
    #: Structured facts; ``{"old", "new", ...}`` for CONFIG_CHANGED and PRIORITY_CHANGED.
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON)
