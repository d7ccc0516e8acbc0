"""SageMaker training jobs for quota-managed tasks: names, requests, launch, describe, stop.

Every attempt of a task is its own training job, named ``<base>-a<attempt>``; ``<base>`` is computed from
the task instance (DAG, run, task, map index, try, and a digest of the try's task instance id, which
the deployment's own scheduler made: two deployments never make the same name), so a worker that
crashed, or the same try resumed, finds the same names again. The checkpoint prefix is the user's
``CheckpointConfig.S3Uri`` as given, else ``OutputDataConfig.S3OutputPath + /checkpoints/<task key>/``
(every attempt and try of the task instance, and no other task instance); ``per_try`` adds ``try-<n>/``.

SageMaker calls go through the amazon provider's ``SageMakerHook`` (connection, credentials, region,
``endpoint_url``), with what it lacks added here: a stop (the hook has none), a launch that treats "the
job exists" as success (the stock operator renames the job instead), and a status reading in which
``Stopped`` is never a success. The wait until a stopped job has ended is botocore's own
``TrainingJobCompletedOrStopped`` waiter, taken from the hook.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import logging
import math
import re
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from botocore.exceptions import ClientError, WaiterError

from airflow_quota.engine.messages import MAX_PLAIN_DIGITS, plain_whole_number, show_value

log = logging.getLogger(__name__)

#: SageMaker's TrainingJobName rule (botocore and moto do not check it: we do).
TRAINING_JOB_NAME_PATTERN: Final = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
MAX_TRAINING_JOB_NAME_LENGTH: Final = 63
#: The longest attempt suffix a name keeps room for (``-a`` and five digits).
_ATTEMPT_SUFFIX_ROOM: Final = len("-a99999")
#: Hex digits of the task instance id's digest in a training job name.
DEPLOYMENT_COMPONENT_LENGTH: Final = 6
#: Statuses in which a training job still holds its instances.
RUNNING_STATUSES: Final = frozenset({"InProgress", "Stopping"})
TERMINAL_STATUSES: Final = frozenset({"Completed", "Failed", "Stopped"})
#: CreateTrainingJob answers that mean "not now" rather than "never" (AWS Batch retries insufficient
#: capacity without using the job's retry attempts): the job is requeued with a backoff, never failed.
CAPACITY_ERROR_CODES: Final = frozenset(
    {"InsufficientCapacityError", "ResourceLimitExceeded", "ThrottlingException", "Throttling"}
)
#: How SageMaker's FailureReason begins for a training job that found no instance capacity.
CAPACITY_FAILURE_PREFIX: Final = "CapacityError"
#: Tag keys this provider sets on every training job (AWS's ``aws:`` prefix is reserved; ours is not).
TAG_PREFIX: Final = "airflow-quota:"
#: The shortest pause between two DescribeTrainingJob calls while a stopped job ends.
_MIN_STOP_POLL_SECONDS: Final = 0.01
#: The tag (after ``TAG_PREFIX``) naming the task instance whose try launched a training job: a job found
#: under a name it would use is re-attached only when this tag is its own (``TrainingJobNameTaken``).
OWNER_TAG_KEY: Final = "ti-id"
_TAG_VALUE_UNSAFE = re.compile(r"[^\w .:/=+\-@]")
_MAX_TAG_VALUE_LENGTH: Final = 256


class TrainingRequestError(ValueError):
    """A CreateTrainingJob request SageMaker would refuse, or one we cannot schedule; lists every problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        heading = f"training_job_config: {len(problems)} error{'s' if len(problems) != 1 else ''}"
        super().__init__("\n".join([heading, *(f"  {problem}" for problem in problems)]))


