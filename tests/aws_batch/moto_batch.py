"""moto's server with AWS Batch quota management and service jobs (this part is ours) beside our SageMaker.

moto 5.2.5 answers "Not yet implemented" to CreateServiceEnvironment, CreateQuotaShare, SubmitServiceJob
and GetJobQueueSnapshot, and drops a scheduling policy's ``quotaSharePolicy``. ``install()`` adds, in the
process that hosts the server, these operations of botocore's ``batch`` model:

* CreateServiceEnvironment, UpdateServiceEnvironment, DescribeServiceEnvironments; Create- and
  UpdateSchedulingPolicy with a ``quotaSharePolicy`` and Create- and UpdateJobQueue of ``jobQueueType:
  SAGEMAKER_TRAINING`` (other policies and queues stay moto's, and ListSchedulingPolicies,
  DescribeSchedulingPolicies and DescribeJobQueues answer both); TagResource and ListTagsForResource of
  these resources (the tags their Describe* answers show);
* CreateQuotaShare, UpdateQuotaShare, DescribeQuotaShare, ListQuotaShares;
* SubmitServiceJob (``clientToken``: the same request again is rejected, as AWS's documentation says,
  except in ``REPLAYING_REGION``, whose emulator answers the first job: ``service_jobs``),
  DescribeServiceJob, ListServiceJobs, UpdateServiceJob, TerminateServiceJob(s), GetJobQueueSnapshot,

scheduled by our engine (``service_jobs``): each attempt is a training job of the emulated SageMaker of
the same server, stopped when preempted. One route is the tests' own, not AWS's: ``POST
/v1/emulatorsettings`` ``{"accountId", "region", "prefix", "behaviour": {"invisibleSeconds",
"creatingSeconds", "updatingSeconds", "invalidReason", "refuse": {operation: message}, "serviceJobs":
{...}}}`` makes the resources of a name prefix behave so (``batch_resources.Behaviour``), and the service
jobs of its job queues (``service_jobs.JobBehaviour``: List lag, page size, throttling and server errors,
SUBMITTED/PENDING/SCHEDULED, insufficient capacity; ``conftest.emulator_behaviour``).
``python -m tests.aws_batch.moto_batch`` starts the server with both emulators
(``tests.sagemaker.moto_process`` runs it); it prints ``PORT <n>`` once it serves.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from moto.batch import responses as batch_responses
from moto.batch import urls as batch_urls
from moto.batch.exceptions import ClientException
from moto.core.exceptions import ServiceException
from moto.sagemaker.models import sagemaker_backends

from tests.aws_batch.batch_resources import BatchClientError, BatchResources, Behaviour
from tests.aws_batch.regions import REPLAYING_REGION
from tests.aws_batch.service_jobs import JobBehaviour, ServiceJobs, TransientError
from tests.sagemaker import moto_sagemaker

_LOCK = threading.RLock()
#: Each account and region's resources and jobs.
_EMULATORS: dict[tuple[str, str], ServiceJobs] = {}

#: The training-job fields of a CreateTrainingJob request, as moto's SageMaker backend takes them.
_TRAINING_JOB_FIELDS = {
    "HyperParameters": "hyper_parameters",
    "AlgorithmSpecification": "algorithm_specification",
    "RoleArn": "role_arn",
    "InputDataConfig": "input_data_config",
    "OutputDataConfig": "output_data_config",
    "ResourceConfig": "resource_config",
    "VpcConfig": "vpc_config",
    "StoppingCondition": "stopping_condition",
    "Tags": "tags",
    "EnableNetworkIsolation": "enable_network_isolation",
    "EnableInterContainerTrafficEncryption": "enable_inter_container_traffic_encryption",
    "EnableManagedSpotTraining": "enable_managed_spot_training",
    "CheckpointConfig": "checkpoint_config",
    "DebugHookConfig": "debug_hook_config",
    "DebugRuleConfigurations": "debug_rule_configurations",
    "TensorBoardOutputConfig": "tensor_board_output_config",
    "ExperimentConfig": "experiment_config",
}
_FLAGS = {
    "enable_network_isolation",
    "enable_inter_container_traffic_encryption",
    "enable_managed_spot_training",
}


class MotoTrainingJobs:
    """``service_jobs.TrainingJobs`` over moto's SageMaker backend (with our emulator's patches)."""

    def __init__(self, account_id: str, region: str) -> None:
        self.account_id = account_id
        self.region = region

    @property
    def backend(self) -> Any:
        return sagemaker_backends[self.account_id][self.region]

    def create(self, request: dict[str, Any]) -> str:
        kwargs = {snake: request.get(pascal) for pascal, snake in _TRAINING_JOB_FIELDS.items()}
        for flag in _FLAGS:
            kwargs[flag] = bool(kwargs[flag])
        try:
            job = self.backend.create_training_job(training_job_name=request["TrainingJobName"], **kwargs)
        except ServiceException as error:  # what SageMaker answers: ValidationException, ResourceInUse
            raise BatchClientError(f"{error.code}: {error.message}") from None
        return str(job.arn)

    def status(self, name: str) -> tuple[str, str, str | None]:
        # Every answer of this server looks at each running attempt: from the emulator's timeline, without
        # building moto's whole DescribeTrainingJob answer (most of an answer's work with a dozen running).
        job = self.backend.training_jobs.get(name)
        known = moto_sagemaker.status_of(job.arn) if job is not None else None
        if known is not None:
            return known
        described = self.backend.describe_training_job(name)
        return (
            described["TrainingJobStatus"],
            described.get("SecondaryStatus", ""),
            described.get("FailureReason"),
        )

    def stop(self, name: str) -> None:
        with contextlib.suppress(ServiceException):  # no longer InProgress: its end is seen at the next tick
            self.backend.stop_training_job(name)


def emulator(account_id: str, region: str) -> ServiceJobs:
    key = (account_id, region)
    if key not in _EMULATORS:
        _EMULATORS[key] = ServiceJobs(
            BatchResources(account_id, region),
            MotoTrainingJobs(account_id, region),
            repeated_client_token="REPLAY" if region == REPLAYING_REGION else "REJECT",
        )
    return _EMULATORS[key]


def _serves(
    handler: Callable[[Any, ServiceJobs, dict[str, Any], float], dict[str, Any]],
) -> Callable[[Any], Any]:
    """A BatchResponse method: parse the body, tick the scheduler, answer JSON; a ``BatchClientError``
    becomes AWS's ``ClientException``, a ``TransientError`` (throttling, a server error on request) its own
    status and code."""

    operation = _OPERATION_NAMES.get(handler.__name__.lstrip("_").replace("_", ""), "")

    def method(response: Any) -> str | tuple[int, dict[str, str], str]:
        body = json.loads(response.body or "{}")
        now = time.time()
        with _LOCK:
            jobs = emulator(response.current_account, response.region)
            try:
                jobs.check_transient(operation, body)
                jobs.tick(now)
                return json.dumps(handler(response, jobs, body, now))
            except BatchClientError as error:
                raise ClientException(str(error)) from None
            except TransientError as error:
                headers = {
                    "status": str(error.status),  # moto reads the status from the headers
                    "x-amzn-ErrorType": error.code,
                    "Content-Type": "application/json",
                }
                return error.status, headers, json.dumps({"__type": error.code, "message": str(error)})

    method.__name__ = handler.__name__
    return method


# -- the operations moto lacks ------------------------------------------------------------------------


def _create_service_environment(
    _: Any, jobs: ServiceJobs, body: dict[str, Any], now: float
) -> dict[str, Any]:
    return jobs.resources.create_environment(body)


def _describe_service_environments(
    _: Any, jobs: ServiceJobs, body: dict[str, Any], now: float
) -> dict[str, Any]:
    return jobs.resources.describe_environments(body.get("serviceEnvironments") or [])


def _update_service_environment(
    _: Any, jobs: ServiceJobs, body: dict[str, Any], now: float
) -> dict[str, Any]:
    return jobs.resources.update_environment(body)


def _create_quota_share(_: Any, jobs: ServiceJobs, body: dict[str, Any], now: float) -> dict[str, Any]:
    return jobs.resources.create_share(body)


def _update_quota_share(_: Any, jobs: ServiceJobs, body: dict[str, Any], now: float) -> dict[str, Any]:
    return jobs.resources.update_share(body)


def _describe_quota_share(_: Any, jobs: ServiceJobs, body: dict[str, Any], now: float) -> dict[str, Any]:
    return jobs.resources.describe_share(body["quotaShareArn"])


def _list_quota_shares(_: Any, jobs: ServiceJobs, body: dict[str, Any], now: float) -> dict[str, Any]:
    return jobs.resources.list_shares(body["jobQueue"])


def _submit_service_job(_: Any, jobs: ServiceJobs, body: dict[str, Any], now: float) -> dict[str, Any]:
    if body.get("serviceJobType") != "SAGEMAKER_TRAINING":
        raise BatchClientError("serviceJobType must be SAGEMAKER_TRAINING")
    return jobs.submit(body, now)


def _describe_service_job(_: Any, jobs: ServiceJobs, body: dict[str, Any], now: float) -> dict[str, Any]:
    return jobs.describe(body["jobId"])


def _list_service_jobs(_: Any, jobs: ServiceJobs, body: dict[str, Any], now: float) -> dict[str, Any]:
    return jobs.list(body, now)


def _update_service_job(_: Any, jobs: ServiceJobs, body: dict[str, Any], now: float) -> dict[str, Any]:
    return jobs.update(body, now)


def _terminate_service_job(_: Any, jobs: ServiceJobs, body: dict[str, Any], now: float) -> dict[str, Any]:
    return jobs.terminate(body["jobId"], body["reason"], now)


def _terminate_service_jobs(_: Any, jobs: ServiceJobs, body: dict[str, Any], now: float) -> dict[str, Any]:
    successful: list[str] = []
    errors: list[dict[str, str]] = []
    for job_id in body["jobs"]:
        try:
            jobs.terminate(job_id, body["reason"], now)
            successful.append(job_id)
        except BatchClientError as error:
            errors.append({"job": job_id, "code": "ClientException", "message": str(error)})
    return {"successful": successful, "errors": errors}


def _get_job_queue_snapshot(_: Any, jobs: ServiceJobs, body: dict[str, Any], now: float) -> dict[str, Any]:
    return jobs.snapshot(body["jobQueue"], now)


#: The AWS name of each of our operations (``submitservicejob`` -> ``SubmitServiceJob``).
_OPERATION_NAMES = {
    name.lower(): name
    for name in (
        "SubmitServiceJob",
        "DescribeServiceJob",
        "ListServiceJobs",
        "UpdateServiceJob",
        "TerminateServiceJob",
        "TerminateServiceJobs",
        "GetJobQueueSnapshot",
    )
}

_NEW_OPERATIONS = {
    "createserviceenvironment": _create_service_environment,
    "describeserviceenvironments": _describe_service_environments,
    "updateserviceenvironment": _update_service_environment,
    "createquotashare": _create_quota_share,
    "updatequotashare": _update_quota_share,
    "describequotashare": _describe_quota_share,
    "listquotashares": _list_quota_shares,
    "submitservicejob": _submit_service_job,
    "describeservicejob": _describe_service_job,
    "listservicejobs": _list_service_jobs,
    "updateservicejob": _update_service_job,
    "terminateservicejob": _terminate_service_job,
    "terminateservicejobs": _terminate_service_jobs,
    "getjobqueuesnapshot": _get_job_queue_snapshot,
}


# -- the operations moto has, shared with ours ----------------------------------------------------------

_moto_create_job_queue = batch_responses.BatchResponse.createjobqueue
_moto_describe_job_queues = batch_responses.BatchResponse.describejobqueues
_moto_create_scheduling_policy = batch_responses.BatchResponse.createschedulingpolicy
_moto_describe_scheduling_policies = batch_responses.BatchResponse.describeschedulingpolicies
_moto_list_scheduling_policies = batch_responses.BatchResponse.listschedulingpolicies
_moto_update_scheduling_policy = batch_responses.BatchResponse.updateschedulingpolicy
_moto_update_job_queue = batch_responses.BatchResponse.updatejobqueue
_moto_tags = batch_responses.BatchResponse.tags


def _create_job_queue(response: Any) -> str:
    body = json.loads(response.body or "{}")
    if body.get("jobQueueType") != "SAGEMAKER_TRAINING":
        return str(_moto_create_job_queue(response))
    return str(_serves(lambda _, jobs, body, now: jobs.resources.create_queue(body))(response))


def _describe_job_queues(response: Any) -> str:
    body = json.loads(response.body or "{}")
    with _LOCK:
        resources = emulator(response.current_account, response.region).resources
        asked = body.get("jobQueues") or []
        ours = resources.describe_queues(asked)
    if asked and all(resources.is_ours(reference, "job-queue") for reference in asked):
        theirs: list[Any] = []
    else:
        theirs = json.loads(_moto_describe_job_queues(response))["jobQueues"]
    return json.dumps({"jobQueues": [*theirs, *ours]})


def _create_scheduling_policy(response: Any) -> str:
    body = json.loads(response.body or "{}")
    if "quotaSharePolicy" not in body:
        return str(_moto_create_scheduling_policy(response))
    return str(_serves(lambda _, jobs, body, now: jobs.resources.create_policy(body))(response))


def _describe_scheduling_policies(response: Any) -> str:
    body = json.loads(response.body or "{}")
    with _LOCK:
        ours = emulator(response.current_account, response.region).resources.describe_policies(
            body.get("arns") or []
        )
    theirs = json.loads(_moto_describe_scheduling_policies(response))["schedulingPolicies"]
    return json.dumps({"schedulingPolicies": [*theirs, *ours]})


def _update_job_queue(response: Any) -> str:
    body = json.loads(response.body or "{}")
    with _LOCK:
        ours = emulator(response.current_account, response.region).resources.is_ours(
            body.get("jobQueue", ""), "job-queue"
        )
    if not ours:
        return str(_moto_update_job_queue(response))
    return str(_serves(lambda _, jobs, body, now: jobs.resources.update_queue(body))(response))


def _update_scheduling_policy(response: Any) -> str:
    body = json.loads(response.body or "{}")
    with _LOCK:
        ours = emulator(response.current_account, response.region).resources.is_ours(
            body.get("arn", ""), "scheduling-policy"
        )
    if not ours:
        return str(_moto_update_scheduling_policy(response))
    _serves(lambda _, jobs, body, now: jobs.resources.update_policy(body))(response)
    return ""


def _list_scheduling_policies(response: Any) -> str:
    with _LOCK:
        ours = emulator(response.current_account, response.region).resources.policy_arns()
    theirs = json.loads(_moto_list_scheduling_policies(response))["schedulingPolicies"]
    return json.dumps({"schedulingPolicies": [*theirs, *({"arn": arn} for arn in ours)]})


def _tags(response: Any) -> str:
    """TagResource (POST) and ListTagsForResource (GET) of our resources; the rest, and UntagResource,
    moto's."""
    arn = unquote(response.path).split("/v1/tags/")[-1]
    with _LOCK:
        body = emulator(response.current_account, response.region).resources.tagged(arn)
        if body is None or response.method not in ("POST", "GET"):
            return str(_moto_tags(response))
        if response.method == "POST":
            body["tags"] = {**body.get("tags", {}), **json.loads(response.body or "{}").get("tags", {})}
            return ""
        return json.dumps({"tags": body.get("tags", {})})


