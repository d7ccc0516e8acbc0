"""One allocation cycle: read the deferred admission requests, let the engine decide, apply the decisions.

``run_allocation_cycle`` works in the session it is given and never commits: the caller's transaction
holds the whole cycle (ledger rows and task-instance resumptions commit together, or not at all). Steps:

1. PostgreSQL: ``pg_try_advisory_xact_lock(ALLOCATOR_LOCK_ID)``; when another scheduler holds it, skip.
2. Claim every task instance DEFERRED on ``QuotaAdmissionTrigger``: ``FOR UPDATE OF task_instance SKIP
   LOCKED`` on PostgreSQL; on SQLite a guarded no-op UPDATE per row that must match (it also takes the
   database's write lock until commit, so nothing changes under the cycle). A row not claimed waits.
3. Record each request the ledger has not seen (``record_submission``); an invalid one is reported.
4. Per job queue: ``load_queue_state``, ``plan_cycle``, ``record_cycle``, then resume each granted task
   instance with ``handle_event_submit`` and the lease as the event payload.

Reconciling leases with finished or cleared task instances, and signalling preemption victims, are the
next steps and are not done here: preemptions are only written to the ledger.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.models.taskinstance import TaskInstance
from airflow.models.trigger import Trigger, handle_event_submit
from airflow.triggers.base import TriggerEvent
from airflow.utils.sqlalchemy import with_row_locks
from airflow.utils.state import TaskInstanceState
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from airflow_quota.engine.config import JobRequestError, validate_job_request
from airflow_quota.engine.model import Grant, JobRequest, JobStatus, QueueState
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.store import (
    LedgerError,
    TaskInstanceRef,
    load_queue_state,
    record_cycle,
    record_submission,
    to_engine_time,
)
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, request_document

#: The PostgreSQL advisory lock one cycle holds (int64; b"aqalloc1"). Not Airflow's ``DBLocks`` values.
ALLOCATOR_LOCK_ID = int.from_bytes(b"aqalloc1", "big")
#: How long a task instance that deferred from a worker run waits before it may be granted: a stale
#: "defer-exit" executor event can fail a task resumed sooner (apache/airflow#71580, #72716).
SETTLE_TIME = timedelta(seconds=10)


@dataclass(frozen=True, slots=True)
class Lease:
    """A grant applied: the task instance resumed and the payload its ``next_method`` receives."""

    job_id: str
    ti_id: str
    payload: dict[str, Any]


@dataclass(slots=True)
class CycleReport:
    """What one cycle did. ``skipped`` cycles did nothing (another scheduler is allocating)."""

    skipped: bool = False
    submitted: list[str] = field(default_factory=list)
    granted: list[Lease] = field(default_factory=list)
    #: Victims written to the ledger as preempted, by preemptor; nobody has signalled them yet.
    preempted: dict[str, list[str]] = field(default_factory=dict)
    #: Requests the ledger cannot take (invalid, unknown job queue, share DISABLED or unknown): why.
    rejected: dict[str, str] = field(default_factory=dict)
    #: Deferred from a worker less than ``SETTLE_TIME`` ago: not granted this cycle.
    settling: list[str] = field(default_factory=list)
    #: Granted in the ledger but no claimed task instance to resume (a reservation whose task is gone).
    unresumed: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Waiting:
    """One claimed task instance deferred on the admission trigger."""

    job_id: str
    ti: TaskInstance
    kwargs: dict[str, Any]
    settled: bool


def job_id_for(dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> str:
    """A task instance's job id: one job per try; a requeued job keeps it, a retry or clear is a new job."""
    return f"{dag_id}/{run_id}/{task_id}/{map_index}/{try_number}"


def run_allocation_cycle(session: Session, now: datetime) -> CycleReport:
    """Run one allocation cycle at ``now`` (timezone-aware) in ``session``; the caller commits."""
    if not _take_cycle_lock(session):
        return CycleReport(skipped=True)
    report = CycleReport()
    by_queue: dict[str, list[_Waiting]] = defaultdict(list)
    for waiting in _claim_waiting(session, now):
        by_queue[str(waiting.kwargs.get("job_queue"))].append(waiting)
    for queue_name in sorted(by_queue):
        _allocate_queue(session, queue_name, by_queue[queue_name], now, report)
    return report


def _take_cycle_lock(session: Session) -> bool:
    bind = session.get_bind()
    if bind.dialect.name != "postgresql":
        return True  # SQLite runs one scheduler; the claims below take its write lock
    return bool(session.scalar(text("SELECT pg_try_advisory_xact_lock(:id)"), {"id": ALLOCATOR_LOCK_ID}))


