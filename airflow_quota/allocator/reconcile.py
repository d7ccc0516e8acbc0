"""What a job's task instance says about the job: still active, finished, or gone (pure, no I/O).

The allocator reads each open job's task instance once per cycle (``TaskView``) and asks
``task_outcome`` what it means. A job belongs to one try of one task instance (its job id names the
try); that try is over when the task instance is terminal, archived its try (its id rotates: a failure
with retries left, a clear, a reset by a restarted scheduler), or moved on to another try. Only then may
the ledger finish the job and, when no training job can still run on it, release its capacity. The
reason says what ended the try, from the task instance and the events Airflow logged for that try.
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
#: ... and those of a try whose end needs no explanation (it goes on, or succeeded).
UNEXPLAINED_STATES = _ACTIVE_STATES | {"success"}

#: Events Airflow writes to its ``log`` table for one try of a task instance that tell how the try ended:
#: the scheduler's (no heartbeat; the executor saw the task's process end while it ran) and the final
#: state the task runner or the scheduler set (``failed``, ``up_for_retry``, ``success``).
HEARTBEAT_TIMEOUT = "heartbeat timeout"
STATE_MISMATCH = "state mismatch"
TRY_EVENTS = (HEARTBEAT_TIMEOUT, STATE_MISMATCH, "failed", "up_for_retry", "success")
_RUNNER_LOST = {
    HEARTBEAT_TIMEOUT: (
        "lost its task runner: no heartbeat within the scheduler's timeout (its worker or task runner died)"
    ),
    STATE_MISMATCH: "lost its task runner: its process ended while the task ran (killed, or out of memory)",
}


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
    #: Of the job's own try, once it is over: the ``TRY_EVENTS`` Airflow logged for it ...
    try_events: frozenset[str] = frozenset()
    #: ... and whether the scheduler that queued it is gone (a restarted scheduler resets the tries it
    #: cannot adopt: the task instance moves on without any event of that try).
    scheduler_gone: bool = False

    def settled(self, now: datetime, settle_time: timedelta) -> bool:
        """Whether resuming it now is safe from the stale "defer-exit" executor event."""
        return not self.from_worker or self.deferred_at is None or self.deferred_at <= now - settle_time


@dataclass(frozen=True, slots=True)
class Outcome:
    outcome: TaskOutcome
    #: For a job that ends: why, in words the job's statusReason can carry.
    reason: str = ""
    #: The try was cleared (by a user, the REST API, or the allocator itself: ``cleared_by_allocator``).
    cleared: bool = False


def cleared_by_allocator(job_try_number: int, stop_deadline: timedelta) -> Outcome:
    """The try of a job the allocator cleared because it had not stopped ``stop_deadline`` after it was
    told to (the last resort)."""
    return Outcome(
        TaskOutcome.ENDED,
        f"Its task try {job_try_number} was cleared by the quota allocator: it had not stopped within "
        f"{stop_deadline.total_seconds():g} s of being told to (stop_deadline)",
        cleared=True,
    )


def task_outcome(job_try_number: int, job_ti_id: str | None, view: TaskView | None) -> Outcome:
    """Whether the try a job belongs to goes on, succeeded, or is over (and why).

    The try is the task instance's current one while its try number and id are the job's. Airflow gives
    the task instance a new id as soon as a try is archived (a failure with retries left, a clear, a reset
    by a restarted scheduler), and a new try number when it schedules the next try; what ended the job's
    try then comes from the events Airflow logged for it (``TaskView.try_events``).
    """
    if view is None:
        return Outcome(TaskOutcome.ENDED, "Its task instance no longer exists (its DAG run was deleted)")
    current = is_current_try(job_try_number, job_ti_id, view.try_number, view.ti_id)
    events = view.try_events
    if (view.state == "success" and current) or (not current and "success" in events):
        return Outcome(TaskOutcome.SUCCEEDED, "Its task succeeded")
    if current and view.state in _ACTIVE_STATES:
        return Outcome(TaskOutcome.ACTIVE)
    lost = next((words for event, words in _RUNNER_LOST.items() if event in events), None)
    if current:
        words = lost or _ENDED_STATES.get(str(view.state), f"is {view.state}")
        return Outcome(TaskOutcome.ENDED, f"Its task try {job_try_number} {words}")
    if lost is not None:
        return Outcome(
            TaskOutcome.ENDED, f"Its task try {job_try_number} {lost}{_next(job_try_number, view)}"
        )
    words, cleared = _archived(view)
    return Outcome(
        TaskOutcome.ENDED, f"Its task try {job_try_number} {words}{_next(job_try_number, view)}", cleared
    )


def is_current_try(job_try_number: int, job_ti_id: str | None, try_number: int, ti_id: str) -> bool:
    """Whether the task instance (at ``try_number``, id ``ti_id``) is still on the job's own try."""
    return try_number == job_try_number and (job_ti_id is None or ti_id == job_ti_id)


def _archived(view: TaskView) -> tuple[str, bool]:
    """What ended a try the task instance has moved on from, when no runner was lost; whether a clear."""
    if {"failed", "up_for_retry"} & view.try_events or view.state == "up_for_retry":
        return "failed", False  # reported by its runner, or by the triggerer (no event): never a clear
    if view.state == "restarting":
        return "was cleared while it ran", True
    if view.scheduler_gone:
        return "was reset: the scheduler running it stopped and the next one could not adopt it", False
    return "was cleared", True


def _next(job_try_number: int, view: TaskView) -> str:
    """Where the task instance is now, after the job's try."""
    if view.try_number > job_try_number:
        return f"; the task instance is now at try {view.try_number}"
    if view.state == "up_for_retry":
        return "; it is up for retry"
    return ""


def is_monitoring(view: TaskView | None, admission_classpath: str) -> bool:
    """Deferred on a trigger other than the admission one: the task watches its training job."""
    return (
        view is not None
        and view.state == "deferred"
        and view.trigger_classpath is not None
        and view.trigger_classpath != admission_classpath
    )
