"""The admission requests of a job queue's part of a cycle: recorded, rejected, or stop reports.

A task deferred for admission is a new request (validated and recorded, or taking over what its previous
try holds, ``_submit_retry``), a request the ledger knows (granted while it settled: resumed now), a job's
stop report (it was being stopped), or a request that can never be granted or that the ledger refuses to
record: that task alone is resumed with a rejection (``reject``). ``admit`` returns the requests the plan
may grant.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from sqlalchemy import select

from airflow_quota.allocator.decisions import resume_grant
from airflow_quota.allocator.job_ids import lease_id_of
from airflow_quota.allocator.orphans import orphan_stopped
from airflow_quota.allocator.queue_part import QueuePart, Waiting
from airflow_quota.allocator.report import first_line
from airflow_quota.allocator.tasks import WaitingTask, resume
from airflow_quota.engine.config import JobRequestError, validate_job_request
from airflow_quota.engine.model import Job, JobRequest, JobStatus, QueueState
from airflow_quota.ledger.lifecycle import (
    Submission,
    TaskInstanceRef,
    record_capacity_requeue,
    record_finish,
    record_handover,
    record_stop_completed,
    record_submission,
    record_submissions,
)
from airflow_quota.ledger.models import JOB_ID_LENGTH, NAME_LENGTH, UNIT_LENGTH, JobRow
from airflow_quota.triggers.admission import request_document

log = logging.getLogger(__name__)


def admit(
    part: QueuePart, state: QueueState, waiting: list[Waiting]
) -> tuple[QueueState, dict[str, Waiting]]:
    """Take each waiting task as what it is (a new request, a grant to resume, a stop report, a request
    to reject); the new state, and the requests the plan may grant, by job id.

    At 10,000 waiting nearly every task is a RUNNABLE job the ledger knows, which the plan may grant as
    it is: only the others (a job holding capacity or final) are looked at one by one, in their order,
    and the rest are taken in bulk (a recorded stop changes only its own job, so what the others are is
    known from the start)."""
    state, admitted = _submit_new(part, state, waiting)
    admitted_ids, admitted_set = part.ids(admitted)
    # A job RUNNABLE as the part loaded the queue that still waits is RUNNABLE still (``QueuePart.runnable``):
    # only the others are looked at.
    runnable, jobs = JobStatus.RUNNABLE, state.jobs
    other_ids = {
        job_id
        for job_id in admitted_set - part.runnable
        if (job := jobs.get(job_id)) is None or job.status is not runnable
    }
    others = part.only(admitted, other_ids)
    not_grantable: set[str] = set()
    for each in others:
        job = state.jobs.get(each.job_id)
        if job is not None and job.status.holds_capacity and not job.is_stopping and gives_back(part, each):
            # Its launch met a capacity error: it gave its lease back and waits for its backoff.
            reason = str(each.kwargs.get("requeue_reason") or "Requeued after a capacity error")
            state = record_capacity_requeue(part.session, state, each.job_id, part.now, reason=reason)
            part.report.requeued.append(each.job_id)
            job = state.jobs.get(each.job_id)
        if job is not None and job.status.holds_capacity:
            if not job.is_stopping:  # granted while it settled (or its resume was lost): resume it
                resume_grant(part, each, part.row(each.job_id))
                not_grantable.add(each.job_id)
                continue
            # Its deferral is the stop report of the lease it names; a task that never received
            # its grant names none (preempted while it settled): the grant is only withdrawn.
            started = each.kwargs.get("released_lease_id") == lease_id_of(part.row(each.job_id))
            state = record_stop_completed(part.session, state, each.job_id, part.now, started=started)
            part.report.stopped.append(each.job_id)
            job = state.jobs.get(each.job_id)
        if job is None:  # final: refused at submission, out of preemption retries, terminated
            reject(part, each, part.row(each.job_id).status_reason)
            not_grantable.add(each.job_id)
        # Else RUNNABLE: an ordinary request, at its original place. That includes a victim whose stop
        # the allocator completed before its task reported it (``open_jobs._victim_found_stopped``): the
        # ``released_lease_id`` it names was released already and counts no second preemption.
    grantable = dict(zip(admitted_ids, admitted, strict=True))  # in C, in their order
    for job_id in not_grantable:
        del grantable[job_id]
    for job_id in _backing_off(part, grantable):
        # Not planned (``cycle._planning_state``): neither granted nor preempting before its backoff
        # ends, and its statusReason stays what its requeue said (when it tries again).
        del grantable[job_id]
        part.report.backing_off.append(job_id)
    return state, grantable


def gives_back(part: QueuePart, waiting: Waiting) -> bool:
    """Whether a granted job's deferral gives its lease back after a capacity error: it names the lease
    it holds now as released and says why (``requeue_reason``). A job being preempted that does the same
    is a stop report instead (its preemption is what freed the capacity)."""
    kwargs = waiting.kwargs
    return bool(kwargs.get("requeue_reason")) and kwargs.get("released_lease_id") == lease_id_of(
        part.row(waiting.job_id)
    )


def not_before_of(waiting: Waiting) -> datetime | None:
    """When the request's backoff ends (``not_before``, ISO 8601), or None when it names none (or none
    that reads as a time)."""
    value = waiting.kwargs.get("not_before")
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _backing_off(part: QueuePart, grantable: dict[str, Waiting]) -> list[str]:
    """The requests among ``grantable`` whose backoff ends after the cycle's ``now``."""
    backing_off = []
    for job_id, each in grantable.items():
        if "not_before" in each.kwargs:
            at = not_before_of(each)
            if at is not None and at > part.now:
                backing_off.append(job_id)
    return backing_off


