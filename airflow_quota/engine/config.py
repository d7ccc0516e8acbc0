"""Validate quota files and job requests written with AWS Batch's field names, and turn them into the model.

Pydantic checks each object on its own (types, ranges, allowed values, unknown keys, borrowLimit against
strategy); the cross-checks then look across objects (duplicate names and units, share units the queue
lacks, shares adding up to more than the queue holds), using every well-formed piece, so one typo does not
hide the other mistakes. Every problem becomes a ``ConfigIssue`` whose path reads like
``jobQueues[0].quotaShares[2].resourceSharingConfiguration.borrowLimit`` and whose message says what is
wrong and how to fix it; all of them are raised together in one ``QuotaConfigError``. No file I/O here.
"""

from __future__ import annotations

import types
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from airflow_quota.engine.devices import is_local_unit
from airflow_quota.engine.messages import (
    format_loc,
    join_path,
    plain_whole_number,
    show_value,
    unknown_key_message,
)
from airflow_quota.engine.model import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    UNLIMITED_BORROW,
    JobQueue,
    JobRequest,
    PreemptAtCheckpoint,
    QuotaShare,
    ShareState,
    SharingStrategy,
)

#: What AWS Batch accepts (we accept more, and warn).
AWS_MAX_SHARES_PER_QUEUE = 20
AWS_MAX_CAPACITY_LIMITS_PER_SHARE = 5
#: A job queue's ``priority`` in AWS Batch (research/quota-semantics.md 1.2; the service model states none).
AWS_MIN_QUEUE_PRIORITY = 0
AWS_MAX_QUEUE_PRIORITY = 1000
#: A job queue's ``jobStateTimeLimitActions``: AWS Batch's documented bounds of ``maxTimeSeconds`` (the
#: service model states them in words: 600 to 86,400) and the ``reason`` values it supports on a
#: SAGEMAKER_TRAINING job queue (user guide, "Automatic remediation with jobStateTimeLimitActions"), each a
#: statusReason our allocator writes for a RUNNABLE job.
AWS_MIN_TIME_LIMIT_SECONDS = 600
AWS_MAX_TIME_LIMIT_SECONDS = 86_400
TimeLimitReason = Literal[
    "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
    "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE",
    "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED",
]
TIME_LIMIT_REASONS: tuple[str, ...] = get_args(TimeLimitReason)

# Upper bounds: every value fits the ledger's columns (names 128 characters, units 256, whole numbers
# 32-bit like AWS's Integer) and nothing anyone types makes the allocator build or count more than this.
#: The most instances of one unit a job queue or share holds, and so the most a job asks for.
MAX_CAPACITY = 100_000
#: The largest borrowLimit (a percentage): beyond it a share of maxCapacity 1 could borrow more than any
#: job queue holds, so a larger one would mean nothing more.
MAX_BORROW_LIMIT = 100 * MAX_CAPACITY
#: AWS's Integer (and the ledger's integer columns): the bound of a count with no smaller natural one.
MAX_INTEGER = 2**31 - 1
MAX_NAME_LENGTH = 128
#: The longest minimumRunSeconds or starvationLimitSeconds: 30 days.
MAX_EXTENSION_SECONDS = 30 * 24 * 3600
#: The longest preemptAtCheckpoint marginSeconds: an hour.
MAX_MARGIN_SECONDS = 3600
MAX_UNIT_LENGTH = 256

_NAME_PATTERN = rf"^[A-Za-z0-9_-]{{1,{MAX_NAME_LENGTH}}}$"
_NAME_RULE = f"1 to {MAX_NAME_LENGTH} letters, digits, '-' or '_'"
_UNIT_PATTERN = rf"^[A-Za-z0-9._:/+-]{{1,{MAX_UNIT_LENGTH}}}$"
_UNIT_RULE = f"1 to {MAX_UNIT_LENGTH} letters, digits, '.', '-', '_', ':', '/' or '+'"
Name = Annotated[StrictStr, Field(pattern=_NAME_PATTERN)]
Unit = Annotated[StrictStr, Field(pattern=_UNIT_PATTERN)]


def _name_or_arn(kind: str) -> str:
    """A resource's name, or its AWS Batch ARN (``arn:aws:batch:us-east-1:123456789012:<kind>/<name>``)."""
    return rf"^(arn:[a-z-]+:batch:[A-Za-z0-9-]*:[A-Za-z0-9_]*:{kind}/)?[A-Za-z0-9_-]{{1,{MAX_NAME_LENGTH}}}$"


PolicyReference = Annotated[StrictStr, Field(pattern=_name_or_arn("scheduling-policy"))]
EnvironmentReference = Annotated[StrictStr, Field(pattern=_name_or_arn("service-environment"))]
Capacity = Annotated[StrictInt, Field(ge=0, le=MAX_CAPACITY)]

