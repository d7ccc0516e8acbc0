"""Record an allocation cycle's decisions: the jobs it changed, one audit row per grant, preempted job and
promise.

A local unit's grant gets its device indices in its audit row once the allocator has picked them
(``note_devices``), so the timeline can draw it on the GPUs it really used.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_quota.engine.extensions import lost_unit_seconds
from airflow_quota.engine.model import CyclePlan, Grant, Job, Preemption, Promise, QueueState
from airflow_quota.ledger.audit import add_audit_row, audit_rows_in_bulk
from airflow_quota.ledger.job_rows import changed_jobs, set_columns, to_engine_time, write_jobs, write_reasons
from airflow_quota.ledger.models import AuditKind, AuditRow, JobRow


def record_cycle(session: Session, before: QueueState, plan: CyclePlan, now: datetime) -> dict[str, JobRow]:
    """Write the jobs the cycle changed and one audit row per grant, preempted job and promise; return the
    rows written as objects, by job id (not those whose statusReason alone changed: ``write_reasons``
    writes those in bulk)."""
    changed, reasons = _changed(before, plan)
    write_reasons(session, before.queue.name, reasons)
    rows = write_jobs(session, changed, now)
    with audit_rows_in_bulk(session):  # a cycle turning over its capacity grants hundreds: one INSERT
        for decision in plan.decisions:  # the jobs they name are in ``plan.decided`` as decided
            if isinstance(decision, Grant):
                _record_grant(session, plan.decided, rows[decision.job_id], decision, now)
            elif isinstance(decision, Preemption):
                _record_preemption(session, plan.decided, rows, decision, now)
            else:
                _record_promise(session, plan.decided, decision, now)
    return rows


def note_devices(session: Session, job_id: str, devices: list[int]) -> None:
    """Add a grant's device indices to the audit row of the job's grant, the one this cycle recorded."""
    audit = session.scalars(
        select(AuditRow)
        .where(AuditRow.job_id == job_id, AuditRow.kind == AuditKind.GRANTED.value)
        .order_by(AuditRow.id.desc())
        .limit(1)
    ).one()
    audit.details = {**(audit.details or {}), "devices": list(devices)}


def _changed(before: QueueState, plan: CyclePlan) -> tuple[dict[str, Job], dict[str, str]]:
    """What the cycle changed: the jobs its decisions changed, as they are now (by job id), and the new
    statusReasons of the waiting jobs no decision changed (a cycle at 10,000 waiting rewrites thousands
    when capacity frees up; their jobs are not copied), by job id. ``plan.changed_jobs`` in two parts."""
    changed = changed_jobs(before, plan.decided)  # the jobs not the same object picked out in C
    reasons: dict[str, str] = {}
    for job_id, reason in plan.status_reasons.items():
        job = changed.get(job_id)
        if job is None:
            reasons[job_id] = reason
        else:
            changed[job_id] = job.with_reason(reason)
    return changed, reasons


def _record_grant(session: Session, state: QueueState, row: JobRow, grant: Grant, now: datetime) -> None:
    set_columns(
        row,
        {
            "attempt": row.attempt + 1,
            "held_capacity_unit": grant.capacity_unit,
            "held_instance_count": grant.instance_count,
            "borrowed_instance_count": grant.borrowed,
            "borrowed_from": None,
        },
    )
    borrowed = f" ({grant.borrowed} borrowed)" if grant.borrowed else ""
    add_audit_row(
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
    at = to_engine_time(now)
    for victim_id in preemption.victim_ids:
        victim, row = state.jobs[victim_id], rows[victim_id]
        set_columns(row, {"preemption_rule": preemption.rule.value})
        lost = round(lost_unit_seconds(victim, at), 1)
        since = "its last checkpoint" if _checkpointed(victim) else "its start"
        add_audit_row(
            session,
            now,
            state.queue.name,
            AuditKind.PREEMPTED,
            job=victim,
            related_job_id=preemptor.job_id,
            rule=preemption.rule.value,
            message=f"{victim_id} ({victim.share_name}) preempted by {preemptor.job_id} "
            f"({preemptor.share_name}), rule {preemption.rule}: its {victim.count} {victim.unit} go to "
            f"{preemptor.job_id} once it has stopped; it loses {_seconds(lost)} GPU-seconds since {since}",
            details={
                "capacityUnit": victim.unit,
                "instanceCount": victim.count,
                "preemptorShare": preemptor.share_name,
                "attempt": row.attempt,
                "lostUnitSeconds": lost,
                "lostSince": "checkpoint" if _checkpointed(victim) else "start",
            },
        )


def _checkpointed(job: Job) -> bool:
    """Whether ``job`` reported a checkpoint in its current attempt (what its lost work counts from)."""
    started, checkpoint = job.started, job.last_checkpoint
    return started is not None and checkpoint is not None and checkpoint > started[0]


def _seconds(value: float) -> str:
    return f"{value:,.0f}"


def _record_promise(session: Session, state: QueueState, promise: Promise, now: datetime) -> None:
    job = state.jobs[promise.job_id]
    stops = ", ".join(
        f"{stop_id} (being stopped for {by})" if (by := state.jobs[stop_id].preempted_by) else stop_id
        for stop_id in promise.stop_ids
    )
    add_audit_row(
        session,
        now,
        state.queue.name,
        AuditKind.PROMISED,
        job=job,
        related_job_id=promise.stop_ids[0],
        message=f"{promise.job_id} ({job.share_name}) promised the spare {job.unit} of {stops}: it starts "
        "once they have stopped, and preempts nobody",
        details={"capacityUnit": job.unit, "instanceCount": job.count, "stops": list(promise.stop_ids)},
    )
