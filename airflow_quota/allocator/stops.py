"""Stopping training jobs after a cycle commits: what to ask, what the backend answered, what is remembered.

A cycle lists the SageMaker training jobs of its victims and orphans (``StopRequest``); once it has
committed, its host asks each one to stop (``ask_to_stop``, by default ``stop_through_backend``) and keeps
the ones found no longer running (``StoppedTrainingJobs``) for the next cycle, which releases their
capacity.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from airflow_quota.protocol import TrainingJobRecord

log = logging.getLogger(__name__)


class StopAnswer(StrEnum):
    """What a training job's backend answered when the allocator asked it to stop (after a commit)."""

    #: Still running (SageMaker: ``InProgress``, ``Stopping``): asked again after the next cycle.
    RUNNING = "running"
    #: Ended without completing (SageMaker: ``Stopped``, ``Failed``): its capacity is free.
    STOPPED = "stopped"
    #: Completed its work before the stop reached it: free, but a victim's task reports its success.
    COMPLETED = "completed"
    #: No training job of that name: never created, or not yet (its task may be creating it now).
    MISSING = "missing"


#: Asks a training job to stop, without waiting, and says what it found (may be asked again).
JobStopper = Callable[[TrainingJobRecord], StopAnswer]
#: SageMaker's ``TrainingJobStatus`` -> the answer (no job of the name: ``StopAnswer.MISSING``).
_SAGEMAKER_ANSWERS = {
    "InProgress": StopAnswer.RUNNING,
    "Stopping": StopAnswer.RUNNING,
    "Stopped": StopAnswer.STOPPED,
    "Failed": StopAnswer.STOPPED,
    "Completed": StopAnswer.COMPLETED,
}


class StoppedTrainingJobs:
    """The training jobs a host asked to stop after its last committed cycle and found no longer running.

    ``request_stops`` fills it after each committed cycle with that cycle's answers only (so it holds at
    most one cycle's stop requests, and forgets a job as soon as no cycle asks about it); the next cycle
    reads it to release an orphan's or a victim's capacity (``confirmed_since``). What counts as "no
    longer running" depends on who asked: for an orphan any answer but ``RUNNING``, for a victim only
    ``STOPPED`` (``StopRequest.counts``). A host keeps one for as long as its process runs
    (``allocator.host``). Losing it is safe: a restart, or another allocator running the next cycle, only
    means that cycle lists the job again and it is asked to stop once more (or a victim's task reports).
    """

    __slots__ = ("_asked_at",)

    def __init__(self) -> None:
        #: Training job name -> the time (``now``) of the cycle whose stop request it answered.
        self._asked_at: dict[str, datetime] = {}

    def remember(self, names: Iterable[str], asked_at: datetime) -> None:
        """Replace what is remembered with the jobs found stopped when a cycle at ``asked_at`` asked."""
        self._asked_at = dict.fromkeys(names, asked_at)

    def confirmed_since(self, name: str, since: datetime) -> bool:
        """Whether training job ``name`` was found no longer running when asked by a cycle at or after
        ``since`` (an answer from before an orphan was first seen, or before a victim was told to stop,
        does not count: a job asked before it was created answers "not running")."""
        asked_at = self._asked_at.get(name)
        return asked_at is not None and asked_at >= since


@dataclass(frozen=True, slots=True)
class StopRequest:
    """A training job the host asks to stop once the cycle has committed, and the job it runs for."""

    job_id: str
    record: TrainingJobRecord
    #: True: a job being stopped (preempted or terminated) whose task goes on and also waits for the
    #: stop; False: an orphan (its task try is over).
    victim: bool

    def counts(self, answer: StopAnswer) -> bool:
        """Whether ``answer`` frees the capacity. A victim's only when its job is found stopped: a job
        that completed first is its task's success to report (not a preemption), and a victim's job
        missing may be one its task is creating right now. An orphan's task is over: any ended job, or
        none, frees it."""
        return answer is StopAnswer.STOPPED if self.victim else answer is not StopAnswer.RUNNING


def ask_to_stop(stopper: JobStopper | None, record: TrainingJobRecord) -> StopAnswer:
    """Ask a training job to stop through ``stopper`` (by default ``stop_through_backend``); what it found."""
    try:
        return (stopper or stop_through_backend)(record)
    except Exception:  # an unreachable backend must not stop the host; asked again later or by the task
        log.exception("Could not ask training job %s to stop", record.get("name"))
        return StopAnswer.RUNNING


def stop_through_backend(record: TrainingJobRecord) -> StopAnswer:
    """Ask a SageMaker training job to stop (no wait) through the process's cached client; what it found."""
    if record.get("backend") != "sagemaker":
        return StopAnswer.MISSING  # only SageMaker jobs are listed: nothing the allocator could stop
    from airflow_quota.backends.sagemaker import request_training_job_stop

    status = request_training_job_stop(record.get("aws_conn_id"), record.get("region_name"), record["name"])
    if status is None:
        return StopAnswer.MISSING
    return _SAGEMAKER_ANSWERS.get(status, StopAnswer.RUNNING)