#: What each field must hold, in the words the error messages use.
_EXPECTED: dict[str, str] = {
    "jobQueues": "a list of job queues (at least one)",
    "jobQueueName": f"a name of {_NAME_RULE}, e.g. gpu-training",
    "jobQueue": f"the name of a job queue, {_NAME_RULE}, e.g. gpu-training",
    "quotaShares": "a list of quota shares (at least one: every job names the share it runs in)",
    "quotaShareName": f"a name of {_NAME_RULE}, e.g. team-a",
    "jobName": f"a name of {_NAME_RULE}, e.g. llama-finetune-7",
    "capacityLimits": "a list of {capacityUnit, maxCapacity} entries (at least one)",
    "capacityUnit": f"an instance type such as ml.p4d.24xlarge ({_UNIT_RULE})",
    "maxCapacity": f"a whole number from 0 to {MAX_CAPACITY} (how many instances of this capacity unit)",
    "strategy": "one of RESERVE, LEND, LEND_AND_BORROW",
    "borrowLimit": (
        f"a whole number from 0 to {MAX_BORROW_LIMIT} (the percentage of the share's own maxCapacity it "
        "may borrow on top of it), or -1 for no limit"
    ),
    "inSharePreemption": "ENABLED or DISABLED",
    "scheduler": (
        "AIRFLOW (our allocator schedules this job queue; the default) or AWS_BATCH (AWS Batch schedules "
        "it: tasks submit AWS Batch service jobs to its quota shares)"
    ),
    "state": "ENABLED or DISABLED",
    "priority": (
        f"a whole number from {AWS_MIN_QUEUE_PRIORITY} to {AWS_MAX_QUEUE_PRIORITY} (AWS Batch's job queue "
        "priority), or left out"
    ),
    "jobStateTimeLimitActions": (
        "a list of {reason, state: RUNNABLE, maxTimeSeconds, action: TERMINATE} entries (AWS Batch's "
        "CreateJobQueue field), or left out"
    ),
    "reason": "one of " + ", ".join(TIME_LIMIT_REASONS) + " (the statusReason the job waits with)",
    "maxTimeSeconds": (
        f"a whole number of seconds from {AWS_MIN_TIME_LIMIT_SECONDS} to {AWS_MAX_TIME_LIMIT_SECONDS} "
        "(how long a RUNNABLE job may wait with that reason)"
    ),
    "action": (
        "TERMINATE (the only action AWS Batch takes on a SAGEMAKER_TRAINING job queue; CANCEL is for ECS, "
        "FARGATE and EKS job queues)"
    ),
    "schedulingPolicyArn": (
        "the name or ARN of the job queue's AWS Batch scheduling policy, e.g. quota or "
        "arn:aws:batch:us-east-1:123456789012:scheduling-policy/quota; or left out"
    ),
    "serviceEnvironmentOrder": (
        "one [{order: 1, serviceEnvironment: NAME}] entry naming the job queue's AWS Batch service "
        "environment (our job queue has one capacity); or left out"
    ),
    "serviceEnvironment": (
        "the name or ARN of an AWS Batch service environment, e.g. ml-g5 or "
        "arn:aws:batch:us-east-1:123456789012:service-environment/ml-g5"
    ),
    "order": f"a whole number from 0 to {MAX_INTEGER}",
    "extensions": (
        "a mapping of our extensions to AWS Batch's rules (docs/extensions.md): checkpointAwareVictims, "
        "minimumRunSeconds, starvationLimitSeconds, preemptAtCheckpoint"
    ),
    "preemptAtCheckpoint": (
        "a mapping with the keys checkpointIntervalSeconds, maximumWaitSeconds, marginSeconds (a "
        "preemption of this share's jobs waits for their next checkpoint), or left out for off"
    ),
    "checkpointIntervalSeconds": (
        f"a whole number of seconds from 1 to {MAX_EXTENSION_SECONDS} (how often this share's trainings "
        "checkpoint)"
    ),
    "maximumWaitSeconds": (
        f"a whole number of seconds from 0 to {MAX_EXTENSION_SECONDS} (the longest a preemption of this "
        "share's jobs waits for their next checkpoint)"
    ),
    "marginSeconds": (
        f"a whole number of seconds from 0 to {MAX_MARGIN_SECONDS} (how long after a checkpoint the "
        "preemption is made), less than checkpointIntervalSeconds; or left out for 30"
    ),
    "checkpointAwareVictims": (
        "ENABLED or DISABLED (when this share's jobs preempt, victims of one rank that lose the least work "
        "since their last checkpoint go first)"
    ),
    "minimumRunSeconds": (
        f"a whole number of seconds from 0 to {MAX_EXTENSION_SECONDS} (this share's jobs are not preempted "
        "before they have run that long; 0: off)"
    ),
    "starvationLimitSeconds": (
        f"a whole number of seconds from 0 to {MAX_EXTENSION_SECONDS} (once this share's first waiting job "
        "has waited that long, capacity the share frees is held for it), or left out for off"
    ),
    "schedulingPriority": f"a whole number from {MIN_PRIORITY} to {MAX_PRIORITY} (higher runs first)",
    "instanceCount": f"a whole number from 1 to {MAX_CAPACITY}",
    "preemptionRetriesBeforeTermination": (
        f"a whole number from 0 to {MAX_INTEGER}, or left out to requeue without limit"
    ),
}


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem (or warning): where it is in the document and what to do about it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class QuotaConfigError(ValueError):
    """A quota file (or job request) is invalid; ``issues`` lists every problem found, not just the first."""

    def __init__(self, source: str, issues: Sequence[ConfigIssue]) -> None:
        self.source = source
        self.issues = list(issues)
        super().__init__(str(self))

    def __str__(self) -> str:
        count = len(self.issues)
        heading = f"{self.source}: {count} error{'s' if count != 1 else ''}"
        return "\n".join([heading, *(f"  {issue}" for issue in self.issues)])