def _claim_waiting(session: Session, now: datetime) -> list[_Waiting]:
    query = (
        select(TaskInstance, Trigger)
        .join(Trigger, TaskInstance.trigger_id == Trigger.id)
        .where(TaskInstance.state == TaskInstanceState.DEFERRED, Trigger.classpath == ADMISSION_CLASSPATH)
        .order_by(Trigger.created_date, TaskInstance.id)
    )
    postgres = session.get_bind().dialect.name == "postgresql"
    if postgres:
        query = with_row_locks(query, session, of=TaskInstance, skip_locked=True, key_share=False)
    claimed: list[_Waiting] = []
    for ti, trigger in session.execute(query).all():
        if not postgres and not _claim_row(session, ti, trigger.id):
            continue
        job_id = job_id_for(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number)
        # Only a task deferred from a worker run (pid set) can get the stale executor event.
        settled = ti.pid is None or trigger.created_date <= now - SETTLE_TIME
        claimed.append(_Waiting(job_id, ti, trigger.kwargs, settled))
    return claimed


def _claim_row(session: Session, ti: TaskInstance, trigger_id: int) -> bool:
    """SQLite: prove the row is still deferred on this trigger and take the write lock until commit."""
    result = session.execute(
        update(TaskInstance)
        .where(
            TaskInstance.id == ti.id,
            TaskInstance.state == TaskInstanceState.DEFERRED,
            TaskInstance.trigger_id == trigger_id,
        )
        .values(trigger_id=TaskInstance.trigger_id)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0) == 1)


def _allocate_queue(
    session: Session, queue_name: str, waiting: list[_Waiting], now: datetime, report: CycleReport
) -> None:
    try:
        state = load_queue_state(session, queue_name)
    except LedgerError as error:
        for each in waiting:
            report.rejected[each.job_id] = str(error)
        return
    grantable: dict[str, _Waiting] = {}
    for each in waiting:
        row = session.get(JobRow, each.job_id)
        if row is None:
            request = _request(each, report)
            if request is None:
                continue
            state = record_submission(
                session,
                state,
                each.job_id,
                request,
                TaskInstanceRef(
                    each.ti.dag_id,
                    each.ti.run_id,
                    each.ti.task_id,
                    each.ti.map_index,
                    each.ti.try_number,
                    str(each.ti.id),
                ),
                now,
                submitted_at=_submitted_at(each.kwargs),
            )
            report.submitted.append(each.job_id)
            if each.job_id not in state.jobs:  # recorded FAILED: share unknown or DISABLED
                row = session.get(JobRow, each.job_id)
                report.rejected[each.job_id] = "" if row is None else row.status_reason
                continue
        elif row.status == JobStatus.FAILED.value:
            report.rejected[each.job_id] = row.status_reason
            continue
        if not each.settled:
            report.settling.append(each.job_id)
            continue
        grantable[each.job_id] = each

    planning = _planning_state(state, grantable)
    plan = plan_cycle(planning, to_engine_time(now))
    record_cycle(session, planning, plan, now)
    for decision in plan.decisions:
        if not isinstance(decision, Grant):
            # Recorded only: resuming the victims' monitoring triggers is the next step.
            report.preempted.setdefault(decision.preemptor_id, []).extend(decision.victim_ids)
            continue
        chosen = grantable.get(decision.job_id)
        if chosen is None:
            report.unresumed.append(decision.job_id)
            continue
        report.granted.append(_resume(session, chosen, decision, now))


def _request(waiting: _Waiting, report: CycleReport) -> JobRequest | None:
    try:
        return validate_job_request(request_document(waiting.kwargs), source=waiting.job_id)
    except JobRequestError as error:
        report.rejected[waiting.job_id] = str(error)
        return None


def _submitted_at(kwargs: dict[str, Any]) -> datetime | None:
    value = kwargs.get("submitted_at")
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _planning_state(state: QueueState, grantable: dict[str, _Waiting]) -> QueueState:
    """The queue without waiting jobs whose task cannot be resumed now (settling, locked or gone).

    Jobs holding capacity, being stopped or holding a reservation stay: they count in the usage.
    """
    jobs = {
        job_id: job
        for job_id, job in state.jobs.items()
        if job.status is not JobStatus.RUNNABLE or job.holds_reservation or job_id in grantable
    }
    return QueueState(state.queue, jobs)


def _resume(session: Session, waiting: _Waiting, grant: Grant, now: datetime) -> Lease:
    row = session.get(JobRow, grant.job_id)
    attempt = 0 if row is None else row.attempt
    ti_id = str(waiting.ti.id)
    payload = {
        "lease_id": f"{grant.job_id}#{attempt}",
        "job_id": grant.job_id,
        "ti_id": ti_id,
        "try_number": waiting.ti.try_number,
        "attempt": attempt,
        "capacityUnit": grant.capacity_unit,
        "instanceCount": grant.instance_count,
        "borrowed": grant.borrowed,
        "granted_at": now.astimezone(UTC).isoformat(),
    }
    event = TriggerEvent(payload)  # type: ignore[no-untyped-call]  # untyped upstream __init__
    handle_event_submit(event, task_instance=waiting.ti, session=session)
    return Lease(grant.job_id, ti_id, payload)
