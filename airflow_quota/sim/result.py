"""What a simulation gives back: its timeline (a ``Step`` per moment, its ``Change``s) and each job's
outcome (``SimulationResult``), or the ``SimulationError`` that stopped it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from airflow_quota.engine.model import JobQueue, JobStatus
from airflow_quota.sim.holds import Hold
from airflow_quota.sim.metrics import Metrics
from airflow_quota.sim.scenario import ScenarioEvent, Settings, format_seconds


class SimulationError(ValueError):
    """The simulation cannot go on: an event that does not apply, or a loop that never settles."""

    def __init__(self, source: str, message: str, *, event: ScenarioEvent | None = None, at: float = 0.0):
        self.source = source
        self.event = event
        self.at = event.at if event is not None else at
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"event {self.event.label}" if self.event is not None else f"at {format_seconds(self.at)}"
        return f"{self.source}: {where}: {self.message}"


class ChangeKind(StrEnum):
    """What happened to a job (or to the configuration) at one moment."""

    SUBMITTED = "submitted"
    GRANTED = "granted"
    RUNNING = "running"
    PREEMPTED = "preempted"
    TERMINATING = "terminating"
    REQUEUED = "requeued"
    FINISHED = "finished"
    FAILED = "failed"
    WAITING = "waiting"
    PRIORITY_UPDATED = "priority updated"
    SHARE_UPDATED = "share updated"
    QUEUE_UPDATED = "queue updated"
    IGNORED = "ignored"


@dataclass(frozen=True, slots=True)
class Change:
    """One thing that happened: ``subject`` is the job (or share, or queue) it happened to.

    ``reason`` is the job's statusReason or a description; ``by`` and ``rule`` name the preemptor and the
    preemption rule; ``units``, ``unit`` and ``borrowed`` describe a grant.
    """

    kind: ChangeKind
    subject: str
    reason: str = ""
    by: str = ""
    rule: str = ""
    units: int = 0
    unit: str = ""
    borrowed: int = 0


@dataclass(frozen=True, slots=True)
class JobView:
    status: JobStatus
    status_reason: str


@dataclass(frozen=True, slots=True)
class Step:
    """A moment at which anything happened: what changed, and every job known so far once it settled."""

    at: float
    changes: tuple[Change, ...]
    jobs: dict[str, JobView]


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """A job at the end; ``started_at`` and ``stopped_at`` are of its latest attempt (None if none).

    ``first_started_at`` is its first grant; ``held_seconds`` the time it held its units over every attempt
    (from each grant until the units were released, or the end of the run); ``lost_unit_seconds`` what its
    completed preemptions lost (instance count x (progress since the last checkpoint + stop time)), the
    same figures ``Metrics.lost_unit_seconds`` sums per share. ``scheduling_priority`` is its last one.
    """

    name: str
    quota_share_name: str
    status: JobStatus
    status_reason: str
    preempted_attempt_count: int
    started_at: float | None
    stopped_at: float | None
    submitted_at: float
    runnable_seconds: float
    scheduling_priority: int = 0
    capacity_unit: str = ""
    instance_count: int = 0
    first_started_at: float | None = None
    held_seconds: float = 0.0
    lost_unit_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class SimulationResult:
    source: str
    settings: Settings
    queue: JobQueue
    steps: tuple[Step, ...]
    jobs: dict[str, JobOutcome]
    metrics: Metrics
    end: float
    #: Every granted attempt in grant order: who held which units when (the report's timeline).
    holds: tuple[Hold, ...] = ()