class CapacityRefused(Exception):
    """CreateTrainingJob answered with a capacity error (``CAPACITY_ERROR_CODES``): not now, maybe later."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class TrainingJobNameTaken(RuntimeError):
    """A training job of the name this task would launch exists and is not this task's."""

    def __init__(self, name: str, owner: str | None) -> None:
        self.name = name
        whose = f"task instance {owner}" if owner else "no quota task (it has no airflow-quota owner tag)"
        super().__init__(
            f"Training job {name} already exists and belongs to {whose}, not to this task instance: "
            "it is not re-attached. Delete it (DeleteTrainingJob) or clear the task (a new try has a "
            "new name)"
        )


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """The task instance a training job belongs to."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    #: The try's task instance id (a UUID the deployment's scheduler made); "" where none is known.
    ti_id: str = ""

    @property
    def deployment_component(self) -> str:
        """Six hex digits of the task instance id's SHA-256: what sets two deployments' names apart (two
        Airflow deployments in one AWS account can run the same DAG, run and task ids); "" without one."""
        if not self.ti_id:
            return ""
        return hashlib.sha256(self.ti_id.encode()).hexdigest()[:DEPLOYMENT_COMPONENT_LENGTH]

    @property
    def task_key(self) -> str:
        """The same for every try of the task instance: names its checkpoint prefix."""
        slug = _slug(f"{self.dag_id}-{self.task_id}")[:32].strip("-") or "task"
        digest = hashlib.sha256(
            "\0".join([self.dag_id, self.run_id, self.task_id, str(self.map_index)]).encode()
        ).hexdigest()[:10]
        return f"{slug}-{digest}"

    @property
    def base_name(self) -> str:
        """``<task key>-<deployment component>-t<try>``: the attempts of one try are
        ``<base_name>-a<attempt>`` (no component where the task instance id is not known)."""
        component = self.deployment_component
        base = (
            f"{self.task_key}-{component}-t{self.try_number}"
            if component
            else f"{self.task_key}-t{self.try_number}"
        )
        if len(base) > MAX_TRAINING_JOB_NAME_LENGTH - _ATTEMPT_SUFFIX_ROOM:
            raise ValueError(f"try number {self.try_number} leaves no room for a training job name")
        return base


def training_job_name(identity: TaskIdentity, attempt: int) -> str:
    """The training job of ``attempt`` (1 for the first grant): a valid SageMaker name of <= 63 chars."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    name = f"{identity.base_name}-a{attempt}"
    if len(name) > MAX_TRAINING_JOB_NAME_LENGTH or not TRAINING_JOB_NAME_PATTERN.match(name):
        raise ValueError(f"{name!r} is not a valid SageMaker training job name")
    return name


def checkpoint_s3_uri(request: Mapping[str, Any], identity: TaskIdentity, *, per_try: bool = False) -> str:
    """The checkpoint prefix of this task instance's attempts.

    The request's own ``CheckpointConfig.S3Uri`` is used as given (a checkpoint seeded there is found);
    without one, ``<OutputDataConfig.S3OutputPath>/checkpoints/<task key>/``, which every attempt and try
    of the task instance shares and no other task instance does. ``per_try``: each try gets its own,
    ``<that prefix>/try-<n>/`` (a retry or a clear with new hyperparameters starts afresh).
    """
    configured = (request.get("CheckpointConfig") or {}).get("S3Uri")
    if configured:
        prefix = str(configured)
    else:
        prefix = (
            f"{str(request['OutputDataConfig']['S3OutputPath']).rstrip('/')}/checkpoints/{identity.task_key}/"
        )
    if per_try:
        prefix = f"{prefix.rstrip('/')}/try-{identity.try_number}/"
    return prefix


def quota_tags(
    identity: TaskIdentity, *, job_queue: str, quota_share_name: str, attempt: int, lease_id: str
) -> dict[str, str]:
    """The tags that say which queue, share, DAG run, task and attempt a training job belongs to."""
    values = {
        "job-queue": job_queue,
        "quota-share": quota_share_name,
        "dag-id": identity.dag_id,
        "run-id": identity.run_id,
        "task-id": identity.task_id,
        "map-index": str(identity.map_index),
        "try-number": str(identity.try_number),
        "attempt": str(attempt),
        "lease-id": lease_id,
    }
    if identity.ti_id:
        values[OWNER_TAG_KEY] = identity.ti_id
    return {f"{TAG_PREFIX}{key}": _tag_value(value) for key, value in values.items()}


