"""Translate between the ledger's rows and the engine's ``QueueState``, and record every decision and event.

Each function works in the session it is given and nothing else: it never commits, opens a session or
reads the clock (``now`` is passed in, a timezone-aware datetime), so the allocator can run a whole cycle
in one transaction. The engine decides; this module only writes down what it decided: lifecycle helpers
call the engine's lifecycle functions, write the jobs that changed and append one audit row per decision
or event, and return the new state without final jobs (what ``load_queue_state`` would read back).

Engine time is epoch seconds: pass ``to_engine_time(now)`` to ``plan_cycle`` so the start times it
decides are the ones stored (timestamps keep microseconds, and such times round-trip exactly).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key

from airflow_quota.engine.config import JobQueueWithShares, QuotaConfig
from airflow_quota.engine.lifecycle import (
    DEFAULT_TERMINATION_REASON,
    complete_stop,
    finish_job,
    hand_over,
    set_status,
    submit_jobs,
    terminate_job,
    update_priority,
    without_final_jobs,
)
from airflow_quota.engine.messages import format_loc
from airflow_quota.engine.model import (
    CyclePlan,
    Grant,
    Job,
    JobRequest,
    JobStatus,
    Preemption,
    QueueState,
    StopCause,
)
from airflow_quota.ledger.models import (
    RECENT_PREEMPTED_ATTEMPTS,
    AuditKind,
    AuditRow,
    ConfigRevisionRow,
    JobQueueRow,
    JobRow,
    QuotaShareRow,
)

FINAL_STATUSES = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value)
#: The longest reason a termination keeps: the REST API and the CLI refuse a longer one, this store cuts it.
TERMINATION_REASON_LENGTH = 1000
#: How many job ids an error message names before it says "and N more".
_JOBS_NAMED = 5


class LedgerError(ValueError):
    """The ledger cannot do what was asked; nothing was written."""


class AppliedConfigError(LedgerError):
    """A job queue's applied configuration no longer validates (applied by an older release whose rules
    were looser): the queue is not allocated, and its jobs wait, until a valid quota file is applied."""


class ConfigApplyError(LedgerError):
    """A quota file cannot be applied as it is; ``problems`` says why, one line each."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join([f"{source} was not applied; nothing changed:", *problems]))


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
class ConfigChange:
    """One applied change: a job queue's own fields (``quota_share_name`` None) or one quota share.

    ``old`` is None for something added, ``new`` None for something removed; both are AWS-shaped.
    """

    job_queue_name: str
    quota_share_name: str | None
    revision: int
    old: dict[str, Any] | None
    new: dict[str, Any] | None

    @property
    def description(self) -> str:
        what = (
            f"job queue {self.job_queue_name}"
            if self.quota_share_name is None
            else f"quota share {self.quota_share_name} of job queue {self.job_queue_name}"
        )
        verb = "added" if self.old is None else "removed" if self.new is None else "changed"
        return f"{what} {verb} (revision {self.revision})"


# --- time ------------------------------------------------------------------------------------------------


def to_engine_time(at: datetime) -> float:
    """The engine's clock (epoch seconds) for a timezone-aware datetime."""
    return at.timestamp()


def from_engine_time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


# --- configuration ---------------------------------------------------------------------------------------


def apply_quota_config(
    session: Session,
    config: QuotaConfig,
    *,
    applied_by: str,
    source: str,
    now: datetime | None = None,
) -> list[ConfigChange]:
    """Make the ledger's job queues and shares those of ``config`` (the whole quota file).

    Each job queue that changes gets the next revision, a history row with its whole configuration and
    one CONFIG_CHANGED audit row per queue or share changed, with old and new. Queues and shares missing
    from ``config`` are removed, unless they still have jobs that have not finished: then nothing at all
    is written and ``ConfigApplyError`` says which jobs. A reordering of shares alone is not a change.
    """
    now = now or datetime.now(UTC)
    queue_rows = {row.job_queue_name: row for row in session.scalars(select(JobQueueRow))}
    share_rows: dict[str, dict[str, QuotaShareRow]] = defaultdict(dict)
    for share_row in session.scalars(select(QuotaShareRow).order_by(QuotaShareRow.position)):
        share_rows[share_row.job_queue_name][share_row.quota_share_name] = share_row
    wanted = {queue.job_queue_name: queue for queue in config.job_queues}

    problems = _removals_with_unfinished_jobs(session, wanted)
    if problems:
        raise ConfigApplyError(source, problems)

    removed = [name for name in queue_rows if name not in wanted]
    changes: list[ConfigChange] = []
    for name in [*wanted, *removed]:
        changes += _apply_queue(
            session,
            name,
            queue_rows.get(name),
            share_rows[name],
            wanted.get(name),
            _Applied(applied_by, source, now),
        )
    return changes


