"""Each open job that is not waiting for admission, reconciled with its task instance (step 3 of a cycle).

A try that goes on moves its granted job SCHEDULED -> STARTING -> RUNNING, and a job being stopped is
signalled until it stops (cleared at ``stop_deadline``), or completes its stop when the host found its
SageMaker training job stopped. A try that is over finishes its job: a waiting one fails, one holding
capacity releases it unless a training job may still run on it (``orphans``). The table in
docs/allocator.md ("One cycle", step 3) is the full set of rules.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from airflow_quota.allocator.checkpoints import CheckpointListing
from airflow_quota.allocator.decisions import signal_stop
from airflow_quota.allocator.orphans import held_for_retry, local_training_gone, orphan_stopped
from airflow_quota.allocator.queue_part import QueuePart
from airflow_quota.allocator.reconcile import (
    TaskOutcome,
    TaskView,
    cleared_by_allocator,
    is_monitoring,
    task_outcome,
)
from airflow_quota.allocator.tasks import clear_unresponsive
from airflow_quota.engine.model import Job, JobStatus, QueueState
from airflow_quota.ledger.audit import audit_rows_in_bulk
from airflow_quota.ledger.lifecycle import (
    record_checkpoint_report,
    record_finish,
    record_status_change,
    record_stop_completed,
    record_termination,
)
from airflow_quota.ledger.models import JobRow
from airflow_quota.protocol import TrainingJobRecord
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH

log = logging.getLogger(__name__)


def reconcile_open_jobs(part: QueuePart, state: QueueState, job_ids: list[str]) -> QueueState:
    """Reconcile each open job of ``job_ids``, in order, with its task instance; the new state (``state``
    itself when no job changed).

    Each job is reconciled over a state that holds it alone: every event of a job not waiting (a status
    change, a completed stop, a finish, a termination) reads and changes that job only, so the queue's
    10,000 waiting jobs are copied once for all of them, at the end, instead of two or three times per
    event (the engine's copy, the ledger's search for what changed and its removal of final jobs). The
    jobs are in the same places and the rows and audit rows written in the same order as one event
    after another over the whole queue."""
    queue, jobs = state.queue, state.jobs
    changes: dict[str, Job | None] = {}  # the new job, or None when it is final (left out)
    with audit_rows_in_bulk(part.session):  # a turnover cycle's hundreds of finishes: one INSERT
        for job_id in job_ids:
            alone = QueueState(queue, {job_id: jobs[job_id]})
            after = reconcile_open_job(part, alone, job_id)
            if after is not alone:
                if after.queue is not queue or not after.jobs.keys() <= {job_id}:
                    raise AssertionError(f"reconciling job {job_id} changed other jobs of its queue")
                changes[job_id] = after.jobs.get(job_id)
    if not changes:
        return state
    new_jobs = dict(jobs)
    for job_id, job in changes.items():
        if job is None:
            del new_jobs[job_id]
        else:
            new_jobs[job_id] = job
    return QueueState(queue, new_jobs)


def reconcile_open_job(part: QueuePart, state: QueueState, job_id: str) -> QueueState:
    """Reconcile one open job, not waiting for admission, with its task instance; the new state."""
    job, row = state.jobs[job_id], part.row(job_id)
    view = part.views.get(job_id)
    outcome = task_outcome(row.try_number, row.ti_id, view)
    if outcome.cleared and _past_stop_deadline(part, job, row):  # ``_signal_if_due`` cleared it
        outcome = cleared_by_allocator(row.try_number, part.settings.stop_deadline)
    if outcome.outcome is TaskOutcome.ACTIVE:
        if not job.status.holds_capacity:
            return state
        state = _follow_progress(part, state, job, row, view)
        if job.is_stopping:
            if _victim_found_stopped(part, row) or local_training_gone(part.launched(row)):
                # Its capacity is free now, for its preemptor in this very cycle; its task still
                # reports the stop later, by then an ordinary request (or rejected when final). A local
                # victim's task process is dead (its watchdog stopped the training): Airflow fails the
                # try once it notices, and the job, then waiting, fails with it.
                part.report.stopped.append(job_id)
                return record_stop_completed(part.session, state, job_id, part.now, started=True)
            _signal_if_due(part, state.jobs[job_id], row, view)
            part.list_victim(row)
        return state
    if not job.status.holds_capacity:  # a waiting job (or a victim already requeued) holds nothing
        part.report.finished.append(job_id)
        reason = f"{outcome.reason} while it waited for quota"
        return record_termination(part.session, state, job_id, part.now, reason)
    if held_for_retry(part, row, view):
        held = f"its training job keeps its {row.held_instance_count} {row.held_capacity_unit} for the retry"
        if not row.status_reason.endswith(held):
            row.status_reason = f"{outcome.reason}; {held}"
        return state
    if not orphan_stopped(part, row, outcome.reason):
        return state
    record = _note_training_job(part, row)  # a job that ended in its launching run was never seen RUNNING
    part.report.finished.append(job_id)
    reason = outcome.reason
    if record is not None and record.get("ended_as"):  # what the task saw its training job do
        reason += f"; its training job {record.get('name')} ended {record.get('ended_as')}"
    return record_finish(
        part.session,
        state,
        job_id,
        part.now,
        succeeded=outcome.outcome is TaskOutcome.SUCCEEDED,
        reason=reason,
    )


def _note_training_job(part: QueuePart, row: JobRow) -> TrainingJobRecord | None:
    """Copy the training job the task recorded for the job's current lease onto its row (for the API
    and UI); return that record, or None when the task recorded none for this lease."""
    record = part.current_record(row)
    if record is None:
        return None
    noted = {"backend": record.get("backend"), "name": record.get("name"), "state": record.get("state")}
    known = row.training_job or {}  # its ARN is kept when a later record of the same job leaves it out
    arn = record.get("arn") or (known.get("arn") if known.get("name") == noted["name"] else None)
    if arn:
        noted["arn"] = arn
    if row.training_job != noted:
        row.training_job = noted
    return record


def _follow_progress(
    part: QueuePart, state: QueueState, job: Job, row: JobRow, view: TaskView | None
) -> QueueState:
    record = _note_training_job(part, row)
    state = _note_checkpoint(part, state, job, record)
    if job.is_stopping:
        return state
    launched = record is not None and record.get("state") == "launched"
    if launched or is_monitoring(view, ADMISSION_CLASSPATH):
        target = JobStatus.RUNNING
    elif view is not None and view.state in ("queued", "running"):
        target = JobStatus.STARTING
    else:
        return state
    order = (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)
    if order.index(target) <= order.index(job.status):
        return state
    return record_status_change(part.session, state, job.job_id, target, part.now)


def _note_checkpoint(
    part: QueuePart, state: QueueState, job: Job, record: TrainingJobRecord | None
) -> QueueState:
    """Copy the training's newest checkpoint to the ledger (``last_checkpoint_at``): what a preemption of
    the job loses counts from it. A local task records it in its record for the current lease; a running
    SageMaker job's is what the host last found under its checkpoint prefix (``checkpoints``), and the job
    is listed for the host to look again after the commit (not while it is being stopped: its preemption's
    loss is counted already)."""
    times = [_reported_checkpoint(job, record)]
    listing = None if job.is_stopping else CheckpointListing.of(job.job_id, record)
    kept = part.settings.sagemaker_checkpoints
    if listing is not None and kept is not None:
        part.report.checkpoint_listings.append(listing)
        times.append(kept.newest(listing.name))
    newest = max((at for at in times if at is not None), default=None)
    if newest is None:
        return state
    return record_checkpoint_report(part.session, state, job.job_id, newest, part.now)


def _reported_checkpoint(job: Job, record: TrainingJobRecord | None) -> datetime | None:
    """The ``last_checkpoint`` the task recorded for the current lease (a local task's report), if any."""
    reported = None if record is None else record.get("last_checkpoint")
    if not reported:
        return None
    try:
        at = datetime.fromisoformat(reported)
    except (TypeError, ValueError):
        log.warning("Job %s: its training job record has a bad last_checkpoint %r", job.job_id, reported)
        return None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


def _signal_if_due(part: QueuePart, job: Job, row: JobRow, view: TaskView | None) -> None:
    signalled = row.stop_signalled_at
    if signalled is None or is_monitoring(view, ADMISSION_CLASSPATH):
        signal_stop(part, job, row, view)
        return
    if _past_stop_deadline(part, job, row) and view is not None:
        log.warning(
            "Job %s did not stop within %s of being told to; clearing its task",
            job.job_id,
            part.settings.stop_deadline,
        )
        if clear_unresponsive(part.session, view.ti_id):
            part.report.cleared.append(job.job_id)


def _past_stop_deadline(part: QueuePart, job: Job, row: JobRow) -> bool:
    """Whether a job being stopped was told to stop ``stop_deadline`` ago or more."""
    told = row.stop_signalled_at
    return job.is_stopping and told is not None and part.now - told >= part.settings.stop_deadline


def _victim_found_stopped(part: QueuePart, row: JobRow) -> bool:
    """Whether the training job of a job being stopped (its task still active) was found ``Stopped``
    by the host when asked after a cycle since the job was told to stop (``stop_signalled_at``, set
    at the decision, or when a termination is first signalled: an earlier answer never counts).

    SageMaker only: a local job is a process of its task's worker, which tells it stopped, unless its task
    process died: then an allocator on its host may see it gone (``orphans.local_training_gone``).
    """
    stopped = part.settings.stopped_training_jobs
    record = part.launched(row)
    return (
        stopped is not None
        and record is not None
        and record.get("backend") == "sagemaker"
        and row.stop_signalled_at is not None
        and stopped.confirmed_since(record.get("name", ""), row.stop_signalled_at)
    )
