"""Job lifecycle events outside the allocation cycle: submit, start, stop completed, finish, terminate.

Each function takes a QueueState and returns a new one; none does I/O. The allocator applies them when
tasks report, the simulator when its clock says so.
"""

from __future__ import annotations

from dataclasses import replace

from airflow_quota.engine.model import (
    TERMINATING,
    Job,
    JobQueue,
    JobRequest,
    JobStatus,
    QueueState,
    ShareState,
    StopCause,
)

DEFAULT_TERMINATION_REASON = "Terminated by request"


class LifecycleError(ValueError):
    """An event that does not apply to the job in its current state."""


def next_submission_seq(state: QueueState) -> int:
    return 1 + max((job.submitted[1] for job in state.jobs.values()), default=0)


def submit_job(
    state: QueueState, job_id: str, request: JobRequest, at: float, seq: int | None = None
) -> QueueState:
    """Add a job as RUNNABLE, or as FAILED with a reason when its share is DISABLED or unknown.

    ``seq`` orders submissions made at the same time; by default it follows the latest one in ``state``.
    """
    order_seq = next_submission_seq(state) if seq is None else seq
    return submit_jobs(state, [(job_id, request, at, order_seq)])


def submit_jobs(state: QueueState, submissions: list[tuple[str, JobRequest, float, int]]) -> QueueState:
    """``submit_job`` for many jobs at once, ``(job_id, request, at, seq)`` each, in one new state."""
    jobs = dict(state.jobs)
    for job_id, request, at, seq in submissions:
        if job_id in jobs:
            raise LifecycleError(f"job {job_id!r} was already submitted to job queue {state.queue.name!r}")
        jobs[job_id] = _submitted(state.queue, Job(job_id=job_id, request=request, submitted=(at, seq)))
    return QueueState(state.queue, jobs)


def _submitted(queue: JobQueue, job: Job) -> Job:
    """A new job as its share takes it: RUNNABLE, or FAILED saying why (share unknown or DISABLED)."""
    request = job.request
    share_names = queue.share_names()
    if request.quota_share_name not in share_names:
        return replace(
            job,
            status=JobStatus.FAILED,
            status_reason=(
                f"Quota share {request.quota_share_name!r} does not exist in job queue "
                f"{queue.name!r}; use one of: {', '.join(share_names)}"
            ),
        )
    if queue.share(request.quota_share_name).state is ShareState.DISABLED:
        return replace(
            job,
            status=JobStatus.FAILED,
            status_reason=(
                f"Quota share {request.quota_share_name!r} is DISABLED and accepts no new jobs; "
                f"enable it or submit to another share"
            ),
        )
    return job


def set_status(state: QueueState, job_id: str, status: JobStatus) -> QueueState:
    """Move a granted job along SCHEDULED -> STARTING -> RUNNING."""
    job = _job(state, job_id)
    if not (job.status.holds_capacity and status.holds_capacity):
        raise LifecycleError(f"job {job_id!r} is {job.status}; only a granted job can become {status}")
    return _with(state, replace(job, status=status))


def record_checkpoint(state: QueueState, job_id: str, at: float | None) -> QueueState:
    """``job_id``'s training reported a checkpoint at ``at``: a preemption of it loses the work since then
    (``engine.extensions.lost_unit_seconds``)."""
    job = state.jobs[job_id]
    if job.last_checkpoint == at:
        return state
    return _with(state, replace(job, last_checkpoint=at))


def complete_stop(state: QueueState, job_id: str, *, started: bool = True) -> QueueState:
    """A stop finished: a preempted job is requeued at its place (or FAILED when out of retries).

    ``started=False``: the job was preempted before its task was told of its grant (nothing ran), so
    the grant is only withdrawn: requeued, and the preemption does not count as a preempted attempt.
    """
    job = _job(state, job_id)
    if not job.is_stopping or not job.status.holds_capacity:
        raise LifecycleError(f"job {job_id!r} is not being stopped")
    if job.stop_cause is StopCause.TERMINATED:
        given = (
            job.status_reason.removeprefix(TERMINATING) if job.status_reason.startswith(TERMINATING) else ""
        )
        stopped = replace(job, status=JobStatus.FAILED, status_reason=given or DEFAULT_TERMINATION_REASON)
        return _with(state, _cleared(stopped))
    preemptor = job.preempted_by or "a job that is gone"
    if not started:
        withdrawn = replace(
            job,
            status=JobStatus.RUNNABLE,
            status_reason=f"Preempted by {preemptor} before it started; requeued at its original position",
        )
        return _with(state, _cleared(withdrawn))
    count = job.preempted_attempt_count + 1
    retries = job.request.preemption_retries_before_termination
    if retries is not None and count > retries:
        stopped = replace(
            job,
            status=JobStatus.FAILED,
            preempted_attempt_count=count,
            status_reason=(
                f"Preempted by {preemptor}: preempted {count} time(s), more than "
                f"preemptionRetriesBeforeTermination={retries}"
            ),
        )
    else:
        stopped = replace(
            job,
            status=JobStatus.RUNNABLE,
            preempted_attempt_count=count,
            status_reason=f"Preempted by {preemptor}; requeued at its original position",
        )
    return _with(state, _cleared(stopped))