def _emulator_settings(response: Any) -> str:
    """The tests' route (not AWS's): how the resources of a name prefix behave from now on."""
    body = json.loads(response.body or "{}")
    with _LOCK:
        resources = emulator(body["accountId"], body["region"]).resources
        behaviour = body.get("behaviour") or {}
        resources.behave(body["prefix"], Behaviour.from_request(behaviour))
        jobs = emulator(body["accountId"], body["region"])
        jobs.behave(body["prefix"], JobBehaviour.from_request(behaviour.get("serviceJobs") or {}))
    return "{}"


def install() -> None:
    """Patch moto's Batch responses and routes in this process (idempotent); SageMaker's too."""
    moto_sagemaker.install()
    response_class = batch_responses.BatchResponse
    for action, handler in _NEW_OPERATIONS.items():
        setattr(response_class, action, _serves(handler))
        batch_urls.url_paths[f"{{0}}/v1/{action}$"] = response_class.dispatch
    response_class.createjobqueue = _create_job_queue  # type: ignore[method-assign,assignment]
    response_class.describejobqueues = _describe_job_queues  # type: ignore[method-assign,assignment]
    response_class.createschedulingpolicy = _create_scheduling_policy  # type: ignore[method-assign,assignment]
    response_class.describeschedulingpolicies = _describe_scheduling_policies  # type: ignore[method-assign,assignment]
    response_class.listschedulingpolicies = _list_scheduling_policies  # type: ignore[method-assign,assignment]
    response_class.updateschedulingpolicy = _update_scheduling_policy  # type: ignore[method-assign,assignment]
    response_class.updatejobqueue = _update_job_queue  # type: ignore[method-assign,assignment]
    response_class.tags = _tags  # type: ignore[method-assign,assignment]
    response_class.emulatorsettings = _emulator_settings  # type: ignore[attr-defined]
    batch_urls.url_paths["{0}/v1/emulatorsettings$"] = response_class.dispatch


def main(argv: list[str] | None = None) -> None:
    install()
    moto_sagemaker.main(argv)


if __name__ == "__main__":
    main()
