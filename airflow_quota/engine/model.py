"""The engine's plain data: job queues, quota shares, jobs and the decisions a cycle makes.

Everything here is immutable and free of I/O and of Airflow, so the same objects serve the allocator,
the simulator, the benchmarks and a GPU machine that has no Airflow installed.
"""

from __future__ import annotations

from collections.abc import Mapping
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


class StopCause(StrEnum):
    PREEMPTED = "PREEMPTED"
    TERMINATED = "TERMINATED"


#: statusReason prefix of a job being terminated; the rest is the reason given to terminate it.
TERMINATING = "Stopping: "


#: statusReason codes AWS Batch uses for a job that can never start.
SERVICE_ENVIRONMENT_MAX_RESOURCE = "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
QUOTA_MANAGEMENT_LIMIT_EXCEEDED = "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED"


@dataclass(frozen=True, slots=True)
class PreemptAtCheckpoint:
    """Our ``preemptAtCheckpoint`` extension of a share (engine/extensions.py): a preemption of its jobs
    waits, at most ``maximum_wait_seconds``, for their next checkpoint (+ ``margin_seconds``)."""

    #: How often the share's trainings checkpoint (the admin declares it): seconds.
    checkpoint_interval_seconds: float
    #: The longest a preemptor waits for a victim's next checkpoint (+ the margin).
    maximum_wait_seconds: float
    #: How long after a predicted checkpoint the preemption is made (the write, and the allocator hearing
    #: of it); a victim whose last checkpoint, reported or predicted, is no older counts as at one.
    margin_seconds: float = 30.0


