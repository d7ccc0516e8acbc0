"""What one allocation cycle did (``CycleReport``), for its host, its metrics and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from airflow_quota.allocator.checkpoints import CheckpointListing
from airflow_quota.allocator.stops import StopRequest
from airflow_quota.engine.model import QueueState


@dataclass(frozen=True, slots=True)
class Lease:
    """A grant applied: the task instance resumed and the payload its ``next_method`` receives."""

    job_id: str
    ti_id: str
    payload: dict[str, Any]


@dataclass(slots=True)
class CycleReport:
    """What one cycle did. ``skipped`` cycles did nothing (another allocator holds the lock)."""

    skipped: bool = False
    #: The cycle's ``now``; None when it was skipped.
    ran_at: datetime | None = None
    submitted: list[str] = field(default_factory=list)
    #: Requests new to the ledger left deferred for a later cycle (beyond ``max_new_requests``).
    backlog: list[str] = field(default_factory=list)
    granted: list[Lease] = field(default_factory=list)
    #: Victims chosen this cycle, by preemptor.
    preempted: dict[str, list[str]] = field(default_factory=dict)
    #: Preemptions by rule (RECLAIM, IN_SHARE_PRIORITY): victims counted.
    preempted_by_rule: dict[str, int] = field(default_factory=dict)
    #: Jobs told to stop this cycle (victims, terminated jobs, and re-sent signals).
    signalled: list[str] = field(default_factory=list)
    #: SageMaker training jobs the host asks to stop once the cycle has committed (``request_stops``),
    #: every cycle until it finds them stopped: those of jobs being stopped (victims of a preemption or a
    #: termination) from the decision on, so a stop starts at once and the capacity is free as soon as
    #: the allocator finds the job ``Stopped`` (the task also waits for it and reports it, whichever is
    #: first), and those of orphans not yet known to be stopped.
    stop_requests: list[StopRequest] = field(default_factory=list)
    #: Filled by ``request_stops`` after the commit: the victims (job ids) whose training job it found
    #: stopped. The next cycle releases their capacity; a host runs it at once when this is not empty.
    victims_found_stopped: list[str] = field(default_factory=list)
    #: Running SageMaker training jobs whose checkpoint prefix the host lists once the cycle has
    #: committed, when due (``checkpoints.list_checkpoints``): what the next cycles copy to the ledger.
    checkpoint_listings: list[CheckpointListing] = field(default_factory=list)
    #: Jobs whose stop completed this cycle (requeued, or failed when out of retries or terminated):
    #: reported by their task, or their training job found stopped by the allocator.
    stopped: list[str] = field(default_factory=list)
    #: Granted jobs whose task gave its lease back because AWS answered with a capacity error (a
    #: CreateTrainingJob refused, a training job failed with ``CapacityError``): requeued at their
    #: place, capacity released, no preempted attempt counted.
    requeued: list[str] = field(default_factory=list)
    #: Waiting jobs not granted this cycle because their backoff after a capacity error has not ended
    #: (their request's ``not_before``).
    backing_off: list[str] = field(default_factory=list)
    #: RUNNABLE jobs terminated this cycle by their queue's ``jobStateTimeLimitActions`` (time_limits.py).
    time_limited: list[str] = field(default_factory=list)
    #: Jobs whose task try ended this cycle: finished in the ledger, capacity released.
    finished: list[str] = field(default_factory=list)
    #: Jobs whose task ended while a training job may still run on their capacity: held until it stopped.
    orphans: list[str] = field(default_factory=list)
    #: A try's capacity and training job taken over by its retry: {previous job: retry job}.
    handed_over: dict[str, str] = field(default_factory=dict)
    #: Tasks cleared because they did not stop within the stop deadline.
    cleared: list[str] = field(default_factory=list)
    #: Requests that can never be granted, by job id: why (their task was resumed with a rejection).
    rejected: dict[str, str] = field(default_factory=dict)
    #: Granted or rejected but deferred from a worker less than the settle time ago: resumed by a later cycle.
    settling: list[str] = field(default_factory=list)
    #: Granted in the ledger but no claimed task instance to resume (picked up again next cycle).
    unresumed: list[str] = field(default_factory=list)
    #: Job queues whose state the cycle ended with, for metrics: the jobs as its decisions left them (the
    #: waiting jobs' new statusReasons are in the ledger, not here: ``CyclePlan.decided``).
    states: dict[str, QueueState] = field(default_factory=dict)
    #: Job queues whose part of the cycle failed, and why: rolled back alone (nothing of it was written,
    #: its tasks keep waiting), the other queues' parts kept; the next cycle tries it again.
    failed_queues: dict[str, str] = field(default_factory=dict)
    #: Job queues whose state kept since the last cycle differed from the ledger when checked
    #: (``kept_state``): logged, and read whole again.
    kept_state_mismatches: list[str] = field(default_factory=list)
    #: Job queues this cycle took from the state kept since the last one (the others it read whole).
    queues_kept: list[str] = field(default_factory=list)
    #: Job queues this cycle found as the last one left them, with the same waiting tasks, after a plan
    #: that decided nothing: not planned again (``cycle._allocate_queue``).
    queues_unchanged: list[str] = field(default_factory=list)

    def undo_to(self, earlier: CycleReport) -> None:
        """Make this report again what ``earlier`` (a copy of it taken before) says."""
        for each in fields(self):
            setattr(self, each.name, getattr(earlier, each.name))

    def add(self, part: CycleReport) -> None:
        """Add one job queue's part of the cycle: its lists and mappings, its preemption counts summed."""
        for each in fields(self):
            mine, theirs = getattr(self, each.name), getattr(part, each.name)
            if isinstance(mine, list):
                mine.extend(theirs)
            elif each.name == "preempted_by_rule":
                for rule, victims in theirs.items():
                    mine[rule] = mine.get(rule, 0) + victims
            elif isinstance(mine, dict):
                mine.update(theirs)


def first_line(error: BaseException) -> str:
    """What went wrong, in one line: a database error's own message, without the statement and its
    parameters (SQLAlchemy adds them, and they can be long), else the exception's type and message."""
    cause = getattr(error, "orig", None) or error
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0] if lines else ''}"[:500]