def finish_job(state: QueueState, job_id: str, *, succeeded: bool, reason: str = "") -> QueueState:
    """The job's own work ended. A job that finishes while being stopped is not counted as preempted."""
    job = _job(state, job_id)
    if not job.status.holds_capacity:
        raise LifecycleError(f"job {job_id!r} is {job.status}; only a granted job can finish")
    status = JobStatus.SUCCEEDED if succeeded else JobStatus.FAILED
    return _with(state, _cleared(replace(job, status=status, status_reason=reason)))


def terminate_job(state: QueueState, job_id: str, reason: str = DEFAULT_TERMINATION_REASON) -> QueueState:
    """A waiting job fails at once; a granted one is stopped first, then fails.

    A waiting preemptor's reservation is dropped with it; its victims finish stopping and, promised to
    nobody now, may be taken over by another preemptor.
    """
    job = _job(state, job_id)
    if job.status.is_final:
        return state
    if job.status.holds_capacity:
        return _with(
            state, replace(job, stop_cause=StopCause.TERMINATED, status_reason=f"Stopping: {reason}")
        )
    return _with(state, _cleared(replace(job, status=JobStatus.FAILED, status_reason=reason)))


def hand_over(state: QueueState, from_job_id: str, to_job_id: str, request: JobRequest) -> QueueState:
    """A task's retry takes over what its previous try still holds: its capacity and its training job.

    The new job keeps the old one's place (submission order, start, status, preemption summary), so the
    hand-over changes nobody's usage; the old job fails, saying where its capacity went. Only a granted
    job that is not being stopped can hand over, and only to a request for the same share and capacity.
    """
    old = _job(state, from_job_id)
    if to_job_id in state.jobs:
        raise LifecycleError(f"job {to_job_id!r} was already submitted to job queue {state.queue.name!r}")
    if not old.status.holds_capacity or old.is_stopping:
        raise LifecycleError(f"job {from_job_id!r} is {old.status} and holds nothing to hand over")
    held = (old.request.quota_share_name, old.request.capacity_unit, old.request.instance_count)
    wanted = (request.quota_share_name, request.capacity_unit, request.instance_count)
    if held != wanted:
        raise LifecycleError(f"job {from_job_id!r} holds {held}, but {to_job_id!r} asks for {wanted}")
    successor = replace(old, job_id=to_job_id, request=request)
    given_up = replace(
        old,
        status=JobStatus.FAILED,
        status_reason=f"Its task try ended; its capacity and training job passed to its retry {to_job_id}",
    )
    return _with(_with(state, _cleared(given_up)), successor)


def update_priority(state: QueueState, job_id: str, priority: int) -> QueueState:
    job = _job(state, job_id)
    return _with(state, replace(job, request=replace(job.request, scheduling_priority=priority)))


def update_queue(state: QueueState, queue: JobQueue) -> QueueState:
    """A new configuration; usage above a lowered limit is left to drain (or to be reclaimed)."""
    return QueueState(queue, dict(state.jobs))


def without_final_jobs(state: QueueState) -> QueueState:
    return QueueState(state.queue, {k: j for k, j in state.jobs.items() if not j.status.is_final})


def _cleared(job: Job) -> Job:
    return replace(job, started=None, stop_cause=None, preempted_by=None, awaiting_victims={})


def _job(state: QueueState, job_id: str) -> Job:
    try:
        return state.jobs[job_id]
    except KeyError:
        raise LifecycleError(f"no job {job_id!r} in job queue {state.queue.name!r}") from None


def _with(state: QueueState, job: Job) -> QueueState:
    jobs = dict(state.jobs)
    jobs[job.job_id] = job
    return QueueState(state.queue, jobs)
