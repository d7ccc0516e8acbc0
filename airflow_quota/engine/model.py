"""The engine's plain data: job queues, quota shares, jobs and the decisions a cycle makes.

Everything here is immutable and free of I/O and of Airflow, so the same objects serve the allocator,
the simulator, the benchmarks and a GPU machine that has no Airflow installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

#: AWS Batch's schedulingPriority range; higher is scheduled first.
MIN_PRIORITY = 0
MAX_PRIORITY = 9999
#: AWS Batch's borrowLimit meaning "no limit".
UNLIMITED_BORROW = -1


class SharingStrategy(StrEnum):
    RESERVE = "RESERVE"
    LEND = "LEND"
    LEND_AND_BORROW = "LEND_AND_BORROW"


class ShareState(StrEnum):
    ENABLED = "ENABLED"
    DISABLED = "DISABLED"


class JobStatus(StrEnum):
    """AWS Batch service-job states, the names used everywhere (API, UI, logs, docs)."""

    SUBMITTED = "SUBMITTED"
    RUNNABLE = "RUNNABLE"
    SCHEDULED = "SCHEDULED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    @property
    def holds_capacity(self) -> bool:
        """SCHEDULED, STARTING and RUNNING jobs hold their capacity (and are the preemptable states)."""
        return self in HOLDING_CAPACITY

    @property
    def is_final(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED)


#: The states that hold capacity, and the only ones a job can be preempted in.
HOLDING_CAPACITY = frozenset({JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING})


class PreemptionRule(StrEnum):
    """Why a victim was chosen: the search that found it."""

    #: Search 1: the preemptor's share takes back capacity another share borrowed.
    RECLAIM = "RECLAIM"
    #: Search 2: a higher-priority job displaces strictly lower-priority jobs of its own share.
    IN_SHARE_PRIORITY = "IN_SHARE_PRIORITY"
    #: A job already being stopped whose preemptor is gone is taken over at no cost.
    ADOPT_STOPPING = "ADOPT_STOPPING"


class StopCause(StrEnum):
    PREEMPTED = "PREEMPTED"
    TERMINATED = "TERMINATED"


#: statusReason prefix of a job being terminated; the rest is the reason given to terminate it.
TERMINATING = "Stopping: "


#: statusReason codes AWS Batch uses for a job that can never start.
SERVICE_ENVIRONMENT_MAX_RESOURCE = "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
QUOTA_MANAGEMENT_LIMIT_EXCEEDED = "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED"


@dataclass(frozen=True, slots=True)
class QuotaShare:
    """One team's slice of a job queue: own limits per capacity unit and how it shares them."""

    name: str
    capacity_limits: dict[str, int]
    strategy: SharingStrategy = SharingStrategy.RESERVE
    borrow_limit: int = UNLIMITED_BORROW
    in_share_preemption: bool = False
    state: ShareState = ShareState.ENABLED

    def own_limit(self, unit: str) -> int:
        return self.capacity_limits.get(unit, 0)

    def has_limit_for(self, unit: str) -> bool:
        return unit in self.capacity_limits

    @property
    def lends(self) -> bool:
        return self.strategy is not SharingStrategy.RESERVE

    @property
    def borrows(self) -> bool:
        return self.strategy is SharingStrategy.LEND_AND_BORROW

    def ceiling(self, unit: str) -> int | None:
        """Most this share may use of ``unit``, borrowing included; None means no limit of its own."""
        own = self.own_limit(unit)
        if not self.borrows:
            return own
        if self.borrow_limit == UNLIMITED_BORROW:
            return None
        return own * (100 + self.borrow_limit) // 100


@dataclass(frozen=True, slots=True)
class JobQueue:
    """A job queue: total capacity per unit and the quota shares that divide it."""

    name: str
    capacity: dict[str, int]
    shares: tuple[QuotaShare, ...]

    def share(self, name: str) -> QuotaShare:
        for share in self.shares:
            if share.name == name:
                return share
        raise KeyError(name)

    def share_names(self) -> list[str]:
        return [share.name for share in self.shares]


