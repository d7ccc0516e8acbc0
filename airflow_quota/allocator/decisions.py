"""The engine's decisions applied to Airflow: a grant resumes its task with the lease, a stop is signalled.

A grant of a local unit also picks the job's device indices (``_devices_for``). A job told to stop (a
preemption's victim, or a terminated job) gets the signal in its ``task_state_store`` and, when it is
deferred on its monitoring trigger, a preempt event (``signal_stop``).
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from sqlalchemy import select

from airflow_quota.allocator.job_ids import lease_id_of
from airflow_quota.allocator.queue_part import QueuePart, Waiting
from airflow_quota.allocator.reconcile import TaskView, is_monitoring
from airflow_quota.allocator.report import Lease
from airflow_quota.allocator.tasks import claim_deferred, resume, write_signal
from airflow_quota.engine.devices import assign_devices
from airflow_quota.engine.model import HOLDING_CAPACITY, Grant, Job, Preemption, QueueState
from airflow_quota.ledger.decisions import note_devices
from airflow_quota.ledger.errors import LedgerError
from airflow_quota.ledger.models import JobRow
from airflow_quota.protocol import LOCAL_UNIT_PREFIX, Preempt
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH


def grant(part: QueuePart, state: QueueState, decision: Grant, waiting: Waiting | None) -> None:
    """Apply a grant: a local unit's device indices (on the job, and in the grant's audit row), then its
    task resumed with the lease (or listed in ``unresumed`` when its task instance is not claimed: a later
    cycle resumes it)."""
    row = part.row(decision.job_id)
    if decision.capacity_unit.startswith(LOCAL_UNIT_PREFIX):
        row.held_devices = _devices_for(part, state, row, decision)
        note_devices(part.session, row.job_id, row.held_devices)
    if waiting is None:
        part.report.unresumed.append(decision.job_id)
        return
    resume_grant(part, waiting, row)


def _devices_for(part: QueuePart, state: QueueState, row: JobRow, decision: Grant) -> list[int]:
    """The grant's device indices: the lowest that no job holds among the unit's ``0..maxCapacity-1``.

    The host's GPUs are one set of indices: the jobs holding devices of any local unit, in any job
    queue, are counted (a quota file names one local unit, ``engine.config``; a ledger applied before
    that rule may hold two, and their jobs must not share a GPU either).
    """
    held = part.session.scalars(
        select(JobRow.held_devices).where(
            JobRow.status.in_([status.value for status in HOLDING_CAPACITY]),
            JobRow.held_capacity_unit.is_not(None),
            JobRow.job_id != row.job_id,
        )
    )
    total = state.queue.capacity.get(decision.capacity_unit, 0)
    devices = assign_devices(total, [list(each) for each in held if each], decision.instance_count)
    if devices is None:  # the engine counted room: some other queue or unit holds the indices
        raise LedgerError(
            f"no free {decision.capacity_unit} device indices among 0..{total - 1} for {decision.job_id} in "
            f"job queue {state.queue.name}: jobs of another job queue or local unit hold them. The "
            "host's GPUs are one set of indices, which a quota file gives to one local unit of one job "
            "queue: apply one that does (split the GPUs between teams with quota shares)"
        )
    return devices


def resume_grant(part: QueuePart, waiting: Waiting, row: JobRow) -> None:
    """Resume the granted task, once it has settled (else a later cycle resumes it). Its changes are
    flushed with the other grants' after the queue's decisions (``cycle._allocate_queue``)."""
    if not waiting.settled:
        part.report.settling.append(row.job_id)
        return
    ti = part.task_instance(waiting)
    payload: dict[str, Any] = {
        "lease_id": lease_id_of(row),
        "job_id": row.job_id,
        "ti_id": str(ti.id),
        "try_number": ti.try_number,
        "attempt": row.attempt,
        "capacityUnit": row.held_capacity_unit,
        "instanceCount": row.held_instance_count,
        "borrowed": row.borrowed_instance_count,
        "granted_at": part.now.astimezone(UTC).isoformat(),
        "submitted_at": row.submitted_at.astimezone(UTC).isoformat(),
    }
    if row.held_devices is not None:
        payload["devices"] = list(row.held_devices)
    if row.job_id in part.report.handed_over.values():
        payload["reattach"] = True
    resume(part.session, ti, payload, flush=False)
    part.report.granted.append(Lease(row.job_id, str(ti.id), payload))


def preempt(part: QueuePart, state: QueueState, preemption: Preemption) -> None:
    """Apply a preemption: count it, tell each victim's task to stop and list its SageMaker training job."""
    part.report.preempted.setdefault(preemption.preemptor_id, []).extend(preemption.victim_ids)
    rule = preemption.rule.value
    part.report.preempted_by_rule[rule] = part.report.preempted_by_rule.get(rule, 0) + len(
        preemption.victim_ids
    )
    for victim_id in preemption.victim_ids:
        row = part.row(victim_id)
        signal_stop(part, state.jobs[victim_id], row, part.views.get(victim_id))
        part.list_victim(row)  # the stop starts at the decision, not when its task next runs


def signal_stop(part: QueuePart, job: Job, row: JobRow, view: TaskView | None) -> None:
    """Tell a job's task to stop: the store signal always, a preempt event when it is monitoring."""
    signal: Preempt = {
        "preempt": True,
        "lease_id": lease_id_of(row),
        "job_id": job.job_id,
        "preempted_by": job.preempted_by,
        "rule": row.preemption_rule or (None if job.stop_cause is None else job.stop_cause.value),
        "reason": job.status_reason,
        "at": part.now.astimezone(UTC).isoformat(),
    }
    first = row.stop_signalled_at is None
    write_signal(part.session, row, dict(signal))
    resumed = False
    # A task that just deferred from a worker run gets the event once it has settled (the stale
    # executor event again); meanwhile the store signal is there, and this is re-sent each cycle.
    if (
        is_monitoring(view, ADMISSION_CLASSPATH)
        and view is not None
        and view.settled(part.now, part.settings.settle_time)
    ):
        ti = claim_deferred(part.session, view.ti_id)
        if ti is not None:
            resume(part.session, ti, dict(signal))
            resumed = True
    if first:
        row.stop_signalled_at = part.now
    if first or resumed:
        part.report.signalled.append(job.job_id)