@dataclass(frozen=True, slots=True)
class QuotaShare:
    """One team's slice of a job queue: own limits per capacity unit and how it shares them."""

    name: str
    capacity_limits: dict[str, int]
    strategy: SharingStrategy = SharingStrategy.RESERVE
    borrow_limit: int = UNLIMITED_BORROW
    in_share_preemption: bool = False
    state: ShareState = ShareState.ENABLED
    # Our extensions (issue 37), off by default: the quota file's ``extensions:`` block of the share
    # (engine/extensions.py has the rules).
    #: When this share's jobs preempt, victims of one rank lose the least work first.
    checkpoint_aware_victims: bool = False
    #: This share's jobs are not victims until they have run this many seconds (0: off).
    minimum_run_seconds: float = 0.0
    #: Once this share's front job on a unit has waited this many seconds, capacity its share frees there
    #: is held for it (None: off).
    starvation_limit_seconds: float | None = None
    #: A preemption of this share's jobs waits for their next checkpoint, within a bound (None: off).
    preempt_at_checkpoint: PreemptAtCheckpoint | None = None

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
    While a job is being stopped it keeps its status (``stop_cause`` is set) and its units; a preempted
    job names its preemptor in ``preempted_by``, which gets its units first once it has stopped. A waiting
    job that will take units of jobs being stopped (its victims, or spare units of stops under way) lists
    them in ``awaiting_victims``, each with the units it gives the job, as the decision split them (a
    preemptor lists each of its victims, with 0 units where it needs none): it holds a reservation
    (``engine.usage`` says what it counts). The split is kept, not worked out again: a promise made stays
    the promise kept.
    ``last_checkpoint``: when its training last reported a checkpoint; what a preemption loses is counted
    from it (``engine.extensions.lost_unit_seconds``).
    """

    job_id: str
    request: JobRequest
    submitted: OrderKey
    status: JobStatus = JobStatus.RUNNABLE
    status_reason: str = ""
    started: OrderKey | None = None
    stop_cause: StopCause | None = None
    preempted_by: str | None = None
    awaiting_victims: Mapping[str, int] = field(default_factory=dict)
    preempted_attempt_count: int = 0
    #: When its training last saved a checkpoint (engine time; None: never, as far as we know).
    last_checkpoint: float | None = None

    def with_reason(self, status_reason: str) -> Job:
        """This job with another statusReason."""
        copy = self._copy()
        _set_status_reason(copy, status_reason)
        return copy

    def granted(self, started: OrderKey) -> Job:
        """This job granted by a cycle: SCHEDULED from ``started``, no statusReason, reserving nothing."""
        copy = self._copy()
        _set_status(copy, JobStatus.SCHEDULED)
        _set_status_reason(copy, "")
        _set_started(copy, started)
        _set_awaiting_victims(copy, {})
        return copy

    def being_stopped(self, cause: StopCause, preempted_by: str, status_reason: str) -> Job:
        """This job chosen as a victim: being stopped for ``preempted_by``."""
        copy = self._copy()
        _set_stop_cause(copy, cause)
        _set_preempted_by(copy, preempted_by)
        _set_status_reason(copy, status_reason)
        return copy

    def reserving(self, claims: Mapping[str, int]) -> Job:
        """This job waiting for the stops ``claims`` names, each giving it that many units."""
        copy = self._copy()
        _set_awaiting_victims(copy, claims)
        return copy

    def _copy(self) -> Job:
        """This job copied slot by slot, for the copies a cycle makes (``with_reason``, ``granted``...).

        A frozen dataclass's ``__init__`` (and so ``dataclasses.replace``) sets each field through
        ``object.__setattr__``, three times slower than the slots' own setters used here.
        """
        copy: Job = _new_object(Job)
        _set_job_id(copy, self.job_id)
        _set_request(copy, self.request)
        _set_submitted(copy, self.submitted)
        _set_status(copy, self.status)
        _set_status_reason(copy, self.status_reason)
        _set_started(copy, self.started)
        _set_stop_cause(copy, self.stop_cause)
        _set_preempted_by(copy, self.preempted_by)
        _set_awaiting_victims(copy, self.awaiting_victims)
        _set_preempted_attempt_count(copy, self.preempted_attempt_count)
        _set_last_checkpoint(copy, self.last_checkpoint)
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
        """A RUNNABLE job that already owns its capacity and waits for jobs being stopped to release it."""
        return self.status is JobStatus.RUNNABLE and bool(self.awaiting_victims)


_new_object = object.__new__
#: The setters of Job's slots, for ``Job._copy``; a field added to Job must be copied there too.
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
    "last_checkpoint",
)
assert Job.__slots__ == _JOB_FIELDS, "Job._copy must copy every field of Job"
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
    _set_last_checkpoint,
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


@dataclass(frozen=True, slots=True)
class Promise:
    """``job_id`` gets spare units of the stops under way ``stop_ids`` (units their preemptors do not
    need) and waits for those stops instead of preempting anyone."""

    job_id: str
    stop_ids: tuple[str, ...]
    capacity_unit: str


Decision = Grant | Preemption | Promise


def decided_job(decision: Decision) -> str:
    """The job a decision is for: the one granted, preempting or promised units."""
    return decision.preemptor_id if isinstance(decision, Preemption) else decision.job_id


@dataclass(frozen=True, slots=True)
class CyclePlan:
    """What one allocation cycle decided, in order, and the state it leads to.

    The state comes in two parts, so that a cycle does not copy a frozen ``Job`` for each statusReason
    it rewrites (nearly every waiting job's, in a new queue's first cycle): ``decided``, the jobs as the
    decisions left them, and ``status_reasons``, the new statusReason of each RUNNABLE job whose reason
    the cycle changed (job id -> reason; the ``decided`` job still carries its old one). ``state`` is the
    two folded into one ``QueueState``, built on first use; readers that only need what changed (the
    ledger) read the parts.
    """

    decisions: tuple[Decision, ...]
    decided: QueueState
    status_reasons: Mapping[str, str] = field(default_factory=dict)
    #: Waiting jobs whose preemption our extensions put off (minimumRunSeconds, preemptAtCheckpoint): job
    #: id -> from when it may be made (a cycle should run then; the statusReason says so too).
    deferred: Mapping[str, float] = field(default_factory=dict)
    _state: list[QueueState] = field(default_factory=list, init=False, repr=False, compare=False)

    @property
    def state(self) -> QueueState:
        """The state the cycle leads to: ``decided`` with ``status_reasons`` applied."""
        if not self._state:
            if self.status_reasons:
                jobs = dict(self.decided.jobs)
                for job_id, reason in self.status_reasons.items():
                    jobs[job_id] = jobs[job_id].with_reason(reason)
                self._state.append(QueueState(self.decided.queue, jobs))
            else:
                self._state.append(self.decided)
        return self._state[0]

    def changed_jobs(self, before: QueueState) -> dict[str, Job]:
        """The jobs of ``state`` that differ from ``before`` (by job id), without building all of it."""
        changed = {
            job_id: job
            for job_id, job in self.decided.jobs.items()
            if (old := before.jobs.get(job_id)) is not job and old != job
        }
        for job_id, reason in self.status_reasons.items():
            changed[job_id] = (changed.get(job_id) or self.decided.jobs[job_id]).with_reason(reason)
        return changed