def applied_config(session: Session, job_queue_name: str) -> dict[str, Any] | None:
    """The job queue as applied, AWS-shaped (``{"jobQueueName", "capacityLimits", "quotaShares"}``)."""
    queue_row = session.get(JobQueueRow, job_queue_name)
    if queue_row is None:
        return None
    shares = session.scalars(
        select(QuotaShareRow)
        .where(QuotaShareRow.job_queue_name == job_queue_name)
        .order_by(QuotaShareRow.position)
    )
    return {**_queue_document(queue_row), "quotaShares": [_share_document(row) for row in shares]}


@dataclass(frozen=True, slots=True)
class _Applied:
    by: str
    source: str
    at: datetime


def _removals_with_unfinished_jobs(session: Session, wanted: Mapping[str, JobQueueWithShares]) -> list[str]:
    """One line per queue or share ``wanted`` leaves out while jobs in it have not finished."""
    unfinished: dict[tuple[str, str], list[str]] = defaultdict(list)
    for queue_name, share_name, job_id in session.execute(
        select(JobRow.job_queue_name, JobRow.quota_share_name, JobRow.job_id)
        .where(JobRow.status.not_in(FINAL_STATUSES))
        .order_by(JobRow.job_queue_name, JobRow.quota_share_name, JobRow.submitted_at, JobRow.submit_seq)
    ):
        unfinished[(queue_name, share_name)].append(job_id)
    problems: list[str] = []
    for (queue_name, share_name), job_ids in unfinished.items():
        queue = wanted.get(queue_name)
        if queue is None:
            what = f"job queue {queue_name} is missing, but its quota share {share_name}"
        elif share_name not in {share.quota_share_name for share in queue.quota_shares}:
            what = f"quota share {share_name} of job queue {queue_name} is missing, but it"
        else:
            continue
        problems.append(
            f"  {what} still has {len(job_ids)} job(s) that have not finished ({_name_jobs(job_ids)}): "
            "keep it until they finish, or terminate them first"
        )
    return problems


def _name_jobs(job_ids: list[str]) -> str:
    named = ", ".join(job_ids[:_JOBS_NAMED])
    more = len(job_ids) - _JOBS_NAMED
    return f"{named} and {more} more" if more > 0 else named


def _apply_queue(
    session: Session,
    name: str,
    queue_row: JobQueueRow | None,
    share_rows: dict[str, QuotaShareRow],
    queue: JobQueueWithShares | None,
    applied: _Applied,
) -> list[ConfigChange]:
    old = _elements(
        None if queue_row is None else _queue_document(queue_row),
        [_share_document(row) for row in share_rows.values()],
    )
    new_document = None if queue is None else queue.model_dump(mode="json", by_alias=True, exclude_none=True)
    new = _elements(
        None if new_document is None else _queue_document_of(new_document),
        [] if new_document is None else new_document["quotaShares"],
    )
    keys = list(dict.fromkeys([*new, *old]))
    diffs = [(key, old.get(key), new.get(key)) for key in keys if old.get(key) != new.get(key)]
    if not diffs:
        return []

    latest = session.scalar(
        select(func.max(ConfigRevisionRow.revision)).where(ConfigRevisionRow.job_queue_name == name)
    )
    revision = (latest or 0) + 1
    if queue is None:
        session.execute(delete(QuotaShareRow).where(QuotaShareRow.job_queue_name == name))
        session.execute(delete(JobQueueRow).where(JobQueueRow.job_queue_name == name))
    else:
        _write_queue(session, queue_row, share_rows, queue, revision, applied.at)
    session.add(
        ConfigRevisionRow(
            job_queue_name=name,
            revision=revision,
            applied_at=applied.at,
            applied_by=applied.by,
            source=applied.source,
            config=new_document,
        )
    )
    changes = [ConfigChange(name, share_name, revision, before, after) for share_name, before, after in diffs]
    for change in changes:
        _audit(
            session,
            applied.at,
            name,
            AuditKind.CONFIG_CHANGED,
            quota_share_name=change.quota_share_name,
            message=f"{change.description} by {applied.by} from {applied.source}",
            details={
                "revision": revision,
                "appliedBy": applied.by,
                "source": applied.source,
                "old": change.old,
                "new": change.new,
            },
        )
    return changes