class JobRequestError(QuotaConfigError):
    """A job request is invalid (same shape as a quota file error)."""


class _AwsModel(BaseModel):
    """Fields are read by their AWS name only, unknown keys are refused, and parsed objects never change."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_alias=True, validate_by_name=False)


class CapacityLimit(_AwsModel):
    capacity_unit: Unit = Field(alias="capacityUnit")
    max_capacity: Capacity = Field(alias="maxCapacity")


class ResourceSharingConfiguration(_AwsModel):
    strategy: SharingStrategy
    #: None when absent; only a LEND_AND_BORROW share may set it, and absent means -1 (no limit).
    borrow_limit: StrictInt | None = Field(
        None, alias="borrowLimit", ge=UNLIMITED_BORROW, le=MAX_BORROW_LIMIT
    )

    @field_validator("borrow_limit")
    @classmethod
    def _only_when_borrowing(cls, borrow_limit: int | None, info: ValidationInfo) -> int | None:
        strategy = info.data.get("strategy")
        if (
            borrow_limit is not None
            and strategy is not None
            and strategy is not SharingStrategy.LEND_AND_BORROW
        ):
            raise PydanticCustomError(
                "quota_borrow_limit_without_borrowing",
                "borrowLimit is only allowed with strategy LEND_AND_BORROW (this share's strategy is "
                "{strategy}): remove borrowLimit or set strategy: LEND_AND_BORROW",
                {"strategy": strategy.value},
            )
        return borrow_limit

    @property
    def effective_borrow_limit(self) -> int:
        return UNLIMITED_BORROW if self.borrow_limit is None else self.borrow_limit


class PreemptionConfiguration(_AwsModel):
    in_share_preemption: Literal["ENABLED", "DISABLED"] = Field("DISABLED", alias="inSharePreemption")


_NO_IN_SHARE_PREEMPTION = PreemptionConfiguration.model_validate({})

ExtensionSeconds = Annotated[StrictInt, Field(ge=0, le=MAX_EXTENSION_SECONDS)]


class PreemptAtCheckpointConfig(_AwsModel):
    """``preemptAtCheckpoint``: a preemption of the share's jobs waits for their next checkpoint, at most
    ``maximumWaitSeconds`` (``engine.extensions.checkpoint_wait_until``)."""

    checkpoint_interval_seconds: Annotated[StrictInt, Field(ge=1, le=MAX_EXTENSION_SECONDS)] = Field(
        alias="checkpointIntervalSeconds"
    )
    maximum_wait_seconds: ExtensionSeconds = Field(alias="maximumWaitSeconds")
    margin_seconds: Annotated[StrictInt, Field(ge=0, le=MAX_MARGIN_SECONDS)] = Field(
        30, alias="marginSeconds"
    )

    @field_validator("margin_seconds")
    @classmethod
    def _margin_within_interval(cls, margin: int, info: ValidationInfo) -> int:
        interval = info.data.get("checkpoint_interval_seconds")
        if interval is not None and margin >= interval:
            raise PydanticCustomError(
                "quota_margin_not_below_interval",
                "marginSeconds ({margin}) must be less than checkpointIntervalSeconds ({interval}): a job "
                "counts as at a checkpoint for marginSeconds after each one, so it would never be waited for",
                {"margin": margin, "interval": interval},
            )
        return margin

    def to_engine(self) -> PreemptAtCheckpoint:
        return PreemptAtCheckpoint(
            float(self.checkpoint_interval_seconds),
            float(self.maximum_wait_seconds),
            float(self.margin_seconds),
        )


class ShareExtensions(_AwsModel):
    """A share's ``extensions:`` block: our additions to AWS Batch's quota rules, each off when left out
    (engine/extensions.py has the rules, docs/extensions.md what each one is for). AWS Batch has none of
    them: ``export --format aws`` leaves the block out with a note, and a job queue AWS Batch schedules
    refuses it."""

    checkpoint_aware_victims: Literal["ENABLED", "DISABLED"] = Field(
        "DISABLED", alias="checkpointAwareVictims"
    )
    minimum_run_seconds: ExtensionSeconds = Field(0, alias="minimumRunSeconds")
    starvation_limit_seconds: ExtensionSeconds | None = Field(None, alias="starvationLimitSeconds")
    preempt_at_checkpoint: PreemptAtCheckpointConfig | None = Field(None, alias="preemptAtCheckpoint")

    @property
    def in_use(self) -> bool:
        return (
            self.checkpoint_aware_victims == "ENABLED"
            or self.minimum_run_seconds > 0
            or self.starvation_limit_seconds is not None
            or self.preempt_at_checkpoint is not None
        )


_NO_EXTENSIONS = ShareExtensions.model_validate({})


class QuotaShareConfig(_AwsModel):
    """One quota share as AWS Batch's CreateQuotaShare takes it (without jobQueue and tags)."""

    quota_share_name: Name = Field(alias="quotaShareName")
    capacity_limits: list[CapacityLimit] = Field(alias="capacityLimits", min_length=1)
    resource_sharing_configuration: ResourceSharingConfiguration = Field(alias="resourceSharingConfiguration")
    preemption_configuration: PreemptionConfiguration = Field(
        _NO_IN_SHARE_PREEMPTION, alias="preemptionConfiguration"
    )
    state: ShareState = ShareState.ENABLED
    #: Ours, not AWS Batch's (``ShareExtensions``).
    #: None when absent (all off), so a file without the block is written back without it.
    extensions: ShareExtensions | None = Field(None, alias="extensions")

    def to_quota_share(self) -> QuotaShare:
        sharing = self.resource_sharing_configuration
        extensions = self.extensions or _NO_EXTENSIONS
        return QuotaShare(
            name=self.quota_share_name,
            capacity_limits={limit.capacity_unit: limit.max_capacity for limit in self.capacity_limits},
            strategy=sharing.strategy,
            borrow_limit=sharing.effective_borrow_limit,
            in_share_preemption=self.preemption_configuration.in_share_preemption == "ENABLED",
            state=self.state,
            checkpoint_aware_victims=extensions.checkpoint_aware_victims == "ENABLED",
            minimum_run_seconds=float(extensions.minimum_run_seconds),
            starvation_limit_seconds=(
                None
                if extensions.starvation_limit_seconds is None
                else float(extensions.starvation_limit_seconds)
            ),
            preempt_at_checkpoint=(
                None
                if extensions.preempt_at_checkpoint is None
                else extensions.preempt_at_checkpoint.to_engine()
            ),
        )