def _submit_new(
    part: QueuePart, state: QueueState, waiting: list[Waiting]
) -> tuple[QueueState, list[Waiting]]:
    """Record the requests the ledger has not seen (all at once); return the waiting it knows now.

    An invalid request is rejected and left out, and so is one the ledger cannot record
    (``_record_new``, ``_record_alone``); a retry's request may take over what its previous try still
    holds (``_submit_retry``).
    """
    new = part.only(waiting, part.ids(waiting)[1] - part.open_ids)
    if not new:
        return state, waiting
    finished = set(
        part.session.scalars(select(JobRow.job_id).where(JobRow.job_id.in_([e.job_id for e in new])))
    )
    new = [each for each in new if each.job_id not in finished]
    # Only a later try can take over what an earlier try of its task holds.
    holding = _holding_by_task(part, state) if any(each.task.try_number > 1 for each in new) else {}
    batch: list[tuple[Waiting, Submission]] = []
    submitted: list[str] = []
    left_out: set[str] = set()
    for each in new:
        request = _job_request(part, each)
        if request is None:
            left_out.add(each.job_id)
            continue
        submitted.append(each.job_id)
        task = each.task
        previous = holding.get((task.dag_id, task.run_id, task.task_id, task.map_index))
        if previous is not None and part.row(previous.job_id).try_number < task.try_number:
            retried = _record_alone(part, each, partial(_submit_retry, part, state, each, request, previous))
            if retried is None:
                left_out.add(each.job_id)
            else:
                state = retried
        else:
            submitted_at = submitted_at_of(each)
            batch.append((each, Submission(each.job_id, request, _task_ref(task), submitted_at)))
    state, refused_new = _record_new(part, state, batch)
    left_out |= refused_new
    part.report.submitted += [job_id for job_id in submitted if job_id not in left_out]
    return state, [each for each in waiting if each.job_id not in left_out] if left_out else waiting


def _record_new(
    part: QueuePart, state: QueueState, batch: list[tuple[Waiting, Submission]]
) -> tuple[QueueState, set[str]]:
    """Record new requests at once; when the ledger refuses that, one by one, and reject each one it
    refuses (a value beyond its columns) on its own task. The new state, and the job ids refused."""
    if not batch:
        return state, set()
    try:
        with part.session.begin_nested():  # flushed before it ends: a refusal shows here
            return record_submissions(part.session, state, [job for _, job in batch], part.now), set()
    except Exception:  # one of them (or more): found below, where each is recorded or refused alone
        log.debug("Recording %d new requests at once failed; recording them one by one", len(batch))
    refused: set[str] = set()
    for each, submission in batch:
        recorded = _record_alone(
            part, each, partial(record_submissions, part.session, state, [submission], part.now)
        )
        if recorded is None:
            refused.add(each.job_id)
        else:
            state = recorded
    return state, refused


