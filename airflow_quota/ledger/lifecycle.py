"""Record a job's life in the ledger: its submission, a retry taking it over, and each event after a grant.

Each helper calls the engine's lifecycle function, writes the jobs that changed, appends one audit row per
decision or event, and returns the new state without final jobs (what ``load_queue_state`` would read back).
The state given holds no final jobs (as ``load_queue_state`` reads it, and as each helper returns it), so
only the jobs an event changed can have become final: the state is not walked again to drop them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from airflow_quota.engine.lifecycle import (
    DEFAULT_TERMINATION_REASON,
    complete_stop,
    finish_job,
    hand_over,
    record_checkpoint,
    set_status,
    submit_jobs,
    terminate_job,
    update_priority,
)
from airflow_quota.engine.model import JobRequest, JobStatus, QueueState, StopCause
from airflow_quota.ledger.audit import add_audit_row, audit_values
from airflow_quota.ledger.errors import LedgerError
from airflow_quota.ledger.generation import bump_generation
from airflow_quota.ledger.job_rows import (
    changed_jobs,
    job_row,
    job_values,
    to_engine_time,
    write_job,
    write_jobs,
)
from airflow_quota.ledger.models import RECENT_PREEMPTED_ATTEMPTS, AuditKind, AuditRow, JobRow

#: The longest reason a termination keeps: the REST API and the CLI refuse a longer one, the ledger cuts it.
TERMINATION_REASON_LENGTH = 1000


@dataclass(frozen=True, slots=True)
class TaskInstanceRef:
    """The Airflow task instance a job belongs to (its fields are ``JobRow``'s columns of the same names)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    try_number: int = 1
    ti_id: str | None = None


@dataclass(frozen=True, slots=True)
class Submission:
    """A job request the ledger has not seen, and the task instance it comes from."""

    job_id: str
    request: JobRequest
    task: TaskInstanceRef
    #: Its place in the queue's order when it was submitted before the ledger heard of it (the task's
    #: first deferral); None: now.
    submitted_at: datetime | None = None


def record_submission(
    session: Session,
    state: QueueState,
    job_id: str,
    request: JobRequest,
    task: TaskInstanceRef,
    now: datetime,
    *,
    submitted_at: datetime | None = None,
) -> QueueState:
    """Add a job (RUNNABLE, or FAILED when its share is DISABLED or unknown) after every earlier one.

    ``submitted_at`` is its place in the queue's order when the job was submitted before the ledger
    heard of it (the task's first deferral); by default ``now``.
    """
    return record_submissions(session, state, [Submission(job_id, request, task, submitted_at)], now)


def record_submissions(
    session: Session, state: QueueState, submissions: list[Submission], now: datetime
) -> QueueState:
    """``record_submission`` for many jobs, in their order, with one new state (a cycle's backlog)."""
    if not submissions:
        return state
    queue_name = state.queue.name
    known = set(
        session.scalars(select(JobRow.job_id).where(JobRow.job_id.in_([s.job_id for s in submissions])))
    )
    if known:
        raise LedgerError(f"job {sorted(known)[0]} is already in the quota ledger")
    bump_generation(session, queue_name)  # kept states of the queue are stale from this commit on
    latest_seq = session.scalar(
        select(func.max(JobRow.submit_seq)).where(JobRow.job_queue_name == queue_name)
    )
    after = submit_jobs(
        state,
        [
            (
                each.job_id,
                each.request,
                to_engine_time(each.submitted_at or now),
                (latest_seq or 0) + position,
            )
            for position, each in enumerate(submissions, start=1)
        ],
    )
    # The rows are inserted in bulk, not built as ORM objects (a burst's batch is 1,000 jobs and more audit
    # rows; the objects and the unit of work were a third of a first cycle): a caller that wants a new
    # job's row reads it (``job_row``). The audit rows go in after the session's pending ones (the flush
    # of the queries above), so the log keeps its order.
    jobs: list[dict[str, Any]] = []
    audit: list[dict[str, Any]] = []
    for each in submissions:
        job = after.jobs[each.job_id]
        task = each.task
        jobs.append(
            {
                "job_id": each.job_id,
                "job_queue_name": queue_name,
                "recent_preempted_attempts": [],
                "attempt": 0,
                "held_instance_count": 0,
                "borrowed_instance_count": 0,
                "dag_id": task.dag_id,  # ``asdict(task)``, without its deep copy
                "run_id": task.run_id,
                "task_id": task.task_id,
                "map_index": task.map_index,
                "try_number": task.try_number,
                "ti_id": task.ti_id,
                "created_at": now,
                **job_values(job, now),  # what ``write_job`` would set on a new row
            }
        )
        request = each.request
        audit.append(
            audit_values(
                now,
                queue_name,
                AuditKind.SUBMITTED,
                job=job,
                message=f"{each.job_id} submitted to quota share {request.quota_share_name}: "
                f"{request.instance_count} {request.capacity_unit}, "
                f"schedulingPriority {request.scheduling_priority}",
            )
        )
        if job.status is JobStatus.FAILED:
            audit.append(audit_values(now, queue_name, AuditKind.FAILED, job=job, message=job.status_reason))
    session.flush()
    session.execute(insert(JobRow), jobs)
    session.execute(insert(AuditRow), audit)
    return _without_final(after, [each.job_id for each in submissions])


def record_handover(
    session: Session,
    state: QueueState,
    from_job_id: str,
    to_job_id: str,
    request: JobRequest,
    task: TaskInstanceRef,
    now: datetime,
) -> QueueState:
    """A task's retry takes over its previous try's capacity, lease attempt and training job."""
    after = hand_over(state, from_job_id, to_job_id, request)
    old = job_row(session, from_job_id)
    row = JobRow(
        job_id=to_job_id,
        job_queue_name=state.queue.name,
        recent_preempted_attempts=list(old.recent_preempted_attempts),
        attempt=old.attempt,
        held_capacity_unit=old.held_capacity_unit,
        held_instance_count=old.held_instance_count,
        borrowed_instance_count=old.borrowed_instance_count,
        borrowed_from=old.borrowed_from,
        held_devices=old.held_devices,
        training_job=old.training_job,
        **asdict(task),
        created_at=now,
    )
    write_job(row, after.jobs[to_job_id], now)
    session.add(row)
    changed = _write(session, state, after, now)
    name = (row.training_job or {}).get("name", "its training job")
    add_audit_row(
        session,
        now,
        state.queue.name,
        AuditKind.HANDED_OVER,
        job=after.jobs[to_job_id],
        related_job_id=from_job_id,
        message=f"{from_job_id} handed its {row.held_instance_count} {row.held_capacity_unit} and "
        f"{name} to its retry {to_job_id}",
        details={"attempt": row.attempt},
    )
    return _without_final(after, changed)


def record_status_change(
    session: Session, state: QueueState, job_id: str, status: JobStatus, now: datetime
) -> QueueState:
    """A granted job moved along SCHEDULED -> STARTING -> RUNNING (no audit row: no decision)."""
    after = set_status(state, job_id, status)
    changed = _write(session, state, after, now)
    return _without_final(after, changed)


def record_checkpoint_report(
    session: Session, state: QueueState, job_id: str, at: datetime, now: datetime
) -> QueueState:
    """A granted job's training reported its newest checkpoint, saved at ``at``: its row's
    ``last_checkpoint_at`` (what a preemption's lost work counts from; no audit row, no decision). A report
    older than the job's current attempt, or not newer than the one kept, changes nothing."""
    job = state.jobs[job_id]
    seconds = to_engine_time(at)
    if not job.status.holds_capacity or job.started is None or seconds <= job.started[0]:
        return state
    if job.last_checkpoint is not None and seconds <= job.last_checkpoint:
        return state
    after = record_checkpoint(state, job_id, seconds)
    _write(session, state, after, now)
    return after


def record_stop_completed(
    session: Session, state: QueueState, job_id: str, now: datetime, *, started: bool = True
) -> QueueState:
    """A stop finished: REQUEUED (or FAILED, out of preemption retries), or FAILED when it was terminated.

    A preempted attempt is appended to the job's recent preempted attempts (the last 10 are kept);
    ``started=False`` (its task never heard of the grant) withdraws the grant without counting one.
    """
    after = complete_stop(state, job_id, started=started)
    before = state.jobs[job_id]
    row = job_row(session, job_id)
    rule = row.preemption_rule
    if before.stop_cause is StopCause.PREEMPTED and started:
        attempt: dict[str, Any] = {
            "attempt": row.attempt,
            "startedAt": None if row.started_at is None else _iso(row.started_at),
            "stoppedAt": _iso(now),
            "preemptedBy": before.preempted_by,
            "rule": rule,
            "statusReason": after.jobs[job_id].status_reason,
            "lostUnitSeconds": _lost_at_decision(session, job_id),
        }
        arn = (row.training_job or {}).get("arn")
        if arn:  # AWS Batch's words for what the attempt ran
            attempt = {"serviceResourceId": {"name": "TrainingJobArn", "value": arn}, **attempt}
        row.recent_preempted_attempts = [*row.recent_preempted_attempts, attempt][-RECENT_PREEMPTED_ATTEMPTS:]
    changed = _write(session, state, after, now)
    job = after.jobs[job_id]
    kind = AuditKind.REQUEUED if job.status is JobStatus.RUNNABLE else AuditKind.FAILED
    add_audit_row(
        session,
        now,
        state.queue.name,
        kind,
        job=job,
        related_job_id=before.preempted_by,
        rule=rule,
        message=job.status_reason,
        details={"preemptedAttemptCount": job.preempted_attempt_count},
    )
    return _without_final(after, changed)


def record_capacity_requeue(
    session: Session, state: QueueState, job_id: str, now: datetime, *, reason: str
) -> QueueState:
    """A granted job whose training could not start gave its lease back: AWS answered its launch with a
    capacity error (CreateTrainingJob refused with InsufficientCapacityError, ResourceLimitExceeded or
    throttling, or its training job failed with ``CapacityError``). RUNNABLE again at its original
    position (its submission is kept), its capacity released, ``reason`` as its statusReason, and no
    preempted attempt counted (``preemptionRetriesBeforeTermination`` is not used up)."""
    before = state.jobs[job_id]
    if not before.status.holds_capacity or before.is_stopping:
        raise LedgerError(f"job {job_id} is {before.status.value} and holds no lease to give back")
    requeued = replace(
        before,
        status=JobStatus.RUNNABLE,
        status_reason=reason,
        started=None,
        stop_cause=None,
        preempted_by=None,
        awaiting_victims={},
    )
    after = QueueState(state.queue, {**state.jobs, job_id: requeued})
    changed = _write(session, state, after, now)
    add_audit_row(
        session,
        now,
        state.queue.name,
        AuditKind.REQUEUED,
        job=requeued,
        message=reason,
        details={"preemptedAttemptCount": requeued.preempted_attempt_count, "capacityError": True},
    )
    return _without_final(after, changed)


def record_finish(
    session: Session, state: QueueState, job_id: str, now: datetime, *, succeeded: bool, reason: str = ""
) -> QueueState:
    """The job's own work ended: SUCCEEDED or FAILED (also while it was being stopped)."""
    after = finish_job(state, job_id, succeeded=succeeded, reason=reason)
    changed = _write(session, state, after, now)
    job = after.jobs[job_id]
    kind = AuditKind.SUCCEEDED if succeeded else AuditKind.FAILED
    add_audit_row(
        session, now, state.queue.name, kind, job=job, message=reason or f"{job_id} {kind.value.lower()}"
    )
    return _without_final(after, changed)


def record_termination(
    session: Session,
    state: QueueState,
    job_id: str,
    now: datetime,
    reason: str = DEFAULT_TERMINATION_REASON,
) -> QueueState:
    """Terminate a job: a waiting one FAILS now, a granted one is stopped first (FAILED when it stops).

    A reason over ``TERMINATION_REASON_LENGTH`` characters is cut to that length, ending in "…".
    """
    if len(reason) > TERMINATION_REASON_LENGTH:
        reason = reason[: TERMINATION_REASON_LENGTH - 1] + "…"
    after = terminate_job(state, job_id, reason)
    if after is state:  # already final
        return state
    changed = _write(session, state, after, now)
    job = after.jobs[job_id]
    stopping = job.status.holds_capacity
    queue_name = state.queue.name
    add_audit_row(
        session,
        now,
        queue_name,
        AuditKind.TERMINATED,
        job=job,
        message=reason,
        details={"stopping": stopping},
    )
    if job.status is JobStatus.FAILED:
        add_audit_row(session, now, queue_name, AuditKind.FAILED, job=job, message=job.status_reason)
    return _without_final(after, changed)


def record_priority_change(
    session: Session, state: QueueState, job_id: str, priority: int, now: datetime
) -> QueueState:
    """A job's schedulingPriority changed (its place in its share's order with it)."""
    after = update_priority(state, job_id, priority)
    old = state.jobs[job_id].priority
    changed = _write(session, state, after, now)
    add_audit_row(
        session,
        now,
        state.queue.name,
        AuditKind.PRIORITY_CHANGED,
        job=after.jobs[job_id],
        message=f"{job_id} schedulingPriority {old} -> {priority}",
        details={"old": old, "new": priority},
    )
    return _without_final(after, changed)


def _write(session: Session, state: QueueState, after: QueueState, now: datetime) -> list[str]:
    """Write the jobs of ``after`` that differ from ``state``; their job ids."""
    changed = changed_jobs(state, after)
    write_jobs(session, changed, now)
    return list(changed)


def _without_final(state: QueueState, changed: list[str]) -> QueueState:
    """``state`` without its final jobs, which are among ``changed`` (job ids): the state an event
    changed holds no other final job."""
    final = [job_id for job_id in changed if state.jobs[job_id].status.is_final]
    if not final:
        return state
    jobs = dict(state.jobs)
    for job_id in final:
        del jobs[job_id]
    return QueueState(state.queue, jobs)


def _lost_at_decision(session: Session, job_id: str) -> float | None:
    """The GPU-seconds the job's latest preemption lost, as its PREEMPTED audit row says (None for a row
    written before lost work was measured)."""
    details = session.scalars(
        select(AuditRow.details)
        .where(AuditRow.job_id == job_id, AuditRow.kind == AuditKind.PREEMPTED.value)
        .order_by(AuditRow.id.desc())
        .limit(1)
    ).first()
    lost = (details or {}).get("lostUnitSeconds")
    return None if lost is None else float(lost)


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()