class JobQueueConfig(_AwsModel):
    """A job queue's name and total capacity per unit (the simulator's ``jobQueue:`` holds exactly this)."""

    job_queue_name: Name = Field(alias="jobQueueName")
    capacity_limits: list[CapacityLimit] = Field(alias="capacityLimits", min_length=1)

    def with_shares(self, shares: Sequence[QuotaShareConfig]) -> JobQueue:
        return JobQueue(
            name=self.job_queue_name,
            capacity={limit.capacity_unit: limit.max_capacity for limit in self.capacity_limits},
            shares=tuple(share.to_quota_share() for share in shares),
        )


class ServiceEnvironmentOrderEntry(_AwsModel):
    """CreateJobQueue's ``serviceEnvironmentOrder`` entry: which service environment holds the capacity."""

    order: StrictInt = Field(ge=0, le=MAX_INTEGER)
    service_environment: EnvironmentReference = Field(alias="serviceEnvironment")


class JobStateTimeLimitAction(_AwsModel):
    """One entry of CreateJobQueue's ``jobStateTimeLimitActions``: a job RUNNABLE with statusReason
    ``reason`` for ``maxTimeSeconds`` is terminated (``action``). On a job queue our allocator schedules,
    the allocator applies it (allocator/time_limits.py); on one AWS Batch schedules, AWS Batch does."""

    reason: TimeLimitReason
    #: AWS requires it; the file may leave it out (RUNNABLE is its only value).
    state: Literal["RUNNABLE"] = "RUNNABLE"
    max_time_seconds: StrictInt = Field(
        alias="maxTimeSeconds", ge=AWS_MIN_TIME_LIMIT_SECONDS, le=AWS_MAX_TIME_LIMIT_SECONDS
    )
    #: AWS Batch takes only TERMINATE on a SAGEMAKER_TRAINING job queue (the service model's words).
    action: Literal["TERMINATE"]

    @field_validator("state", mode="before")
    @classmethod
    def _runnable(cls, state: object) -> object:
        if state != "RUNNABLE":
            raise PydanticCustomError(
                "quota_time_limit_state",
                f"state is {show_value(state)}: it must be RUNNABLE (the only state AWS Batch's "
                "jobStateTimeLimitActions take)",
            )
        return state

    @field_validator("action", mode="before")
    @classmethod
    def _terminate(cls, action: object) -> object:
        if action != "TERMINATE":
            raise PydanticCustomError(
                "quota_time_limit_action",
                f"action is {show_value(action)}: it must be {_EXPECTED['action']}",
            )
        return action


#: Who schedules a job queue's jobs: our allocator in Airflow, or AWS Batch itself (service jobs).
QueueScheduler = Literal["AIRFLOW", "AWS_BATCH"]
DEFAULT_SCHEDULER: QueueScheduler = "AIRFLOW"