def capacity_of(request: Mapping[str, Any]) -> tuple[str, int]:
    """The instance type and count the request asks for (its ``ResourceConfig``)."""
    problems = capacity_problems(request)
    if problems:
        raise TrainingRequestError(problems)
    resource = request["ResourceConfig"]
    return str(resource["InstanceType"]), int(resource["InstanceCount"])


def capacity_problems(request: Mapping[str, Any]) -> list[str]:
    resource = request.get("ResourceConfig")
    if not isinstance(resource, Mapping):
        return [
            "ResourceConfig: missing; give InstanceType and InstanceCount (the capacity the quota counts)"
        ]
    problems = []
    if resource.get("InstanceGroups"):
        problems.append(
            "ResourceConfig.InstanceGroups: heterogeneous clusters are not supported; "
            "give one InstanceType and InstanceCount"
        )
    if not isinstance(resource.get("InstanceType"), str) or not resource.get("InstanceType"):
        problems.append("ResourceConfig.InstanceType: missing; give an instance type such as ml.p4d.24xlarge")
    count = _rendered_integer(resource.get("InstanceCount"))
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        shown = show_value(count) if isinstance(count, str) else repr(count)
        problems.append(f"ResourceConfig.InstanceCount: must be a whole number >= 1, got {shown}")
    return problems


def _rendered_integer(value: Any) -> Any:
    """An integer Jinja rendered as text (plain ASCII digits, at most 100) as an int; else ``value``."""
    if not isinstance(value, str) or len(value) > MAX_PLAIN_DIGITS:
        return value
    number = plain_whole_number(value.strip())
    return value if number is None else number