def _record_alone(part: QueuePart, waiting: Waiting, record: Callable[[], QueueState]) -> QueueState | None:
    """``record()`` (what a request changes in the ledger) in a savepoint: the new state, or None when
    the ledger refused it; then the savepoint and what it added to the report are undone, and the
    request is rejected on its own task."""
    report, listed = copy.deepcopy(part.report), set(part.listed)  # as they were, to undo
    try:
        with part.session.begin_nested():  # flushed before it ends: a refusal shows here
            return record()
    except Exception as error:
        log.warning("Job %s: its request could not be recorded; rejecting it", waiting.job_id, exc_info=True)
        part.report.undo_to(report)
        part.listed = listed
        reject(part, waiting, _unrecordable(error))
        return None


def _holding_by_task(part: QueuePart, state: QueueState) -> dict[tuple[str, str, str, int], Job]:
    """Jobs holding capacity they could hand over to a retry, by task instance."""
    holding: dict[tuple[str, str, str, int], Job] = {}
    for job_id, job in state.jobs.items():
        if job.status.holds_capacity and not job.is_stopping:
            row = part.row(job_id)
            holding[(row.dag_id, row.run_id, row.task_id, row.map_index)] = job
    return holding


def _submit_retry(
    part: QueuePart, state: QueueState, waiting: Waiting, request: JobRequest, previous: Job
) -> QueueState:
    """A retry takes over its previous try's capacity and training job when it asks for the same;
    else it waits as a new job, and the previous try's training job is an orphan: its capacity is
    released once that job is stopped (``orphans.orphan_stopped``; later cycles follow it in
    ``open_jobs``)."""
    held = previous.request
    if (held.quota_share_name, held.capacity_unit, held.instance_count) == (
        request.quota_share_name,
        request.capacity_unit,
        request.instance_count,
    ):
        part.report.handed_over[previous.job_id] = waiting.job_id
        task = _task_ref(waiting.task)
        return record_handover(part.session, state, previous.job_id, waiting.job_id, request, task, part.now)
    reason = f"Its retry {waiting.job_id} asks for other capacity"
    if orphan_stopped(part, part.row(previous.job_id), reason):
        part.report.finished.append(previous.job_id)
        state = record_finish(part.session, state, previous.job_id, part.now, succeeded=False, reason=reason)
    return record_submission(
        part.session,
        state,
        waiting.job_id,
        request,
        _task_ref(waiting.task),
        part.now,
        submitted_at=submitted_at_of(waiting),
    )


def _job_request(part: QueuePart, waiting: Waiting) -> JobRequest | None:
    """The waiting task's request, validated; None when it is invalid (its task is rejected)."""
    try:
        return validate_job_request(request_document(waiting.kwargs), source=waiting.job_id)
    except JobRequestError as error:
        reject(part, waiting, str(error))
        return None


def reject(part: QueuePart, waiting: Waiting, reason: str) -> None:
    """Resume the task with a rejection, once it has settled (as a grant is: resumed sooner, Airflow can
    fail it on its worker run's late event, without the reason); a job whose task settles or cannot be
    claimed is rejected by a later cycle."""
    if not waiting.settled:
        part.report.settling.append(waiting.job_id)
        return
    part.claim([waiting])
    if not part.claims[waiting.job_id]:
        return
    part.report.rejected[waiting.job_id] = reason
    resume(
        part.session,
        part.task_instance(waiting),
        {"rejected": True, "job_id": waiting.job_id, "reason": reason},
    )


def _unrecordable(error: BaseException) -> str:
    """Why a request the ledger cannot record is rejected, with the ledger's limits."""
    return (
        f"Its request could not be recorded in the quota ledger ({first_line(error)}). The ledger stores "
        f"names up to {NAME_LENGTH} characters, a capacityUnit up to {UNIT_LENGTH}, a job id "
        f"(dag_id/run_id/task_id/map_index/try_number) up to {JOB_ID_LENGTH} and numbers up to "
        f"{2**31 - 1} (its INTEGER columns): make the value that is beyond them smaller"
    )


def _task_ref(task: WaitingTask) -> TaskInstanceRef:
    return TaskInstanceRef(
        task.dag_id, task.run_id, task.task_id, task.map_index, task.try_number, str(task.id)
    )


def submitted_at_of(waiting: Waiting) -> datetime:
    """The request's first submission: what its kwargs say, else when it deferred (a task that waits from
    the triggerer learns its submission time from its grant, so its first request names none)."""
    value = waiting.kwargs.get("submitted_at")
    try:
        at = datetime.fromisoformat(value) if isinstance(value, str) else waiting.task.deferred_at
    except ValueError:
        at = waiting.task.deferred_at
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