class JobQueueWithShares(JobQueueConfig):
    """A job queue of the quota file: its capacity, the quota shares that divide it, and who schedules it
    (``scheduler``; left out, our allocator)."""

    quota_shares: list[QuotaShareConfig] = Field(alias="quotaShares", min_length=1)
    #: None when absent (read as AIRFLOW), so a file that does not say is written back as it was.
    scheduler: QueueScheduler | None = None
    # CreateJobQueue's own fields, optional: only ``export`` and ``apply --to-aws`` read them (our allocator
    # schedules the queue whatever they say). Left out (None), export writes its defaults (priority 1,
    # ENABLED, a service environment and scheduling policy named after the job queue) and ``apply --to-aws``
    # leaves what AWS Batch has (docs/aws-batch.md).
    priority: StrictInt | None = Field(None, ge=AWS_MIN_QUEUE_PRIORITY, le=AWS_MAX_QUEUE_PRIORITY)
    state: Literal["ENABLED", "DISABLED"] | None = None
    scheduling_policy_arn: PolicyReference | None = Field(None, alias="schedulingPolicyArn")
    service_environment_order: list[ServiceEnvironmentOrderEntry] | None = Field(
        None, alias="serviceEnvironmentOrder", min_length=1, max_length=1
    )
    #: Read by the allocator too (on a queue it schedules it terminates the jobs they name); None: none.
    job_state_time_limit_actions: list[JobStateTimeLimitAction] | None = Field(
        None, alias="jobStateTimeLimitActions"
    )

    @field_validator("scheduler", mode="before")
    @classmethod
    def _given_if_written(cls, scheduler: object) -> object:
        if scheduler is None:
            raise PydanticCustomError(
                "quota_scheduler_empty",
                f"scheduler is empty: it must be {_EXPECTED['scheduler']}; or leave scheduler out",
            )
        return scheduler

    @property
    def scheduled_by(self) -> QueueScheduler:
        return self.scheduler or DEFAULT_SCHEDULER

    def to_job_queue(self) -> JobQueue:
        return self.with_shares(self.quota_shares)


class QuotaConfig(_AwsModel):
    """The whole quota file. Build it with ``parse_quota_config``, which adds the cross-object checks."""

    job_queues: list[JobQueueWithShares] = Field(alias="jobQueues", min_length=1)

    def to_job_queues(self) -> list[JobQueue]:
        return [queue.to_job_queue() for queue in self.job_queues]


class _QueueAndShares(_AwsModel):
    """A scenario's queue and shares, given side by side."""

    job_queue: JobQueueConfig = Field(alias="jobQueue")
    quota_shares: list[QuotaShareConfig] = Field(alias="quotaShares", min_length=1)


class JobRequestConfig(_AwsModel):
    """What a task submits: the fields of AWS Batch's SubmitServiceJob that quotas look at."""

    job_name: Name = Field(alias="jobName")
    quota_share_name: Name = Field(alias="quotaShareName")
    scheduling_priority: StrictInt = Field(
        MIN_PRIORITY, alias="schedulingPriority", ge=MIN_PRIORITY, le=MAX_PRIORITY
    )
    capacity_unit: Unit = Field(alias="capacityUnit")
    instance_count: StrictInt = Field(alias="instanceCount", ge=1, le=MAX_CAPACITY)
    preemption_retries_before_termination: StrictInt | None = Field(
        None, alias="preemptionRetriesBeforeTermination", ge=0, le=MAX_INTEGER
    )

    def to_job_request(self) -> JobRequest:
        return JobRequest(
            job_name=self.job_name,
            quota_share_name=self.quota_share_name,
            capacity_unit=self.capacity_unit,
            instance_count=self.instance_count,
            scheduling_priority=self.scheduling_priority,
            preemption_retries_before_termination=self.preemption_retries_before_termination,
        )


class JobSubmissionConfig(JobRequestConfig):
    """A request with the job queue it is submitted to (SubmitServiceJob's jobQueue), as a task gives it."""

    job_queue: Name = Field(alias="jobQueue")


class _SchedulingPriority(_AwsModel):
    scheduling_priority: StrictInt = Field(alias="schedulingPriority", ge=MIN_PRIORITY, le=MAX_PRIORITY)


# --- public entry points -----------------------------------------------------------------------------


def parse_quota_config(raw: object, source: str) -> QuotaConfig:
    """Validate a loaded quota file; raise ``QuotaConfigError`` listing every problem."""
    config, issues = _validate(QuotaConfig, raw)
    raw_queues = _get(raw, "jobQueues")
    if isinstance(raw_queues, list | tuple):
        issues += _duplicate_queue_names(raw_queues)
        for index, raw_queue in enumerate(raw_queues):
            issues += _queue_cross_issues(
                raw_queue,
                _get(raw_queue, "quotaShares"),
                f"jobQueues[{index}]",
                f"jobQueues[{index}].quotaShares",
            )
        issues += _local_units_after_the_first(raw_queues)
        issues += _shared_service_environments(raw_queues)
        issues += _extensions_on_aws_batch(raw_queues)
    if issues or config is None:
        raise QuotaConfigError(source, issues)
    return config


def parse_queue_with_shares(
    queue_raw: object, shares_raw: object, source: str, path_prefix: str = ""
) -> JobQueue:
    """Validate a queue (``{jobQueueName, capacityLimits}``) and its shares given apart, as scenarios do.

    Problems are reported at ``jobQueue...`` and ``quotaShares[i]...``, under ``path_prefix`` when given
    (``path_prefix="scenario"`` gives ``scenario.jobQueue.capacityLimits[0]``).
    """
    both, issues = _validate(_QueueAndShares, {"jobQueue": queue_raw, "quotaShares": shares_raw}, path_prefix)
    issues += _queue_cross_issues(
        queue_raw, shares_raw, join_path(path_prefix, "jobQueue"), join_path(path_prefix, "quotaShares")
    )
    if issues or both is None:
        raise QuotaConfigError(source, issues)
    return both.job_queue.with_shares(both.quota_shares)