def normalized_request(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy with the integer fields Jinja renders as strings cast back (as the stock operator does)."""
    request = copy.deepcopy(dict(raw))
    for section, field in (
        ("ResourceConfig", "InstanceCount"),
        ("ResourceConfig", "VolumeSizeInGB"),
        ("StoppingCondition", "MaxRuntimeInSeconds"),
        ("StoppingCondition", "MaxWaitTimeInSeconds"),
        ("StoppingCondition", "MaxPendingTimeInSeconds"),
        ("ResourceConfig", "KeepAlivePeriodInSeconds"),
    ):
        value = (request.get(section) or {}).get(field)
        if isinstance(value, str):
            request[section][field] = _rendered_integer(value)
    return request


#: What a worker needs to compile a SageMaker SDK ``ModelTrainer`` (the SDK is an optional extra).
SAGEMAKER_EXTRA_INSTALL: Final = "pip install 'airflow-quota[sagemaker]'"


def is_model_trainer(value: Any) -> bool:
    """Whether ``value`` is a SageMaker SDK ``ModelTrainer``, or a subclass's instance. Imports nothing
    when the SDK is not loaded (no ModelTrainer can exist then)."""
    if "sagemaker" not in sys.modules:
        return False
    from sagemaker.train import ModelTrainer

    return isinstance(value, ModelTrainer)


def compile_model_trainer(trainer: Any, input_data_config: Any) -> dict[str, Any]:
    """The CreateTrainingJob request ``trainer`` would send (the SDK's own builder, which uploads its
    ``source_code`` to S3 now)."""
    request: dict[str, Any] = trainer._create_training_job_args(
        input_data_config=input_data_config, boto3=True
    )
    return request


def sagemaker_sdk_missing() -> str | None:
    """The problem to report when the SageMaker SDK is not installed here; None when it is."""
    if importlib.util.find_spec("sagemaker") is not None:
        return None
    return f"a ModelTrainer needs the SageMaker SDK, not installed on this worker: {SAGEMAKER_EXTRA_INSTALL}"


def request_problems(request: Mapping[str, Any]) -> list[str]:
    """Everything SageMaker's API model refuses in a CreateTrainingJob request, plus what we need.

    Checked offline with botocore's own parameter validation (unknown fields, missing required fields,
    wrong types), so a bad request fails before the task waits for quota.
    """
    from botocore.validate import ParamValidator

    problems = capacity_problems(request) + unsupported_problems(request)
    document = {**request, "TrainingJobName": request.get("TrainingJobName") or "placeholder"}
    report = ParamValidator().validate(document, _create_training_job_shape())
    if report.has_errors():
        lines = report.generate_report().splitlines()
        problems += [
            line.strip() for line in lines if line.strip() and not line.startswith("Parameter validation")
        ]
    return problems


def unsupported_problems(request: Mapping[str, Any]) -> list[str]:
    """What SageMaker accepts but a quota-managed job refuses: managed spot training and warm pools.

    A spot job that SageMaker interrupts waits for spot capacity inside the same training job (secondary
    status ``Interrupted``, up to ``MaxWaitTimeInSeconds``) while its lease stays held, and its
    ``MaxWaitTimeInSeconds`` would start again with every attempt a preemption launches; a warm pool
    (``KeepAlivePeriodInSeconds``) keeps the instances running, and billed, after the job ends and its
    capacity is released to other jobs, so the quota would no longer count what runs. Refused rather than
    half supported: docs/operator.md, "Managed spot training and warm pools".
    """
    problems = []
    resource = request.get("ResourceConfig")
    stopping = request.get("StoppingCondition")
    if request.get("EnableManagedSpotTraining") not in (None, False):
        problems.append(
            "EnableManagedSpotTraining: managed spot training is not supported for quota-managed jobs "
            "(a spot interruption and a quota preemption would both restart the job, and "
            "MaxWaitTimeInSeconds would restart with every attempt); leave it out or set it to false"
        )
    if isinstance(stopping, Mapping) and stopping.get("MaxWaitTimeInSeconds") is not None:
        problems.append(
            "StoppingCondition.MaxWaitTimeInSeconds: only for managed spot training, which quota-managed "
            "jobs do not support; bound the job with MaxRuntimeInSeconds"
        )
    if isinstance(resource, Mapping) and resource.get("KeepAlivePeriodInSeconds") not in (None, 0):
        problems.append(
            "ResourceConfig.KeepAlivePeriodInSeconds: warm pools are not supported for quota-managed jobs "
            "(the warm instances keep running and billing after the job's quota is released, uncounted); "
            "leave it out or set it to 0"
        )
    return problems


@cache
def _create_training_job_shape() -> Any:
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return model.operation_model("CreateTrainingJob").input_shape


def build_request(
    request: Mapping[str, Any], *, name: str, checkpoint_uri: str, tags: Mapping[str, str]
) -> dict[str, Any]:
    """The request of one attempt: our name, the task's checkpoint prefix, the user's tags plus ours."""
    built = normalized_request(request)
    built["TrainingJobName"] = name
    built["CheckpointConfig"] = {**(built.get("CheckpointConfig") or {}), "S3Uri": checkpoint_uri}
    user_tags = [tag for tag in built.get("Tags") or [] if tag.get("Key") not in tags]
    built["Tags"] = [*user_tags, *({"Key": key, "Value": value} for key, value in tags.items())]
    return built


def is_running(description: Mapping[str, Any] | None) -> bool:
    return description is not None and description.get("TrainingJobStatus") in RUNNING_STATUSES


class SageMakerTrainingJobs:
    """The training jobs of one AWS connection and region, through the amazon provider's hook."""

    def __init__(
        self,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        *,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
    ) -> None:
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.verify = verify
        self.botocore_config = botocore_config
        self._hook: Any = None

    @property
    def hook(self) -> Any:
        """The provider's ``SageMakerHook`` (built on first use: building it reads the connection)."""
        if self._hook is None:
            from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook

            self._hook = SageMakerHook(  # type: ignore[no-untyped-call]
                aws_conn_id=self.aws_conn_id,
                region_name=self.region_name,
                verify=self.verify,
                config=self.botocore_config,
            )
        return self._hook

    @property
    def region(self) -> str:
        return str(self.hook.conn_region_name)

    @property
    def partition(self) -> str:
        return str(self.hook.conn_partition)

    def launch(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create the training job, or find the one of the same name: (its description, created now?).

        Idempotent on the name: SageMaker refuses a second job of a name, and that refusal means this
        attempt was already launched (by this task before a crash, or before a resume), so it is
        re-attached instead.
        """
        name = str(request["TrainingJobName"])
        try:
            self.hook.create_training_job(dict(request), wait_for_completion=False, print_log=False)
            created = True
        except ClientError as error:
            if _code(error) in CAPACITY_ERROR_CODES:
                raise CapacityRefused(_code(error), _message(error)) from error
            if not _already_exists(error):
                raise
            created = False
        description = self.describe(name)
        if description is None:  # pragma: no cover - SageMaker just said it exists
            raise RuntimeError(f"training job {name} was created but cannot be described")
        if not created:
            self._check_owner(name, description, request)
            log.info("Training job %s already exists and is this task's: attaching to it", name)
        return description, created

    def _check_owner(self, name: str, description: Mapping[str, Any], request: Mapping[str, Any]) -> None:
        """Raise ``TrainingJobNameTaken`` unless the existing job ``name`` carries the request's owner tag
        (``OWNER_TAG_KEY``: the task instance that launches it). A request without one (no task instance
        id known) accepts any job of its name, as before names carried one."""
        key = f"{TAG_PREFIX}{OWNER_TAG_KEY}"
        ours = next((tag.get("Value") for tag in request.get("Tags") or [] if tag.get("Key") == key), None)
        if ours is None:
            return
        answer = self.hook.conn.list_tags(ResourceArn=description["TrainingJobArn"], MaxResults=100)
        theirs = next((tag.get("Value") for tag in answer.get("Tags") or [] if tag.get("Key") == key), None)
        if theirs != ours:
            raise TrainingJobNameTaken(name, theirs)

    def describe(self, name: str) -> dict[str, Any] | None:
        """DescribeTrainingJob, or None when there is no training job of that name."""
        try:
            return dict(self.hook.describe_training_job(name))
        except ClientError as error:
            if _not_found(error):
                return None
            raise

    def request_stop(self, name: str) -> dict[str, Any] | None:
        """StopTrainingJob without waiting; a job already stopping or ended is left as it is.

        Returns the job's description after the request (None when there is no such job).
        """
        try:
            self.hook.conn.stop_training_job(TrainingJobName=name)
            log.info("Asked SageMaker to stop training job %s", name)
        except ClientError as error:
            if not (_not_found(error) or _not_stoppable(error)):
                raise
            log.info("Training job %s needs no stop: %s", name, _message(error))
        return self.describe(name)

    def stop_and_wait(
        self, name: str, *, poll_interval: float = 10.0, timeout: float = 1800.0
    ) -> dict[str, Any] | None:
        """Stop the training job and wait until it has really ended (``Stopped``, or ended on its own).

        Returns its last description (None when there is no such job). Raises ``TimeoutError`` when it
        still runs after ``timeout`` seconds: its capacity must not be counted free before it ends.

        The wait is botocore's ``TrainingJobCompletedOrStopped`` waiter (through the hook), which counts
        DescribeTrainingJob calls rather than seconds: ``timeout / poll_interval`` polls after the first,
        so it may run past ``timeout`` by the time those calls take. It ends in ``WaiterError`` on
        ``Failed``, on a job gone (``ValidationException``) and after its last poll: each is read from a
        last DescribeTrainingJob, as the job's end or the timeout.
        """
        description = self.request_stop(name)
        if not is_running(description):
            return description
        delay = max(poll_interval, _MIN_STOP_POLL_SECONDS)
        waiter = self.hook.get_waiter("training_job_completed_or_stopped")
        try:
            polls = 1 + math.ceil(timeout / delay)
            waiter.wait(TrainingJobName=name, WaiterConfig={"Delay": delay, "MaxAttempts": polls})
        except WaiterError as error:
            log.debug("Waiting for training job %s to stop ended with: %s", name, error)
        description = self.describe(name)
        if is_running(description):
            status = description.get("TrainingJobStatus") if description else None
            raise TimeoutError(f"training job {name} is still {status} after {timeout:.0f} s")
        return description


#: The allocator runs in the scheduler: its SageMaker calls give up quickly and are asked again later.
ALLOCATOR_BOTOCORE_CONFIG: dict[str, Any] = {
    "connect_timeout": 5,
    "read_timeout": 10,
    "retries": {"max_attempts": 2, "mode": "standard"},
}


#: Seconds the allocator reuses one SageMaker client: a changed connection or credentials are read again
#: after this (a client is also rebuilt at once after an error that says its credentials expired).
ALLOCATOR_CLIENT_MAX_AGE_SECONDS: Final = 600.0
#: Error codes after which the allocator rebuilds its client (credentials expired or no longer valid).
CREDENTIAL_ERROR_CODES: Final = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
    }
)
_allocator_clients: dict[tuple[str | None, str | None], tuple[float, SageMakerTrainingJobs]] = {}
_allocator_clients_lock = threading.Lock()


def allocator_training_jobs(aws_conn_id: str | None, region_name: str | None) -> SageMakerTrainingJobs:
    """The allocator's SageMaker client for one connection and region, built once per process and reused
    for ``ALLOCATOR_CLIENT_MAX_AGE_SECONDS``: building one reads the connection and loads botocore's
    SageMaker model (most of a second), far more than a StopTrainingJob call takes."""
    key = (aws_conn_id, region_name)
    now = time.monotonic()
    with _allocator_clients_lock:
        cached = _allocator_clients.get(key)
        if cached is not None and now - cached[0] < ALLOCATOR_CLIENT_MAX_AGE_SECONDS:
            return cached[1]
        jobs = SageMakerTrainingJobs(aws_conn_id, region_name, botocore_config=ALLOCATOR_BOTOCORE_CONFIG)
        _allocator_clients[key] = (now, jobs)
        return jobs


def forget_allocator_clients() -> None:
    """Drop the allocator's cached clients: the next call builds new ones (the connection read again)."""
    with _allocator_clients_lock:
        _allocator_clients.clear()


def request_training_job_stop(aws_conn_id: str | None, region_name: str | None, name: str) -> str | None:
    """For the allocator (orphans, preemption victims): ask a training job to stop, without waiting.

    Returns its ``TrainingJobStatus`` after the request (``Stopping`` while it still runs; ``Stopped``,
    ``Completed`` or ``Failed`` once it no longer does), or None when there is no training job of that
    name. Calls go through the process's cached client (``allocator_training_jobs``) and time out within
    seconds (``ALLOCATOR_BOTOCORE_CONFIG``): an unreachable SageMaker must not hold the scheduler's loop.
    A client whose credentials SageMaker refuses as expired is rebuilt and the request made once more.
    """
    key = (aws_conn_id, region_name)
    jobs = allocator_training_jobs(aws_conn_id, region_name)
    try:
        return _status_after_stop(jobs, name)
    except ClientError as error:
        if _code(error) not in CREDENTIAL_ERROR_CODES:
            raise
        log.info("SageMaker refused the allocator's credentials (%s): reading them again", _code(error))
        with _allocator_clients_lock:
            cached = _allocator_clients.get(key)
            if cached is not None and cached[1] is jobs:
                del _allocator_clients[key]
    return _status_after_stop(allocator_training_jobs(aws_conn_id, region_name), name)


def _status_after_stop(jobs: SageMakerTrainingJobs, name: str) -> str | None:
    description = jobs.request_stop(name)
    return None if description is None else str(description.get("TrainingJobStatus"))


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-zA-Z0-9]", "-", text)).strip("-")


def _tag_value(value: str) -> str:
    return _TAG_VALUE_UNSAFE.sub("_", value)[:_MAX_TAG_VALUE_LENGTH]


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _message(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Message", ""))


def _already_exists(error: ClientError) -> bool:
    message = _message(error).lower()
    return _code(error) == "ResourceInUse" or "already exists" in message or "must be unique" in message


def _not_found(error: ClientError) -> bool:
    message = _message(error).lower()
    return _code(error) == "ResourceNotFound" or (
        _code(error) == "ValidationException" and ("could not find" in message or "not found" in message)
    )


def _not_stoppable(error: ClientError) -> bool:
    return _code(error) == "ValidationException" and "in status" in _message(error)
