"""The REST API's request and response bodies, with AWS Batch's field names (they make the OpenAPI schema)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)

from airflow_quota.engine.config import JobRequestError, validate_scheduling_priority
from airflow_quota.engine.model import MAX_PRIORITY, MIN_PRIORITY
from airflow_quota.ledger.lifecycle import TERMINATION_REASON_LENGTH
from airflow_quota.ledger.models import JOB_ID_LENGTH, NAME_LENGTH
from airflow_quota.ledger.timeline import MAX_TIMELINE_JOBS


def without_nul(text: str) -> str:
    """Refuse a NUL character: no database column can hold one (PostgreSQL refuses the whole statement)."""
    if "\x00" in text:
        raise ValueError("must not contain a NUL character (\\x00): remove it")
    return text


def scheduling_priority(value: object) -> int:
    """A new schedulingPriority: a JSON integer (not "5" or true) in range, with a job request's message."""
    try:
        return validate_scheduling_priority(value, "REST API")
    except JobRequestError as error:
        raise ValueError("; ".join(issue.message for issue in error.issues)) from None


#: A job queue or quota share name, as the ledger's columns hold it.
Name = Annotated[str, StringConstraints(max_length=NAME_LENGTH), AfterValidator(without_nul)]
#: A job id (dag_id/run_id/task_id/map_index/try_number), as the ledger's column holds it.
JobId = Annotated[str, StringConstraints(max_length=JOB_ID_LENGTH), AfterValidator(without_nul)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CapacityLimit(_Body):
    capacityUnit: str = Field(description="An instance type (ml.p4d.24xlarge) or any unit, e.g. local-gpu")
    maxCapacity: int = Field(description="Instances of that unit")


class CapacityUsage(_Body):
    capacityUnit: str
    quantity: int | float = Field(description="Instances of that unit (AWS Batch may send fractions)")


#: Who schedules a job queue: our allocator, or AWS Batch (the quota file's ``scheduler``).
Scheduler = Annotated[
    Literal["AIRFLOW", "AWS_BATCH"],
    Field(description="Who schedules the job queue: AIRFLOW (our allocator) or AWS_BATCH (AWS Batch itself)"),
]


class JobQueue(_Body):
    jobQueueName: str
    capacityLimits: list[CapacityLimit] = Field(description="The queue's total capacity per unit")
    revision: int = Field(description="Increases with every applied change to the queue or its shares")
    updatedAt: datetime
    quotaShareNames: list[str] = Field(description="Its quota shares, in quota-file order")
    scheduler: Scheduler


class JobQueueList(_Body):
    jobQueues: list[JobQueue]


class Lending(_Body):
    quotaShareName: str | None = Field(
        description="The other share; null for queue capacity that no share owns (borrowed only)"
    )
    units: int


class ShareUnitUsage(_Body):
    """One share on one capacity unit. ``limit = own + lent + idle``; ``used = own + borrowed``."""

    quotaShareName: str
    capacityUnit: str
    limit: int = Field(description="The share's own maxCapacity for the unit")
    ceiling: int = Field(description="Most it may hold, borrowing included (at most the queue's capacity)")
    used: int = Field(description="Units counting against the share now (own + borrowed)")
    own: int = Field(description="Units used within its own limit")
    borrowed: int = Field(description="Units used above its own limit: other shares' idle capacity")
    borrowedFrom: list[Lending] = Field(
        description="Whom the borrowed units come from (lending is pooled: an attribution, see docs/api.md)"
    )
    lent: int = Field(description="Units of its own limit other shares use now")
    lentTo: list[Lending] = Field(description="Who uses the lent units")
    idle: int = Field(description="Units of its own limit nobody uses")
    stopping: int = Field(description="Units still held by its jobs being stopped (preempted or terminated)")
    running: int = Field(description="RUNNING jobs of the share on this unit")
    runnable: int = Field(description="RUNNABLE (waiting) jobs of the share on this unit")


class ResourceSharingConfiguration(_Body):
    """As AWS Batch's DescribeQuotaShare nests it: ``borrowLimit`` only for LEND_AND_BORROW."""

    strategy: str = Field(description="RESERVE, LEND or LEND_AND_BORROW")
    borrowLimit: int | None = Field(
        default=None,
        exclude_if=lambda limit: limit is None,
        description="LEND_AND_BORROW only (absent otherwise): % of its own limit it may borrow per unit, "
        "-1 = no limit",
    )


class PreemptionConfiguration(_Body):
    inSharePreemption: str = Field(description="ENABLED or DISABLED")


class QuotaShare(_Body):
    """A quota share in AWS Batch's DescribeQuotaShare nesting, with the job queue's name and its usage."""

    jobQueueName: str
    quotaShareName: str
    capacityLimits: list[CapacityLimit]
    resourceSharingConfiguration: ResourceSharingConfiguration
    preemptionConfiguration: PreemptionConfiguration
    state: str = Field(description="ENABLED or DISABLED")
    scheduler: Scheduler
    capacityUsage: list[CapacityUsage] = Field(
        description="Capacity its jobs use now, per unit (AWS_BATCH: GetJobQueueSnapshot's)"
    )
    usage: list[ShareUnitUsage] = Field(
        description="Per capacity unit: own, borrowed, lent, idle (AIRFLOW only: empty for AWS_BATCH)"
    )
    error: str | None = Field(
        default=None,
        description="AWS_BATCH: why AWS Batch could not be asked (the configuration shown is then the "
        "applied quota file's)",
    )


class QuotaShareList(_Body):
    quotaShares: list[QuotaShare]


class UnitUsage(_Body):
    """One unit of a queue laid out by owner: the shares' limits plus unowned capacity make the total."""

    capacityUnit: str
    capacity: int = Field(description="The queue's total capacity for the unit")
    unowned: int = Field(description="Capacity no share owns")
    unownedLentTo: list[Lending] = Field(description="Who borrows the unowned capacity")
    unownedIdle: int
    overdraft: int = Field(description="Borrowed units no lendable capacity covers (a limit was lowered)")
    quotaShares: list[ShareUnitUsage] = Field(description="Each share using or owning the unit")
    stopping: int = Field(
        description="Units held by jobs being stopped (preempted or terminated) until they stop"
    )
    free: int = Field(
        description="Units no job holds now (idle minus units still held by jobs being stopped)"
    )


class Lease(_Body):
    capacityUnit: str | None = Field(description="The unit held; null while the job holds nothing")
    instanceCount: int
    borrowed: int = Field(description="How many of instanceCount are borrowed")
    devices: list[int] | None = Field(
        description="Local GPUs: the device indices held (CUDA_VISIBLE_DEVICES)"
    )


class ServiceResourceId(_Body):
    """AWS Batch's name for what an attempt ran: its SageMaker training job's ARN."""

    name: str = Field(description="TrainingJobArn")
    value: str


class PreemptedAttempt(_Body):
    """One preempted attempt, in AWS Batch's recentPreemptedAttempts words, and ours beside them."""

    model_config = ConfigDict(extra="allow")

    serviceResourceId: ServiceResourceId | None = Field(
        default=None, description="The attempt's training job (its ARN), when the task reported it"
    )
    attempt: int | None = None
    startedAt: str | None = None
    stoppedAt: str | None = None
    preemptedBy: str | None = None
    rule: str | None = None
    statusReason: str | None = None
    lostUnitSeconds: float | None = Field(
        default=None,
        description="GPU-seconds the preemption lost: units x the time from the attempt's last checkpoint "
        "(or its start, when it never checkpointed) to the preemption's decision",
    )


class PreemptionSummary(_Body):
    preemptedAttemptCount: int = Field(description="Completed preemptions of this job")
    recentPreemptedAttempts: list[PreemptedAttempt] = Field(description="The last 10, oldest first")
    beingPreemptedBy: str | None = Field(
        description="While it is being stopped for a preemption: the job that preempted it"
    )
    lastPreemptedAt: datetime | None = Field(description="When the latest preemption of it was decided")
    lastPreemptedBy: str | None = Field(description="The job whose admission preempted it, latest")
    lastPreemptionRule: str | None = None


class TaskInstanceLink(_Body):
    dagId: str
    runId: str
    taskId: str
    mapIndex: int
    tryNumber: int
    path: str = Field(description="The task instance's page in the Airflow UI, relative to its base URL")


class TrainingJob(_Body):
    backend: str = Field(description="sagemaker or local")
    name: str
    state: str = Field(description="launched or ended")
    consoleUrl: str | None = Field(description="SageMaker: the training job in the AWS console")
    arn: str | None = Field(
        default=None, description="SageMaker: its TrainingJobArn, when the task reported it"
    )


class Job(_Body):
    jobId: str
    displayName: str = Field(
        description="The job as people see it everywhere (page, CLI, events): `dag / task`, `[map index]` "
        "for a mapped task, `#try` after the first try (airflow_quota.job_names)"
    )
    runLabel: str = Field(
        description="Its DAG run, short: shown as `displayName (run runLabel)` where jobs of two runs of "
        "one DAG are shown together"
    )
    jobName: str
    jobQueueName: str
    quotaShareName: str
    status: str = Field(description="SUBMITTED, RUNNABLE, SCHEDULED, STARTING, RUNNING, SUCCEEDED, FAILED")
    statusReason: str = Field(description="Why it waits or failed, in plain words; empty while it runs")
    schedulingPriority: int
    capacityUnit: str
    instanceCount: int
    position: int | None = Field(description="A RUNNABLE job's place in its share's order (1 is next)")
    submittedAt: datetime
    scheduledAt: datetime | None = Field(
        description="When the current attempt (the last, once finished) was granted: it became SCHEDULED"
    )
    startedAt: datetime | None = Field(
        description="The same moment as scheduledAt (the ledger does not keep when an attempt began "
        "RUNNING); null before the first grant"
    )
    stoppedAt: datetime | None = Field(description="When the job finished (SUCCEEDED or FAILED); else null")
    attempt: int = Field(description="Grants so far (the current attempt), 0 before the first")
    capacityUsage: list[CapacityUsage] = Field(
        description="What it holds now (empty while it waits): AWS Batch's capacityUsage"
    )
    preemptionRetriesBeforeTermination: int | None
    lease: Lease
    preemptionSummary: PreemptionSummary
    taskInstance: TaskInstanceLink
    trainingJob: TrainingJob | None = Field(description="What the task launched, when it has told us")


class JobList(_Body):
    jobs: list[Job] = Field(
        description="In submission order: the newest `limit` after the `offset` newest; with "
        "`orderBy=stoppedAt`, the finished jobs that finished latest, latest first"
    )
    total: int | None = Field(
        description="Jobs that match the filters, in all pages; null when more than 10,000 match"
    )
    limit: int
    offset: int


class AuditEvent(_Body):
    id: int
    at: datetime
    jobQueueName: str
    kind: str = Field(
        description="SUBMITTED, GRANTED, PREEMPTED, REQUEUED, SUCCEEDED, FAILED, TERMINATED, ..."
    )
    quotaShareName: str | None
    jobId: str | None
    relatedJobId: str | None = Field(description="The other job of the decision: a PREEMPTED job's preemptor")
    rule: str | None
    message: str
    details: dict[str, Any] | None


class AuditEventList(_Body):
    events: list[AuditEvent] = Field(description="Oldest first")


class FrontJob(_Body):
    jobArn: str = Field(description="The job id (AWS_BATCH: the service job's ARN)")
    quotaShareName: str
    position: int = Field(description="Its place in its share's order")
    schedulingPriority: int | None = Field(description="Null for AWS_BATCH (GetJobQueueSnapshot omits it)")
    capacityUnit: str | None = Field(description="Null for AWS_BATCH")
    instanceCount: int | None = Field(description="Null for AWS_BATCH")
    statusReason: str | None = Field(description="Null for AWS_BATCH")
    earliestTimeAtPosition: datetime | None = Field(
        default=None, description="AWS_BATCH: since when it holds this place; null for AIRFLOW"
    )


class FrontOfQueue(_Body):
    jobs: list[FrontJob] = Field(description="The first RUNNABLE jobs, in submission order across shares")
    lastUpdatedAt: datetime


class FrontOfQuotaShares(_Body):
    quotaShares: dict[str, list[FrontJob]] = Field(description="Per share, its first RUNNABLE jobs in order")
    lastUpdatedAt: datetime


class ShareCapacityUtilization(_Body):
    quotaShareName: str
    capacityUsage: list[CapacityUsage]


class QuotaShareUtilization(_Body):
    topCapacityUtilization: list[ShareCapacityUtilization]


class QueueUtilization(_Body):
    quotaShareUtilization: QuotaShareUtilization
    totalCapacityUsage: list[CapacityUsage]
    lastUpdatedAt: datetime


class ShareLostWork(_Body):
    """What the preemptions of one share's jobs lost on one capacity unit over the window."""

    quotaShareName: str
    lostUnitSeconds: float = Field(
        description="GPU-seconds (unit-seconds) lost: the sum of the PREEMPTED audit rows' lostUnitSeconds"
    )
    preemptions: int = Field(description="Preemptions of the share's jobs decided in the window")
    unmeasured: int = Field(
        description="Of those, preemptions recorded before lost work was measured (not in the sum)"
    )


class UnitLostWork(_Body):
    """The queue's total on one capacity unit, and each share's (the preempted jobs' shares)."""

    capacityUnit: str
    lostUnitSeconds: float = Field(description="GPU-seconds (unit-seconds) the queue's preemptions lost")
    preemptions: int
    unmeasured: int
    quotaShares: list[ShareLostWork] = Field(
        description="Each share owning or using the unit (quota-file order), then any other share preempted "
        "on it in the window"
    )


class LostWork(_Body):
    """Work lost to the queue's preemptions decided in the window ``since``..``until``."""

    since: datetime | None = Field(description="The window's start; null: since the queue's first job")
    until: datetime = Field(description="The window's end")
    units: list[UnitLostWork]


class JobQueueSnapshot(_Body):
    """Like AWS Batch's GetJobQueueSnapshot, plus each unit laid out by owner and the work its preemptions
    lost (AIRFLOW only)."""

    jobQueueName: str
    scheduler: Scheduler
    error: str | None = Field(default=None, description="AWS_BATCH: why AWS Batch could not be asked")
    frontOfQueue: FrontOfQueue
    frontOfQuotaShares: FrontOfQuotaShares
    queueUtilization: QueueUtilization
    capacity: list[UnitUsage] = Field(description="Each unit laid out by owner; empty for AWS_BATCH")
    lostWork: LostWork | None = Field(
        default=None,
        description="Work lost to preemptions decided in the window (`window`, `since`, `until`: as the "
        "timeline's, default the last hour), per unit and share; null for AWS_BATCH",
    )


class ServiceJob(_Body):
    """A job of a queue AWS Batch schedules, read from AWS Batch (ListServiceJobs, DescribeServiceJob)."""

    jobId: str = Field(description="The service job's id")
    jobArn: str
    jobName: str | None
    jobQueueName: str
    quotaShareName: str | None
    status: str
    statusReason: str
    schedulingPriority: int | None = Field(description="DescribeServiceJob's; null in a list (AWS omits it)")
    capacityUsage: list[CapacityUsage]
    createdAt: datetime | None
    scheduledAt: datetime | None
    startedAt: datetime | None
    stoppedAt: datetime | None
    isTerminated: bool | None
    latestAttempt: dict[str, Any] | None = Field(description="{serviceResourceId: {name, value}}")
    preemptionSummary: dict[str, Any] | None = Field(
        description="DescribeServiceJob's {preemptedAttemptCount, recentPreemptedAttempts}; null in a list"
    )
    trainingJob: TrainingJob | None = Field(description="The latest attempt's SageMaker training job")
    scheduledBy: Literal["AWS_BATCH"] = "AWS_BATCH"


class TaskInstanceServiceJobs(_Body):
    """A task instance's service jobs on the queues AWS Batch schedules (all its tries share one name)."""

    jobs: list[ServiceJob] = Field(description="DescribeServiceJob of each, newest first")
    errors: list[str] = Field(description="Per queue AWS Batch could not answer for, why")


class ServiceJobList(_Body):
    jobQueueName: str
    scheduler: Literal["AWS_BATCH"] = "AWS_BATCH"
    jobs: list[ServiceJob] = Field(description="Newest first, at most `limit`")
    error: str | None = Field(default=None, description="Why AWS Batch could not be asked")


class TimelineBar(_Body):
    """One job's hold of one unit of capacity (one row of its capacity unit) over one phase."""

    jobId: str
    quotaShareName: str
    schedulingPriority: int
    capacityUnit: str
    row: int = Field(
        description="The unit of capacity (0-based row): on a unit with devices, the GPU's device index when "
        "the grant recorded it; otherwise laid out by the timeline"
    )
    device: int | None = Field(
        default=None, description="The GPU's device index, when the grant recorded it (a local unit)"
    )
    borrowed: bool = Field(description="This unit is borrowed from another share's idle capacity")
    attempt: int | None = Field(description="The job's attempt (grant) number")
    phase: str = Field(
        description="RUNNING: granted (SCHEDULED, STARTING or RUNNING); STOPPING: preempted or terminated, "
        "still holding the unit until its training job has stopped"
    )
    startedAt: datetime
    endedAt: datetime | None = Field(description="Null: still held at the window's end")
    endedBy: str | None = Field(
        description="What ended the phase: PREEMPTED, TERMINATED, REQUEUED, SUCCEEDED, FAILED, HANDED_OVER"
    )
    preemptedBy: str | None = Field(description="A STOPPING phase's preemptor (its job id)")
    rule: str | None = Field(description="The preemption's rule (RECLAIM, IN_SHARE_PRIORITY, ...)")
    reason: str = Field(description="Why the phase began, in the audit log's words")
    lostUnitSeconds: float | None = Field(
        default=None,
        description="A STOPPING phase after a preemption: the GPU-seconds it lost (its PREEMPTED audit row's "
        "lostUnitSeconds, for all of the job's units); null otherwise, or when not measured",
    )
    lostSince: str | None = Field(
        default=None, description="What the loss counts from: checkpoint (its last) or start (its grant)"
    )


class TimelineWait(_Body):
    startedAt: datetime
    endedAt: datetime | None = Field(description="Null: still waiting at the window's end")
    reason: str = Field(description="Why it waited; the engine's statusReason for a wait that goes on")


class TimelineJob(_Body):
    jobId: str
    jobName: str
    quotaShareName: str
    schedulingPriority: int
    capacityUnit: str
    instanceCount: int
    status: str
    statusReason: str
    taskInstance: TaskInstanceLink
    waits: list[TimelineWait] = Field(description="Its waiting periods that overlap the window, oldest first")


class TimelineUnit(_Body):
    capacityUnit: str
    capacity: int = Field(description="The queue's capacity of the unit now")
    rows: int = Field(
        description="Rows to draw: the capacity, or more when a bar needed one (after a change)"
    )
    devices: bool = Field(
        default=False, description="The rows are the host's GPUs (a local unit): row i is device index i"
    )
    bars: list[TimelineBar]


class JobQueueTimeline(_Body):
    jobQueueName: str
    since: datetime | None = Field(description="The window's start; null: since the queue's first job")
    until: datetime = Field(description="The window's end")
    firstSubmittedAt: datetime | None = Field(description="When the queue's first job was submitted")
    quotaShareNames: list[str] = Field(description="The queue's shares in quota-file order (colours)")
    units: list[TimelineUnit]
    jobs: list[TimelineJob] = Field(description="The jobs with a bar or a wait in the window, by submission")
    truncated: bool = Field(
        description="More jobs touched the window than one timeline shows: the oldest left out"
    )
    jobLimit: int = Field(
        MAX_TIMELINE_JOBS, description="The most jobs one timeline replays (the newest that touch the window)"
    )


class TaskInstanceTimeline(_Body):
    timelines: list[JobQueueTimeline] = Field(description="One per job queue the task instance's jobs used")


# --- writes -----------------------------------------------------------------------------------------------


class ResourceSharingUpdate(_Body):
    strategy: str = Field(description="RESERVE, LEND or LEND_AND_BORROW")
    borrowLimit: int | None = Field(default=None, description="LEND_AND_BORROW only; -1 = no limit")


class PreemptionUpdate(_Body):
    inSharePreemption: str = Field(description="ENABLED or DISABLED")


class QuotaShareUpdate(_Body):
    """The fields to change; those left out keep their applied values. Validated like a quota file."""

    capacityLimits: list[dict[str, Any]] | None = Field(
        default=None, description="The share's whole list of {capacityUnit, maxCapacity}"
    )
    resourceSharingConfiguration: dict[str, Any] | None = Field(
        default=None, description="{strategy, borrowLimit?}: replaces the applied one"
    )
    preemptionConfiguration: dict[str, Any] | None = Field(default=None, description="{inSharePreemption}")
    state: str | None = Field(default=None, description="ENABLED or DISABLED")


class ConfigChangeResult(_Body):
    jobQueueName: str
    quotaShareName: str | None
    revision: int
    old: dict[str, Any] | None
    new: dict[str, Any] | None


class QuotaShareUpdateResult(_Body):
    changes: list[ConfigChangeResult] = Field(description="Empty when the share already had these values")
    quotaShare: QuotaShare


class PriorityUpdate(_Body):
    jobId: JobId
    schedulingPriority: Annotated[int, BeforeValidator(scheduling_priority)] = Field(
        description=f"An integer {MIN_PRIORITY}..{MAX_PRIORITY}, higher goes first"
    )


class Termination(_Body):
    jobId: JobId
    reason: Annotated[str, AfterValidator(without_nul)] = Field(
        min_length=1,
        max_length=TERMINATION_REASON_LENGTH,
        description=f"Why the job is terminated (kept in the audit log), at most {TERMINATION_REASON_LENGTH} "
        "characters",
    )


class ErrorDetail(BaseModel):
    detail: Any = Field(description="What was wrong and how to fix it; nothing was changed")


#: The error responses the OpenAPI document lists: on every route, and on every write.
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorDetail, "description": "No credentials, or they expired"},
    403: {"model": ErrorDetail, "description": "The user lacks the permission"},
}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    404: {"model": ErrorDetail, "description": "No such job queue, share or job"},
    409: {"model": ErrorDetail, "description": "Not possible in the job's state; nothing changed"},
    422: {"model": ErrorDetail, "description": "Invalid input; nothing changed"},
}