def validate_job_request(raw: Mapping[str, Any], source: str = "request") -> JobRequest:
    """Validate one job request; raise ``JobRequestError`` listing every problem."""
    request, issues = _validate(JobRequestConfig, raw)
    if issues or request is None:
        raise JobRequestError(source, issues)
    return request.to_job_request()


def validate_job_submission(raw: Mapping[str, Any], source: str = "request") -> tuple[str, JobRequest]:
    """Validate a job request and its ``jobQueue``: the queue's name and the request, or ``JobRequestError``
    listing every problem."""
    submission, issues = _validate(JobSubmissionConfig, raw)
    if issues or submission is None:
        raise JobRequestError(source, issues)
    return submission.job_queue, submission.to_job_request()


def validate_scheduling_priority(value: object, source: str = "request") -> int:
    """A new schedulingPriority as given (an integer, never a string or a boolean), or ``JobRequestError``
    with the message a job request's priority gets."""
    priority, issues = _validate(_SchedulingPriority, {"schedulingPriority": value})
    if issues or priority is None:
        raise JobRequestError(source, issues)
    return priority.scheduling_priority


def scheduling_priority_from_text(text: str, source: str = "command line") -> int:
    """A schedulingPriority typed on a command line: plain digits only (not ``+5``, ``5_0`` or ``true``)."""
    number = plain_whole_number(text, max_digits=5)
    return validate_scheduling_priority(text if number is None else number, source)


def aws_batch_warnings(config: QuotaConfig) -> list[ConfigIssue]:
    """What AWS Batch would refuse although we accept it: too many shares, too many limits per share."""
    warnings: list[ConfigIssue] = []
    for queue_index, queue in enumerate(config.job_queues):
        shares_path = f"jobQueues[{queue_index}].quotaShares"
        if len(queue.quota_shares) > AWS_MAX_SHARES_PER_QUEUE:
            what = f"job queue {queue.job_queue_name} has {len(queue.quota_shares)} quota shares"
            limit = f"at most {AWS_MAX_SHARES_PER_QUEUE} per job queue"
            warnings.append(ConfigIssue(shares_path, _aws_refuses(what, limit, "merge shares")))
        for share_index, share in enumerate(queue.quota_shares):
            if len(share.capacity_limits) > AWS_MAX_CAPACITY_LIMITS_PER_SHARE:
                what = (
                    f"quota share {share.quota_share_name} has {len(share.capacity_limits)} capacity limits"
                )
                limit = f"at most {AWS_MAX_CAPACITY_LIMITS_PER_SHARE} per quota share"
                path = f"{shares_path}[{share_index}].capacityLimits"
                warnings.append(ConfigIssue(path, _aws_refuses(what, limit, "split the share")))
    return warnings


def _aws_refuses(what: str, limit: str, fix: str) -> str:
    return f"{what}; AWS Batch allows {limit}: fine here, but {fix} before applying this design to AWS Batch"


# --- cross-object checks, on the raw document ------------------------------------------------------------


def _duplicate_queue_names(raw_queues: Sequence[object]) -> list[ConfigIssue]:
    names = [(index, _get(raw_queue, "jobQueueName")) for index, raw_queue in enumerate(raw_queues)]
    return [
        ConfigIssue(
            f"jobQueues[{index}].jobQueueName",
            f"job queue name {name} is already used by jobQueues[{first}]: give each job queue its own name",
        )
        for index, first, name in _repeats(names)
    ]


def _shared_service_environments(raw_queues: Sequence[object]) -> list[ConfigIssue]:
    """A service environment (``serviceEnvironmentOrder``'s, or the job queue's own name when left out) that
    two job queues would use: AWS Batch would give both one capacity, our file gives each its own."""
    users: dict[str, int] = {}
    issues: list[ConfigIssue] = []
    for index, raw_queue in enumerate(raw_queues):
        order = _get(raw_queue, "serviceEnvironmentOrder")
        entry = order[0] if isinstance(order, list) and len(order) == 1 else None
        reference = (
            _get(entry, "serviceEnvironment") if entry is not None else _get(raw_queue, "jobQueueName")
        )
        if not isinstance(reference, str):
            continue
        name = reference.rsplit("/", 1)[-1]
        first = users.setdefault(name, index)
        same_queue = _get(raw_queues[first], "jobQueueName") == _get(raw_queue, "jobQueueName")
        if first != index and not same_queue:  # a repeated job queue name is refused already
            path = f"jobQueues[{index}]" + (".serviceEnvironmentOrder" if entry is not None else "")
            issues.append(
                ConfigIssue(
                    path,
                    f"service environment {name} is also jobQueues[{first}]'s: each job queue has its own "
                    "capacity, so give this job queue another serviceEnvironmentOrder "
                    "[{order: 1, serviceEnvironment: NAME}]",
                )
            )
    return issues


