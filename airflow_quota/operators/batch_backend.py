"""QuotaTrainingOperator's AWS Batch strategy: on a job queue AWS Batch schedules (``scheduler: AWS_BATCH``
in the quota file), the training job is an AWS Batch service job.

No allocator, lease or admission trigger is involved: AWS Batch admits, preempts and re-queues. The task
submits one ``SAGEMAKER_TRAINING`` service job through the amazon provider's Batch hook
(``service_job_request``: the CreateTrainingJob request the SageMaker strategy builds, checkpoint
configuration included so AWS's re-queued attempts resume, the quota share, ``schedulingPriority`` even
when 0, ``preemptionConfiguration``, a timeout and tags) and waits deferred on ``BatchServiceJobTrigger``
(``triggers/batch_service_job.py``), which follows DescribeServiceJob. A killed task terminates the job.

Re-attaching: the service job's ``clientToken`` is ``<task key>-s<generation>``, the same for every try of
the task instance, so a try that crashed after its SubmitServiceJob and its retry name one job. The
generation moves on only when the caller knows that job ended (a retry after a failed training job must
submit a new one); ``BatchServiceJobHook.submit`` (``hooks/batch_service_job.py``) answers whether it found
an existing job. AWS documents that of
two identical requests with one ``clientToken`` "the second request is rejected" (botocore's model of
SubmitServiceJob), not that it answers the first job: so a ``ClientException`` from SubmitServiceJob is
followed by a look for the job the token submitted (ListServiceJobs by ``jobName``, then the job whose
``airflow-quota:client-token`` tag is this token, for a while: a List answer may lag the submission),
which is re-attached to; with none, the error stands. Every AWS Batch call goes through the hook, with the
task's connection, region, ``verify`` and ``botocore_config``, in the worker and in the trigger.

``BatchBackend`` is the strategy the operator calls: ``prepare`` (the SageMaker strategy's: a request
dict, a ``ModelTrainer`` or a factory), ``launch`` (submit, or re-attach to the job the task's store
names while it has not ended), ``monitor`` (the trigger), ``finish`` (the task's result, or its failure)
and ``request_stop``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from airflow_quota.aws_batch.service_jobs import CLIENT_TOKEN_TAG, FINAL_STATUSES
from airflow_quota.backends.sagemaker import (
    TAG_PREFIX,
    TaskIdentity,
    TrainingRequestError,
    build_request,
    checkpoint_s3_uri,
    quota_tags,
)
from airflow_quota.operators.backend import task_identity
from airflow_quota.operators.task_store import read_document

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_quota.operators.backend import PreparedRequest, TaskLog, TrainingJobConfig
    from airflow_quota.operators.sagemaker_backend import SageMakerBackend
    from airflow_quota.triggers.batch_service_job import BatchServiceJobTrigger

SERVICE_JOB_TYPE: Final = "SAGEMAKER_TRAINING"
#: XCom key of the task's service job (its id and ARN), pushed once it is submitted.
SERVICE_JOB_XCOM_KEY: Final = "quota_service_job"
#: ``task_state_store`` key of the task's service job: ``{"job_id", "generation"}`` (kept across tries).
SERVICE_JOB_KEY = "quota.service_job"
#: SubmitServiceJob ``tags`` holds at most 50.
_MAX_SERVICE_JOB_TAGS: Final = 50
#: The ``retryStrategy`` AWS's own SDK sends by default (``sagemaker.train.aws_batch.constants.
#: DEFAULT_SAGEMAKER_TRAINING_RETRY_CONFIG``, sagemaker 3.27.0, copied: the SDK is not a dependency): RETRY
#: when SageMaker reports its internal error, EXIT on anything else. ``attempts`` counts the times the job
#: may be put in RUNNABLE, the first included (AWS Batch's user guide), so with 1 the RETRY rule has no
#: further attempt to give: a task that wants SageMaker's internal errors retried by AWS Batch passes
#: ``retry_strategy={"attempts": 3, ...}``. Insufficient capacity is retried by AWS Batch whatever this says.
DEFAULT_RETRY_STRATEGY: Final[Mapping[str, Any]] = {
    "attempts": 1,
    "evaluateOnExit": [
        {
            "action": "RETRY",
            "onStatusReason": "Received status from SageMaker:InternalServerError: "
            "We encountered an internal error. Please try again.",
        },
        {"action": "EXIT", "onStatusReason": "*"},
    ],
}


@dataclass(frozen=True, slots=True)
class ServiceJobSpec:
    """What the operator asks of AWS Batch beside the training request."""

    job_queue: str
    quota_share_name: str
    scheduling_priority: int = 0
    preemption_retries_before_termination: int | None = None
    #: ``timeoutConfig.attemptDurationSeconds`` (None: not sent, AWS Batch defers to the training job's
    #: own ``StoppingCondition``).
    attempt_duration_seconds: int | None = None
    #: ``retryStrategy`` (None: ``DEFAULT_RETRY_STRATEGY``, what AWS's SDK sends).
    retry_strategy: Mapping[str, Any] | None = None


def client_token(identity: TaskIdentity, generation: int = 0) -> str:
    """The same for every try of one task instance (until ``generation`` moves on); at most 64 characters."""
    return f"{identity.task_key}-s{generation}"


def service_job_request(
    training_request: Mapping[str, Any], identity: TaskIdentity, spec: ServiceJobSpec, generation: int = 0
) -> dict[str, Any]:
    """The SubmitServiceJob request for this task instance; botocore's validator checks it.

    The payload's ``TrainingJobName`` is the task key (AWS Batch names each attempt's training job from
    it), and its ``CheckpointConfig.S3Uri`` the task's checkpoint prefix, shared by every attempt and try.
    ``retryStrategy`` is the spec's, else what AWS's SDK sends (``DEFAULT_RETRY_STRATEGY``).
    """
    tags = service_job_tags(identity, spec)
    payload = build_request(
        training_request,
        name=identity.task_key,
        checkpoint_uri=checkpoint_s3_uri(training_request, identity),
        tags=tags,
    )
    token = client_token(identity, generation)
    request: dict[str, Any] = {
        "jobName": identity.task_key,
        "jobQueue": spec.job_queue,
        "serviceJobType": SERVICE_JOB_TYPE,
        "serviceRequestPayload": json.dumps(payload, sort_keys=True),
        "quotaShareName": spec.quota_share_name,
        "schedulingPriority": spec.scheduling_priority,  # sent when 0 too: 0 is a priority
        "retryStrategy": _plain(spec.retry_strategy or DEFAULT_RETRY_STRATEGY),
        "tags": {**tags, CLIENT_TOKEN_TAG: token},
        "clientToken": token,
    }
    if spec.preemption_retries_before_termination is not None:
        request["preemptionConfiguration"] = {
            "preemptionRetriesBeforeTermination": spec.preemption_retries_before_termination
        }
    if spec.attempt_duration_seconds is not None:
        request["timeoutConfig"] = {"attemptDurationSeconds": spec.attempt_duration_seconds}
    problems = request_problems(request)
    if problems:
        raise TrainingRequestError(problems)
    return request


def _plain(value: Any) -> Any:
    """``value`` as plain dicts and lists (a template may render a mapping of another type)."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def service_job_tags(identity: TaskIdentity, spec: ServiceJobSpec) -> dict[str, str]:
    """The task's quota tags (queue, share, DAG, run, task, map index) without a lease or attempt (AWS
    Batch, not our allocator, hands out the capacity) and without the try: every try of the task instance
    sends the same request, so that its ``clientToken`` re-attaches."""
    tags = quota_tags(
        identity, job_queue=spec.job_queue, quota_share_name=spec.quota_share_name, attempt=0, lease_id=""
    )
    # Per try or per grant (a try's task instance id too): left out, so every try sends one request.
    per_grant = {f"{TAG_PREFIX}{key}" for key in ("attempt", "lease-id", "try-number", "ti-id")}
    return {key: value for key, value in tags.items() if key not in per_grant}