def _write_queue(
    session: Session,
    queue_row: JobQueueRow | None,
    share_rows: dict[str, QuotaShareRow],
    queue: JobQueueWithShares,
    revision: int,
    now: datetime,
) -> None:
    capacity_limits = [limit.model_dump(by_alias=True) for limit in queue.capacity_limits]
    if queue_row is None:
        queue_row = JobQueueRow(job_queue_name=queue.job_queue_name, created_at=now)
        session.add(queue_row)
    queue_row.capacity_limits = capacity_limits
    queue_row.revision = revision
    queue_row.updated_at = now
    session.flush()  # the queue row exists before its shares point at it

    kept = {share.quota_share_name for share in queue.quota_shares}
    for share_name, removed_row in share_rows.items():
        if share_name not in kept:
            session.delete(removed_row)
    for position, share in enumerate(queue.quota_shares):
        document = share.model_dump(mode="json", by_alias=True, exclude_none=True)
        share_row = share_rows.get(share.quota_share_name)
        if share_row is None:
            share_row = QuotaShareRow(
                job_queue_name=queue.job_queue_name, quota_share_name=share.quota_share_name, created_at=now
            )
            session.add(share_row)
        elif _share_document(share_row) == document:
            share_row.position = position
            continue
        sharing = share.resource_sharing_configuration
        share_row.position = position
        share_row.capacity_limits = document["capacityLimits"]
        share_row.strategy = sharing.strategy.value
        share_row.borrow_limit = sharing.borrow_limit
        share_row.in_share_preemption = share.preemption_configuration.in_share_preemption
        share_row.state = share.state.value
        share_row.updated_at = now


def _elements(
    queue_document: dict[str, Any] | None, share_documents: Iterable[dict[str, Any]]
) -> dict[str | None, dict[str, Any]]:
    """What a change is reported on: the queue's own fields (key None) and each share by name."""
    if queue_document is None:
        return {}
    elements: dict[str | None, dict[str, Any]] = {None: queue_document}
    for document in share_documents:
        elements[document["quotaShareName"]] = document
    return elements


def _queue_document(row: JobQueueRow) -> dict[str, Any]:
    return {"jobQueueName": row.job_queue_name, "capacityLimits": row.capacity_limits}


def _queue_document_of(document: Mapping[str, Any]) -> dict[str, Any]:
    return {"jobQueueName": document["jobQueueName"], "capacityLimits": document["capacityLimits"]}


def _share_document(row: QuotaShareRow) -> dict[str, Any]:
    """The share as the quota file writes it (what ``QuotaShareConfig.model_dump`` gives)."""
    sharing: dict[str, Any] = {"strategy": row.strategy}
    if row.borrow_limit is not None:
        sharing["borrowLimit"] = row.borrow_limit
    return {
        "quotaShareName": row.quota_share_name,
        "capacityLimits": row.capacity_limits,
        "resourceSharingConfiguration": sharing,
        "preemptionConfiguration": {"inSharePreemption": row.in_share_preemption},
        "state": row.state,
    }


# --- reading the engine's state ----------------------------------------------------------------------------


def load_queue_state(session: Session, job_queue_name: str) -> QueueState:
    """The job queue as applied and its jobs that have not finished, as the engine sees them."""
    return load_queue(session, job_queue_name)[0]