def _extensions_on_aws_batch(raw_queues: Sequence[object]) -> list[ConfigIssue]:
    """A share's ``extensions`` in a job queue AWS Batch schedules: AWS Batch has none of them."""
    issues: list[ConfigIssue] = []
    for queue_index, raw_queue in enumerate(raw_queues):
        if _get(raw_queue, "scheduler") != "AWS_BATCH":
            continue
        raw_shares = _get(raw_queue, "quotaShares")
        for share_index, raw_share in enumerate(raw_shares if isinstance(raw_shares, list | tuple) else []):
            if _get(raw_share, "extensions") is None:
                continue
            issues.append(
                ConfigIssue(
                    f"jobQueues[{queue_index}].quotaShares[{share_index}].extensions",
                    f"job queue {_get(raw_queue, 'jobQueueName')} is scheduled by AWS Batch "
                    "(scheduler: AWS_BATCH), which has none of our extensions: remove extensions from "
                    "this quota share, or let our allocator schedule the job queue (scheduler: AIRFLOW)",
                )
            )
    return issues


def _local_units_after_the_first(raw_queues: Sequence[object]) -> list[ConfigIssue]:
    """Every ``local-*`` unit after the first, in any job queue: each local unit hands out the host's
    device indices from 0, so two would put two trainings on one GPU (``engine.devices``)."""
    first: str | None = None
    issues: list[ConfigIssue] = []
    for queue_index, raw_queue in enumerate(raw_queues):
        limits, _ = _well_formed_limits(_get(raw_queue, "capacityLimits"))
        for unit, (limit_index, _limit) in _first_per_unit(limits).items():
            if not is_local_unit(unit):
                continue
            where = f"{unit} at jobQueues[{queue_index}].capacityLimits[{limit_index}]"
            if first is None:
                first = where
                continue
            issues.append(
                ConfigIssue(
                    f"jobQueues[{queue_index}].capacityLimits[{limit_index}].capacityUnit",
                    f"{unit} is a second local unit (the first: {first}): the host's GPUs are one set of "
                    "device indices, which every local unit would hand out from 0. Give them all to one "
                    "local unit of one job queue, and split the GPUs between teams with quota shares of "
                    "that job queue",
                )
            )
    return issues


def _queue_cross_issues(
    queue_raw: object, shares_raw: object, queue_path: str, shares_path: str
) -> list[ConfigIssue]:
    """Duplicate units and share names, share units the queue lacks, shares over the queue's capacity."""
    queue_limits, queue_limits_usable = _well_formed_limits(_get(queue_raw, "capacityLimits"))
    queue_capacity = {unit: limit.max_capacity for unit, (_, limit) in _first_per_unit(queue_limits).items()}
    queue_name = _get(queue_raw, "jobQueueName")
    raw_shares = shares_raw if isinstance(shares_raw, list | tuple) else []

    issues = _duplicate_units(queue_limits, f"{queue_path}.capacityLimits")
    issues += _duplicate_share_names(raw_shares, shares_path)
    share_limits_per_unit: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for share_index, raw_share in enumerate(raw_shares):
        limits_path = f"{shares_path}[{share_index}].capacityLimits"
        share_name = _get(raw_share, "quotaShareName")
        share_label = share_name if isinstance(share_name, str) else f"quotaShares[{share_index}]"
        share_limits, _ = _well_formed_limits(_get(raw_share, "capacityLimits"))
        issues += _duplicate_units(share_limits, limits_path)
        for unit, (limit_index, limit) in _first_per_unit(share_limits).items():
            share_limits_per_unit[unit].append((share_label, limit.max_capacity))
            if queue_limits_usable and unit not in queue_capacity:
                unit_path = f"{limits_path}[{limit_index}].capacityUnit"
                issues.append(_unknown_unit(unit, unit_path, queue_name, queue_capacity))
    issues += _over_capacity(queue_capacity, share_limits_per_unit, shares_path)
    return issues


def _duplicate_share_names(raw_shares: Sequence[object], shares_path: str) -> list[ConfigIssue]:
    names = [(index, _get(raw_share, "quotaShareName")) for index, raw_share in enumerate(raw_shares)]
    return [
        ConfigIssue(
            f"{shares_path}[{index}].quotaShareName",
            f"quota share name {name} is already used by quotaShares[{first}] of this job queue: "
            "give each quota share of a job queue its own name",
        )
        for index, first, name in _repeats(names)
    ]


def _over_capacity(
    queue_capacity: Mapping[str, int],
    share_limits_per_unit: Mapping[str, list[tuple[str, int]]],
    shares_path: str,
) -> list[ConfigIssue]:
    """One issue per unit whose shares' maxCapacity adds up to more than the queue holds."""
    issues: list[ConfigIssue] = []
    for unit, queue_limit in queue_capacity.items():
        share_limits = share_limits_per_unit.get(unit, [])
        total = sum(max_capacity for _, max_capacity in share_limits)
        if total > queue_limit:
            parts = ", ".join(f"{name} {max_capacity}" for name, max_capacity in share_limits)
            issues.append(
                ConfigIssue(
                    shares_path,
                    f"the quota shares' maxCapacity for {unit} adds up to {total} ({parts}), more than "
                    f"the job queue's capacity of {queue_limit} {unit}: lower the shares' maxCapacity "
                    f"for {unit} or raise the job queue's",
                )
            )
    return issues


