"""AWS Batch's ``jobStateTimeLimitActions`` on a job queue our allocator schedules (issue 35).

Each action names a ``reason`` (one of AWS's statusReason codes, engine/config.py ``TIME_LIMIT_REASONS``)
and ``maxTimeSeconds``: a RUNNABLE job whose statusReason has been that reason (the code itself, or the
code followed by AWS's " - " and its words) for that long is terminated, with a statusReason in AWS's words
("Terminated by JobStateTimeLimit action due to reason: ..."). The ledger keeps since when each job has
waited with such a reason (``JobRow.time_limit_reason_since``), set the first cycle that sees it and
cleared when the job no longer waits with one. The step runs every cycle of a queue with actions, before
the cycle's "nothing changed" shortcut, so a limit that comes due in a quiet queue is not skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from airflow_quota.allocator.queue_part import QueuePart
from airflow_quota.engine.model import JobStatus, QueueState
from airflow_quota.ledger.lifecycle import record_termination
from airflow_quota.ledger.models import JobQueueRow, JobRow

#: The statusReason of a job a time limit terminated: AWS Batch's words, then how long it waited.
TERMINATED_BY_TIME_LIMIT = "Terminated by JobStateTimeLimit action due to reason: {reason}"


def time_limits_of(queue_row: JobQueueRow | None) -> dict[str, int]:
    """The queue's limits: the seconds a RUNNABLE job may wait with each reason (the shortest, when two
    actions name one reason)."""
    limits: dict[str, int] = {}
    for action in (queue_row.job_state_time_limit_actions if queue_row is not None else None) or []:
        reason, seconds = action.get("reason"), action.get("maxTimeSeconds")
        if isinstance(reason, str) and isinstance(seconds, int):
            limits[reason] = min(seconds, limits.get(reason, seconds))
    return limits


def limited_reason(status_reason: str, limits: Mapping[str, Any]) -> str | None:
    """The reason of ``limits`` that ``status_reason`` is (the code alone, or the code and its words)."""
    code = status_reason.split(" - ", 1)[0].strip()
    return code if code in limits else None


def apply_time_limits(part: QueuePart, state: QueueState) -> QueueState:
    """Note since when each RUNNABLE job of ``state`` waits with a reason its queue limits, and terminate
    those that have waited with it ``maxTimeSeconds`` or longer; the new state (``state`` itself when
    none was terminated)."""
    queue_name = state.queue.name
    limits = time_limits_of(part.session.get(JobQueueRow, queue_name))
    if not limits:
        return state
    runnable = JobStatus.RUNNABLE
    waiting_with = {
        job_id: reason
        for job_id, job in state.jobs.items()
        if job.status is runnable and (reason := limited_reason(job.status_reason, limits)) is not None
    }
    noted = set(
        part.session.scalars(
            select(JobRow.job_id).where(
                JobRow.job_queue_name == queue_name, JobRow.time_limit_reason_since.is_not(None)
            )
        )
    )
    for job_id in sorted(noted - waiting_with.keys()):
        part.row(job_id).time_limit_reason_since = None
    part.preload(list(waiting_with))
    for job_id, reason in waiting_with.items():
        row = part.row(job_id)
        since = row.time_limit_reason_since
        if since is None:
            row.time_limit_reason_since = part.now
            continue
        limit = limits[reason]
        if part.now - since < timedelta(seconds=limit):
            continue
        words = TERMINATED_BY_TIME_LIMIT.format(reason=reason)
        state = record_termination(
            part.session, state, job_id, part.now, f"{words} (RUNNABLE with it for more than {limit} s)"
        )
        row.time_limit_reason_since = None
        # No longer RUNNABLE: admission looks at its waiting task (rejected with this statusReason).
        part.runnable.discard(job_id)
        part.report.time_limited.append(job_id)
    return state