def load_queue(session: Session, job_queue_name: str) -> tuple[QueueState, dict[str, JobRow]]:
    """``load_queue_state`` and the rows it read, by job id.

    Holding the rows keeps them in the session (its identity map holds clean rows weakly), so a caller
    that looks them up again, as the allocator does for each job, reads no row twice.
    """
    document = applied_config(session, job_queue_name)
    if document is None:
        raise LedgerError(
            f"job queue {job_queue_name} is not in the quota ledger: apply a quota file that defines it"
        )
    try:
        queue = JobQueueWithShares.model_validate(document).to_job_queue()
    except ValidationError as error:
        problems = "; ".join(f"{format_loc(each['loc'])}: {each['msg']}" for each in error.errors()[:3])
        raise AppliedConfigError(
            f"the quota configuration applied to job queue {job_queue_name} no longer validates "
            f"({problems}): apply a valid quota file for it (airflow quota apply -f FILE); its jobs wait "
            "meanwhile"
        ) from None
    rows = {
        row.job_id: row
        for row in session.scalars(
            select(JobRow)
            .where(JobRow.job_queue_name == job_queue_name, JobRow.status.not_in(FINAL_STATUSES))
            .order_by(JobRow.submitted_at, JobRow.submit_seq)
        )
    }
    return QueueState(queue, {job_id: job_from_row(row) for job_id, row in rows.items()}), rows


def job_from_row(row: JobRow) -> Job:
    started = None
    if row.started_at is not None and row.start_seq is not None:
        started = (to_engine_time(row.started_at), row.start_seq)
    return Job(
        job_id=row.job_id,
        request=JobRequest(
            job_name=row.job_name,
            quota_share_name=row.quota_share_name,
            capacity_unit=row.capacity_unit,
            instance_count=row.instance_count,
            scheduling_priority=row.scheduling_priority,
            preemption_retries_before_termination=row.preemption_retries_before_termination,
        ),
        submitted=(to_engine_time(row.submitted_at), row.submit_seq),
        status=JobStatus(row.status),
        status_reason=row.status_reason,
        started=started,
        stop_cause=None if row.stop_cause is None else StopCause(row.stop_cause),
        preempted_by=row.preempted_by,
        awaiting_victims=frozenset(row.awaiting_victims),
        preempted_attempt_count=row.preempted_attempt_count,
    )


# --- reading the ledger for people (the admin commands) --------------------------------------------------


def job_queue_names(session: Session) -> list[str]:
    """The applied job queues' names, sorted."""
    return list(session.scalars(select(JobQueueRow.job_queue_name).order_by(JobQueueRow.job_queue_name)))