#: Orders jobs by submission (time, then order of submission) and by start the same way.
OrderKey = tuple[float, int]


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What a user asks for: the fields of AWS Batch's SubmitServiceJob that quotas look at."""

    job_name: str
    quota_share_name: str
    capacity_unit: str
    instance_count: int
    scheduling_priority: int = 0
    preemption_retries_before_termination: int | None = None


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the engine sees it at one moment.

    ``submitted`` is the original submission order and never changes, so a requeued job keeps its place.
    While a job is being stopped it keeps its status (``stop_cause`` is set); a preempted job's units go
    to ``preempted_by`` alone. A waiting preemptor lists the victims it waits for in ``awaiting_victims``.
    """

    job_id: str
    request: JobRequest
    submitted: OrderKey
    status: JobStatus = JobStatus.RUNNABLE
    status_reason: str = ""
    started: OrderKey | None = None
    stop_cause: StopCause | None = None
    preempted_by: str | None = None
    awaiting_victims: frozenset[str] = frozenset()
    preempted_attempt_count: int = 0

    def with_reason(self, status_reason: str) -> Job:
        """This job with another statusReason, copied slot by slot.

        A cycle writes one for nearly every waiting job of a new queue; a frozen dataclass's ``__init__``
        (and so ``dataclasses.replace``) sets each field through ``object.__setattr__``, three times
        slower than the slots' own setters used here.
        """
        copy: Job = _new_object(Job)
        _set_job_id(copy, self.job_id)
        _set_request(copy, self.request)
        _set_submitted(copy, self.submitted)
        _set_status(copy, self.status)
        _set_status_reason(copy, status_reason)
        _set_started(copy, self.started)
        _set_stop_cause(copy, self.stop_cause)
        _set_preempted_by(copy, self.preempted_by)
        _set_awaiting_victims(copy, self.awaiting_victims)
        _set_preempted_attempt_count(copy, self.preempted_attempt_count)
        return copy

    @property
    def share_name(self) -> str:
        return self.request.quota_share_name

    @property
    def unit(self) -> str:
        return self.request.capacity_unit

    @property
    def count(self) -> int:
        return self.request.instance_count

    @property
    def priority(self) -> int:
        return self.request.scheduling_priority

    @property
    def is_stopping(self) -> bool:
        return self.stop_cause is not None

    @property
    def holds_reservation(self) -> bool:
        """A RUNNABLE preemptor that already owns its capacity and waits for its victims to stop."""
        return self.status is JobStatus.RUNNABLE and bool(self.awaiting_victims)

    @property
    def counts_in_share(self) -> bool:
        """Counted in its share's usage: holding capacity and never promised to a preemptor, or reserving.

        From a preemption decision on, a victim counts in its preemptor's share instead, and never again
        in its own, even if that preemptor is terminated before the victim has stopped. A job being
        terminated still counts in its own share until it has stopped.
        """
        if self.status.holds_capacity:
            return self.preempted_by is None
        return self.holds_reservation


_new_object = object.__new__
#: The setters of Job's slots, for ``Job.with_reason``; a field added to Job must be copied there too.
_JOB_FIELDS = (
    "job_id",
    "request",
    "submitted",
    "status",
    "status_reason",
    "started",
    "stop_cause",
    "preempted_by",
    "awaiting_victims",
    "preempted_attempt_count",
)
assert Job.__slots__ == _JOB_FIELDS, "Job.with_reason must copy every field of Job"
(
    _set_job_id,
    _set_request,
    _set_submitted,
    _set_status,
    _set_status_reason,
    _set_started,
    _set_stop_cause,
    _set_preempted_by,
    _set_awaiting_victims,
    _set_preempted_attempt_count,
) = (Job.__dict__[name].__set__ for name in _JOB_FIELDS)


@dataclass(frozen=True, slots=True)
class QueueState:
    """One job queue and every job the engine must consider in it (final jobs may be left out)."""

    queue: JobQueue
    jobs: dict[str, Job] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Grant:
    """Start ``job_id`` on ``instance_count`` units of ``capacity_unit``; ``borrowed`` of them borrowed."""

    job_id: str
    capacity_unit: str
    instance_count: int
    borrowed: int


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop ``victim_ids`` so that ``preemptor_id`` gets their capacity once they have stopped."""

    preemptor_id: str
    victim_ids: tuple[str, ...]
    rule: PreemptionRule
    capacity_unit: str


Decision = Grant | Preemption


@dataclass(frozen=True, slots=True)
class CyclePlan:
    """What one allocation cycle decided, in order, and the state it leads to."""

    decisions: tuple[Decision, ...]
    state: QueueState
