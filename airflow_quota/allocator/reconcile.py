"""What a job's task instance says about the job: still active, finished, or gone (pure, no I/O).

The allocator reads each open job's task instance once per cycle (``TaskView``) and asks
``task_outcome`` what it means. A job belongs to one try of one task instance (its job id names the
try); that try is over when the task instance is terminal, was cleared (its id rotates), or moved on to
another try. Only then may the ledger finish the job and, when no training job can still run on it,
release its capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

#: Task-instance states in which the try is over (Airflow's TaskInstanceState values).
_ENDED_STATES = {
    "failed": "failed",
    "upstream_failed": "failed: an upstream task failed",
    "skipped": "was skipped",
    "removed": "was removed from its DAG",
    "up_for_retry": "failed and is up for retry",
    "restarting": "was cleared while it ran",
}
#: Task-instance states in which the try goes on (waiting, resumed, running or deferred).
_ACTIVE_STATES = frozenset({"deferred", "scheduled", "queued", "running", "up_for_reschedule"})


class TaskOutcome(StrEnum):
    """What the task instance's state means for the job of one try."""

    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    ENDED = "ended"


@dataclass(frozen=True, slots=True)
class TaskView:
    """The task instance of a job as the cycle read it (``None`` fields: no such task instance)."""

    state: str | None
    try_number: int
    ti_id: str
    #: The trigger it is deferred on (its classpath), when deferred.
    trigger_classpath: str | None = None
    #: When it deferred on that trigger, and whether it did so from a worker run (pid set): such a task
    #: must not be resumed before it has settled (apache/airflow#71580).
    deferred_at: datetime | None = None
    from_worker: bool = False

    def settled(self, now: datetime, settle_time: timedelta) -> bool:
        """Whether resuming it now is safe from the stale "defer-exit" executor event."""
        return not self.from_worker or self.deferred_at is None or self.deferred_at <= now - settle_time


@dataclass(frozen=True, slots=True)
class Outcome:
    outcome: TaskOutcome
    #: For a job that ends: why, in words the job's statusReason can carry.
    reason: str = ""


def task_outcome(job_try_number: int, job_ti_id: str | None, view: TaskView | None) -> Outcome:
    """Whether the try a job belongs to goes on, succeeded, or is over (and why)."""
    if view is None:
        return Outcome(TaskOutcome.ENDED, "Its task instance no longer exists (its DAG run was deleted)")
    if view.try_number != job_try_number or (job_ti_id is not None and view.ti_id != job_ti_id):
        return Outcome(
            TaskOutcome.ENDED,
            f"Its task try {job_try_number} was cleared; the task instance is now at try {view.try_number}",
        )
    if view.state == "success":
        return Outcome(TaskOutcome.SUCCEEDED, "Its task succeeded")
    if view.state in _ACTIVE_STATES:
        return Outcome(TaskOutcome.ACTIVE)
    words = _ENDED_STATES.get(str(view.state), "was cleared" if view.state is None else f"is {view.state}")
    return Outcome(TaskOutcome.ENDED, f"Its task try {job_try_number} {words}")


def is_monitoring(view: TaskView | None, admission_classpath: str) -> bool:
    """Deferred on a trigger other than the admission one: the task watches its training job."""
    return (
        view is not None
        and view.state == "deferred"
        and view.trigger_classpath is not None
        and view.trigger_classpath != admission_classpath
    )