def _unknown_unit(unit: str, path: str, queue_name: object, queue_capacity: Mapping[str, int]) -> ConfigIssue:
    known = ", ".join(queue_capacity) or "none"
    queue = f"job queue {queue_name}" if isinstance(queue_name, str) else "the job queue"
    return ConfigIssue(
        path,
        f"capacity unit {unit} has no capacity limit in {queue} (its units: {known}): add "
        f"{{capacityUnit: {unit}, maxCapacity: N}} to the job queue's capacityLimits or use one of its units",
    )


def _well_formed_limits(raw_limits: object) -> tuple[list[tuple[int, CapacityLimit]], bool]:
    """The entries of a capacityLimits list that parse, with their index, and whether the list is usable.

    A usable list is non-empty and every entry parsed: only then is a unit missing from it an error.
    """
    if not isinstance(raw_limits, list | tuple):
        return [], False
    parsed: list[tuple[int, CapacityLimit]] = []
    for index, raw_limit in enumerate(raw_limits):
        limit, issues = _validate(CapacityLimit, raw_limit)
        if limit is not None and not issues:
            parsed.append((index, limit))
    return parsed, bool(raw_limits) and len(parsed) == len(raw_limits)


def _duplicate_units(limits: list[tuple[int, CapacityLimit]], limits_path: str) -> list[ConfigIssue]:
    units = [(index, limit.capacity_unit) for index, limit in limits]
    return [
        ConfigIssue(
            f"{limits_path}[{index}].capacityUnit",
            f"capacity unit {unit} is already listed in {limits_path.rsplit('.', 1)[-1]}[{first}]: "
            "list each capacity unit once",
        )
        for index, first, unit in _repeats(units)
    ]


def _first_per_unit(limits: list[tuple[int, CapacityLimit]]) -> dict[str, tuple[int, CapacityLimit]]:
    first: dict[str, tuple[int, CapacityLimit]] = {}
    for index, limit in limits:
        first.setdefault(limit.capacity_unit, (index, limit))
    return first


def _repeats(indexed_names: Sequence[tuple[int, object]]) -> list[tuple[int, int, str]]:
    """(index, index of the first use, name) for each string name already used earlier in the list."""
    first_use: dict[str, int] = {}
    repeats: list[tuple[int, int, str]] = []
    for index, name in indexed_names:
        if not isinstance(name, str):
            continue
        if name in first_use:
            repeats.append((index, first_use[name], name))
        else:
            first_use[name] = index
    return repeats


def _get(raw: object, key: str) -> object:
    return raw.get(key) if isinstance(raw, Mapping) else None


# --- pydantic errors, in our words -----------------------------------------------------------------------

_Model = TypeVar("_Model", bound=BaseModel)


def _validate(
    model: type[_Model], raw: object, path_prefix: str = ""
) -> tuple[_Model | None, list[ConfigIssue]]:
    """Validate ``raw`` as ``model``: the result and no issues, or None and every issue found."""
    try:
        return model.model_validate(raw), []
    except ValidationError as error:
        return None, [_issue(detail, model, path_prefix) for detail in error.errors()]


def _issue(detail: ErrorDetails, target: type[BaseModel], path_prefix: str) -> ConfigIssue:
    loc = detail["loc"]
    path = join_path(path_prefix, format_loc(loc))
    label = path.rsplit(".", 1)[-1] if path else "the top level"
    field = next((step for step in reversed(loc) if isinstance(step, str)), "")
    kind = detail["type"]
    shown = show_value(detail["input"])

    if kind.startswith("quota_"):
        return ConfigIssue(path, detail["msg"])
    if kind == "extra_forbidden":
        return ConfigIssue(path, unknown_key_message(str(loc[-1]), _allowed_keys(target, loc[:-1])))
    if kind == "missing":
        return ConfigIssue(path, f"{field} is missing: add {field}, {_expectation(field, target, loc)}")
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return ConfigIssue(path, f"{label} is {shown}: it must be {_expectation(field, target, loc)}")
    expected = _EXPECTED.get(field)
    if expected is None:
        return ConfigIssue(path, f"{label} is {shown}: {detail['msg']}")
    if isinstance(detail["input"], bool) and kind != "int_type":
        expected += " (YAML reads an unquoted yes, no, on or off as true or false)"
    return ConfigIssue(path, f"{label} is {shown}: it must be {expected}")


def _expectation(field: str, target: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    model = _model_at(target, loc)
    if model is not None:
        return f"a mapping with the keys {', '.join(_aliases(model))}"
    return _EXPECTED.get(field, "a value")


def _allowed_keys(target: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    model = _model_at(target, loc)
    return _aliases(model) if model is not None else []


def _aliases(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def _model_at(target: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model that validates the value at ``loc`` inside ``target``, if a model does."""
    current: Any = target
    for step in loc:
        current = _unwrap(current)
        if isinstance(step, int):
            current = get_args(current)[0] if get_origin(current) is list else None
        elif isinstance(current, type) and issubclass(current, BaseModel):
            fields = current.model_fields.values()
            current = next((field.annotation for field in fields if field.alias == step), None)
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """``X`` from ``Annotated[X, ...]`` and from ``X | None``."""
    if get_origin(annotation) is Annotated:
        return _unwrap(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        options = [option for option in get_args(annotation) if option is not type(None)]
        return _unwrap(options[0]) if len(options) == 1 else annotation
    return annotation