def request_problems(request: Mapping[str, Any]) -> list[str]:
    """What botocore's validator refuses in a SubmitServiceJob request, one line per problem."""
    # Imported here: botocore's validator and Batch model (~0.2 CPU-s) would cost every DAG file's import.
    from botocore.validate import ParamValidator

    from airflow_quota.aws_batch.botocore_model import batch_model

    shape = batch_model().operation_model("SubmitServiceJob").input_shape
    report = ParamValidator().validate(dict(request), shape)
    problems = report.generate_report().splitlines() if report.has_errors() else []
    if len(request.get("tags") or {}) > _MAX_SERVICE_JOB_TAGS:
        problems.append(f"tags: SubmitServiceJob takes at most {_MAX_SERVICE_JOB_TAGS} tags")
    return [problem.strip() for problem in problems]


class BatchBackend:
    """The operator's strategy on a job queue AWS Batch schedules. One per worker process (it holds the
    AWS session); ``log`` is the task's logger."""

    def __init__(
        self,
        *,
        sagemaker: SageMakerBackend,
        aws_conn_id: str | None,
        region_name: str | None,
        poll_interval: float,
        settle_seconds: float,
        log: TaskLog,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
    ) -> None:
        self.sagemaker = sagemaker
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.verify = verify
        self.botocore_config = botocore_config
        self.poll_interval = poll_interval
        self.settle_seconds = settle_seconds
        self.log = log
        # Imported here: the amazon provider's AwsBaseHook (boto3, botocore, requests: ~0.25 CPU-s) would
        # cost every DAG file's import of the operator; only a task on a queue AWS Batch schedules needs it.
        from airflow_quota.hooks.batch_service_job import BatchServiceJobHook

        self.jobs = BatchServiceJobHook(
            aws_conn_id=aws_conn_id, region_name=region_name, verify=verify, config=botocore_config
        )

    def prepare(self, config: TrainingJobConfig, context: Context) -> PreparedRequest:
        """The CreateTrainingJob request, rendered and validated as the SageMaker strategy does."""
        return self.sagemaker.prepare(config, context)

    def launch(self, context: Context, prepared: PreparedRequest, spec: ServiceJobSpec) -> dict[str, Any]:
        """The task's service job: the one its store names while that has not ended, else a new one
        (submitted under the next generation's ``clientToken``). Returns its DescribeServiceJob answer."""
        store, identity = context["task_state_store"], task_identity(context)
        kept = read_document(store.get(SERVICE_JOB_KEY)) or {}
        generation = 0
        if kept.get("job_id"):
            described = self.jobs.describe(str(kept["job_id"]))
            if described["status"] not in FINAL_STATUSES:
                self.log.info("Re-attaching to service job %s (%s)", described["jobId"], described["status"])
                return described
            generation = int(kept.get("generation", 0)) + 1
        while True:
            described, created = self.jobs.submit(
                service_job_request(prepared.document, identity, spec, generation)
            )
            store.set(SERVICE_JOB_KEY, {"job_id": described["jobId"], "generation": generation})
            if created or described["status"] not in FINAL_STATUSES:
                break
            generation += 1  # the token named a job that has ended: this try trains again
        self.log.info(
            "%s service job %s in quota share %s of job queue %s (%s x %d, priority %d): %s",
            "Submitted" if created else "Re-attached to",
            described["jobId"],
            spec.quota_share_name,
            spec.job_queue,
            prepared.capacity_unit,
            prepared.instance_count,
            spec.scheduling_priority,
            described["status"],
        )
        return described

    def monitor(self, job_id: str) -> BatchServiceJobTrigger:
        """The trigger to defer on: the task's connection, region, ``verify`` and ``botocore_config``."""
        from airflow_quota.triggers.batch_service_job import BatchServiceJobTrigger

        settle = timedelta(seconds=self.settle_seconds)
        return BatchServiceJobTrigger(
            job_id=job_id,
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
            verify=self.verify,
            botocore_config=self.botocore_config,
            poll_interval=self.poll_interval,
            not_before=(datetime.now(UTC) + settle).isoformat(),
        )

    def finish(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """The task's result (its XCom) once the service job SUCCEEDED; raise when it did not."""
        from airflow.sdk.exceptions import AirflowException

        job_id = event.get("job_id")
        for preemption in event.get("preemptions") or []:
            self.log.warning(
                "Service job %s: the attempt on training job %s was preempted: %s",
                job_id,
                preemption.get("training_job_arn"),
                preemption.get("status_reason"),
            )
        if event.get("status") != "SUCCEEDED":
            raise AirflowException(
                f"Service job {job_id} is {event.get('status')}: {event.get('status_reason')}"
            )
        self.log.info("Service job %s succeeded on training job %s", job_id, event.get("training_job_arn"))
        return {
            "service_job_id": job_id,
            "service_job_arn": event.get("job_arn"),
            "training_job_arn": event.get("training_job_arn"),
            "attempts": event.get("attempts"),
            "preemptions": list(event.get("preemptions") or []),
        }

    def request_stop(self, job_id: str, reason: str) -> None:
        self.jobs.terminate(job_id, reason)