# --- recording jobs and decisions --------------------------------------------------------------------------


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
    for each in submissions:
        job = after.jobs[each.job_id]
        row = JobRow(
            job_id=each.job_id,
            job_queue_name=queue_name,
            recent_preempted_attempts=[],
            attempt=0,
            held_instance_count=0,
            borrowed_instance_count=0,
            **asdict(each.task),
            created_at=now,
        )
        _write_job(row, job, now)
        session.add(row)
        request = each.request
        _audit(
            session,
            now,
            queue_name,
            AuditKind.SUBMITTED,
            job=job,
            message=f"{each.job_id} submitted to quota share {request.quota_share_name}: "
            f"{request.instance_count} {request.capacity_unit}, "
            f"schedulingPriority {request.scheduling_priority}",
        )
        if job.status is JobStatus.FAILED:
            _audit(session, now, queue_name, AuditKind.FAILED, job=job, message=job.status_reason)
    return without_final_jobs(after)


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
    old = _job_row(session, from_job_id)
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
    _write_job(row, after.jobs[to_job_id], now)
    session.add(row)
    _write_changed_jobs(session, state, after, now)
    name = (row.training_job or {}).get("name", "its training job")
    _audit(
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
    return without_final_jobs(after)


def record_cycle(session: Session, before: QueueState, plan: CyclePlan, now: datetime) -> None:
    """Write the jobs the cycle changed and one audit row per grant and per preempted job."""
    rows = _write_changed_jobs(session, before, plan.state, now)
    for decision in plan.decisions:
        if isinstance(decision, Grant):
            _record_grant(session, plan.state, rows[decision.job_id], decision, now)
        else:
            _record_preemption(session, plan.state, rows, decision, now)


def _record_grant(session: Session, state: QueueState, row: JobRow, grant: Grant, now: datetime) -> None:
    row.attempt += 1
    row.held_capacity_unit = grant.capacity_unit
    row.held_instance_count = grant.instance_count
    row.borrowed_instance_count = grant.borrowed
    row.borrowed_from = None
    borrowed = f" ({grant.borrowed} borrowed)" if grant.borrowed else ""
    _audit(
        session,
        now,
        state.queue.name,
        AuditKind.GRANTED,
        job=state.jobs[grant.job_id],
        message=f"{grant.job_id} granted {grant.instance_count} {grant.capacity_unit}{borrowed}",
        details={
            "capacityUnit": grant.capacity_unit,
            "instanceCount": grant.instance_count,
            "borrowed": grant.borrowed,
            "attempt": row.attempt,
        },
    )


def _record_preemption(
    session: Session, state: QueueState, rows: Mapping[str, JobRow], preemption: Preemption, now: datetime
) -> None:
    preemptor = state.jobs[preemption.preemptor_id]
    for victim_id in preemption.victim_ids:
        victim, row = state.jobs[victim_id], rows[victim_id]
        row.preemption_rule = preemption.rule.value
        _audit(
            session,
            now,
            state.queue.name,
            AuditKind.PREEMPTED,
            job=victim,
            related_job_id=preemptor.job_id,
            rule=preemption.rule.value,
            message=f"{victim_id} ({victim.share_name}) preempted by {preemptor.job_id} "
            f"({preemptor.share_name}), rule {preemption.rule}: its {victim.count} {victim.unit} go to "
            f"{preemptor.job_id} once it has stopped",
            details={
                "capacityUnit": victim.unit,
                "instanceCount": victim.count,
                "preemptorShare": preemptor.share_name,
                "attempt": row.attempt,
            },
        )


def record_status_change(
    session: Session, state: QueueState, job_id: str, status: JobStatus, now: datetime
) -> QueueState:
    """A granted job moved along SCHEDULED -> STARTING -> RUNNING (no audit row: no decision)."""
    after = set_status(state, job_id, status)
    _write_changed_jobs(session, state, after, now)
    return without_final_jobs(after)


def record_stop_completed(
    session: Session, state: QueueState, job_id: str, now: datetime, *, started: bool = True
) -> QueueState:
    """A stop finished: REQUEUED (or FAILED, out of preemption retries), or FAILED when it was terminated.

    A preempted attempt is appended to the job's recent preempted attempts (the last 10 are kept);
    ``started=False`` (its task never heard of the grant) withdraws the grant without counting one.
    """
    after = complete_stop(state, job_id, started=started)
    before = state.jobs[job_id]
    row = _job_row(session, job_id)
    rule = row.preemption_rule
    if before.stop_cause is StopCause.PREEMPTED and started:
        attempt = {
            "attempt": row.attempt,
            "startedAt": None if row.started_at is None else _iso(row.started_at),
            "stoppedAt": _iso(now),
            "preemptedBy": before.preempted_by,
            "rule": rule,
            "statusReason": after.jobs[job_id].status_reason,
        }
        row.recent_preempted_attempts = [*row.recent_preempted_attempts, attempt][-RECENT_PREEMPTED_ATTEMPTS:]
    _write_changed_jobs(session, state, after, now)
    job = after.jobs[job_id]
    kind = AuditKind.REQUEUED if job.status is JobStatus.RUNNABLE else AuditKind.FAILED
    _audit(
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
    return without_final_jobs(after)


def record_finish(
    session: Session, state: QueueState, job_id: str, now: datetime, *, succeeded: bool, reason: str = ""
) -> QueueState:
    """The job's own work ended: SUCCEEDED or FAILED (also while it was being stopped)."""
    after = finish_job(state, job_id, succeeded=succeeded, reason=reason)
    _write_changed_jobs(session, state, after, now)
    job = after.jobs[job_id]
    kind = AuditKind.SUCCEEDED if succeeded else AuditKind.FAILED
    _audit(session, now, state.queue.name, kind, job=job, message=reason or f"{job_id} {kind.value.lower()}")
    return without_final_jobs(after)


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
        return without_final_jobs(after)
    _write_changed_jobs(session, state, after, now)
    job = after.jobs[job_id]
    stopping = job.status.holds_capacity
    queue_name = state.queue.name
    _audit(
        session,
        now,
        queue_name,
        AuditKind.TERMINATED,
        job=job,
        message=reason,
        details={"stopping": stopping},
    )
    if job.status is JobStatus.FAILED:
        _audit(session, now, queue_name, AuditKind.FAILED, job=job, message=job.status_reason)
    return without_final_jobs(after)


def record_priority_change(
    session: Session, state: QueueState, job_id: str, priority: int, now: datetime
) -> QueueState:
    """A job's schedulingPriority changed (its place in its share's order with it)."""
    after = update_priority(state, job_id, priority)
    old = state.jobs[job_id].priority
    _write_changed_jobs(session, state, after, now)
    _audit(
        session,
        now,
        state.queue.name,
        AuditKind.PRIORITY_CHANGED,
        job=after.jobs[job_id],
        message=f"{job_id} schedulingPriority {old} -> {priority}",
        details={"old": old, "new": priority},
    )
    return without_final_jobs(after)


# --- rows ------------------------------------------------------------------------------------------------


def _write_changed_jobs(
    session: Session, before: QueueState, after: QueueState, now: datetime
) -> dict[str, JobRow]:
    """Write every job of ``after`` that differs from ``before``; return their rows by job id.

    The rows the session already holds (the allocator keeps its cycle's rows) are taken from it without a
    query, so recording one event after another does not flush and re-read each time.
    """
    changed = {
        job_id: job
        for job_id, job in after.jobs.items()
        if (old := before.jobs.get(job_id)) is not job and old != job
    }
    rows: dict[str, JobRow] = {}
    for job_id in changed:
        held = session.identity_map.get(identity_key(JobRow, job_id))
        if isinstance(held, JobRow):
            rows[job_id] = held
    missing = [job_id for job_id in changed if job_id not in rows]
    if missing:
        rows.update(
            (row.job_id, row) for row in session.scalars(select(JobRow).where(JobRow.job_id.in_(missing)))
        )
    for job_id, job in changed.items():
        if job_id not in rows:
            raise LedgerError(f"job {job_id} is not in the quota ledger; record its submission first")
        _write_job(rows[job_id], job, now)
    return rows


def _job_row(session: Session, job_id: str) -> JobRow:
    row = session.get(JobRow, job_id)
    if row is None:
        raise LedgerError(f"job {job_id} is not in the quota ledger; record its submission first")
    return row


def _write_job(row: JobRow, job: Job, now: datetime) -> None:
    """Copy what the engine knows of ``job`` into ``row``; release its capacity once it holds none."""
    request = job.request
    row.quota_share_name = request.quota_share_name
    row.job_name = request.job_name
    row.capacity_unit = request.capacity_unit
    row.instance_count = request.instance_count
    row.scheduling_priority = request.scheduling_priority
    row.preemption_retries_before_termination = request.preemption_retries_before_termination
    row.status = job.status.value
    row.status_reason = job.status_reason
    row.submitted_at = from_engine_time(job.submitted[0])
    row.submit_seq = job.submitted[1]
    row.started_at = None if job.started is None else from_engine_time(job.started[0])
    row.start_seq = None if job.started is None else job.started[1]
    row.stop_cause = None if job.stop_cause is None else job.stop_cause.value
    if job.stop_cause is None:
        row.preemption_rule = None
    row.preempted_by = job.preempted_by
    row.awaiting_victims = sorted(job.awaiting_victims)
    row.preempted_attempt_count = job.preempted_attempt_count
    if not job.status.holds_capacity:
        row.held_capacity_unit = None
        row.held_instance_count = 0
        row.borrowed_instance_count = 0
        row.borrowed_from = None
        row.held_devices = None
        row.stop_signalled_at = None
    row.updated_at = now


def _audit(
    session: Session,
    now: datetime,
    job_queue_name: str,
    kind: AuditKind,
    *,
    message: str,
    job: Job | None = None,
    quota_share_name: str | None = None,
    related_job_id: str | None = None,
    rule: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    session.add(
        AuditRow(
            at=now,
            job_queue_name=job_queue_name,
            kind=kind.value,
            quota_share_name=quota_share_name if job is None else job.share_name,
            job_id=None if job is None else job.job_id,
            related_job_id=related_job_id,
            rule=rule,
            message=message,
            details=details,
        )
    )


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()
