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
submit a new one); ``ServiceJobs.submit`` answers whether it found an existing job. AWS documents that of
two identical requests with one ``clientToken`` "the second request is rejected" (botocore's model of
SubmitServiceJob), not that it answers the first job: so a ``ClientException`` from SubmitServiceJob is
followed by a look for the job the token submitted (ListServiceJobs by ``jobName``, then the job whose
``airflow-quota:client-token`` tag is this token), which is re-attached to; with none, the error stands.

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

from botocore.exceptions import ClientError
from botocore.validate import ParamValidator

from airflow_quota.aws_batch.botocore_model import batch_model
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
#: The admission event that hands a task to AWS Batch: ``{"scheduler": "AWS_BATCH"}``, sent (instead of a
#: grant) to a task waiting on a job queue whose quota file entry says ``scheduler: AWS_BATCH``.
SCHEDULER_EVENT_KEY: Final = "scheduler"
AWS_BATCH: Final = "AWS_BATCH"
#: XCom key of the task's service job (its id and ARN), pushed once it is submitted.
SERVICE_JOB_XCOM_KEY: Final = "quota_service_job"
#: Service-job statuses after which nothing changes.
FINAL_STATUSES: Final = frozenset({"SUCCEEDED", "FAILED"})
#: ``task_state_store`` key of the task's service job: ``{"job_id", "generation"}`` (kept across tries).
SERVICE_JOB_KEY = "quota.service_job"
#: SubmitServiceJob ``tags`` holds at most 50.
_MAX_SERVICE_JOB_TAGS: Final = 50
#: The service job's tag holding its ``clientToken`` (DescribeServiceJob shows tags, not the token): how a
#: retry finds the job a rejected repeat of its request submitted.
CLIENT_TOKEN_TAG: Final = f"{TAG_PREFIX}client-token"


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


def client_token(identity: TaskIdentity, generation: int = 0) -> str:
    """The same for every try of one task instance (until ``generation`` moves on); at most 64 characters."""
    return f"{identity.task_key}-s{generation}"


def service_job_request(
    training_request: Mapping[str, Any], identity: TaskIdentity, spec: ServiceJobSpec, generation: int = 0
) -> dict[str, Any]:
    """The SubmitServiceJob request for this task instance; botocore's validator checks it.

    The payload's ``TrainingJobName`` is the task key (AWS Batch names each attempt's training job from
    it), and its ``CheckpointConfig.S3Uri`` the task's checkpoint prefix, shared by every attempt and try.
    Airflow's retries handle a failed job, so AWS Batch retries none (``retryStrategy.attempts: 1``).
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
        "retryStrategy": {"attempts": 1},
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


def service_job_tags(identity: TaskIdentity, spec: ServiceJobSpec) -> dict[str, str]:
    """The task's quota tags (queue, share, DAG, run, task, map index) without a lease or attempt (AWS
    Batch, not our allocator, hands out the capacity) and without the try: every try of the task instance
    sends the same request, so that its ``clientToken`` re-attaches."""
    tags = quota_tags(
        identity, job_queue=spec.job_queue, quota_share_name=spec.quota_share_name, attempt=0, lease_id=""
    )
    per_grant = {f"{TAG_PREFIX}{key}" for key in ("attempt", "lease-id", "try-number")}
    return {key: value for key, value in tags.items() if key not in per_grant}


def request_problems(request: Mapping[str, Any]) -> list[str]:
    """What botocore's validator refuses in a SubmitServiceJob request, one line per problem."""
    shape = batch_model().operation_model("SubmitServiceJob").input_shape
    report = ParamValidator().validate(dict(request), shape)
    problems = report.generate_report().splitlines() if report.has_errors() else []
    if len(request.get("tags") or {}) > _MAX_SERVICE_JOB_TAGS:
        problems.append(f"tags: SubmitServiceJob takes at most {_MAX_SERVICE_JOB_TAGS} tags")
    return [problem.strip() for problem in problems]


class ServiceJobs:
    """AWS Batch service jobs of one AWS connection and region, through the amazon provider's Batch hook."""

    def __init__(self, aws_conn_id: str | None = "aws_default", region_name: str | None = None) -> None:
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self._hook: Any = None

    @property
    def client(self) -> Any:
        """The hook's boto3 Batch client (the hook is built on first use: it reads the connection)."""
        if self._hook is None:
            from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

            self._hook = BatchClientHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        return self._hook.conn

    def submit(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """SubmitServiceJob; returns the job's description and whether this call created it (False: the
        ``clientToken`` named a job submitted before, which is re-attached to, whether AWS answered that
        job or rejected the repeat)."""
        known = {job["jobId"] for job in self._jobs_named(str(request["jobName"]), str(request["jobQueue"]))}
        try:
            answer = self.client.submit_service_job(**request)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ClientException":
                raise
            submitted = self._job_of_token(request)
            if submitted is None:
                raise
            return submitted, False
        return self.describe(str(answer["jobId"])), answer["jobId"] not in known

    def _job_of_token(self, request: Mapping[str, Any]) -> dict[str, Any] | None:
        """The description of the job an earlier SubmitServiceJob with this request's ``clientToken``
        created (its ``CLIENT_TOKEN_TAG``), looked for among the jobs of its name; None when none is."""
        token = request.get("clientToken")
        if not token:
            return None
        for summary in self._jobs_named(str(request["jobName"]), str(request["jobQueue"])):
            described = self.describe(str(summary["jobId"]))
            if (described.get("tags") or {}).get(CLIENT_TOKEN_TAG) == token:
                return described
        return None

    def describe(self, job_id: str) -> dict[str, Any]:
        answer = dict(self.client.describe_service_job(jobId=job_id))
        answer.pop("ResponseMetadata", None)
        return answer

    def terminate(self, job_id: str, reason: str) -> None:
        """TerminateServiceJob (a job already ended is left as it is)."""
        self.client.terminate_service_job(jobId=job_id, reason=reason)

    def update_priority(self, job_id: str, scheduling_priority: int) -> None:
        self.client.update_service_job(jobId=job_id, schedulingPriority=scheduling_priority)

    def _jobs_named(self, job_name: str, job_queue: str) -> list[dict[str, Any]]:
        """ListServiceJobs' summaries of the jobs of this name in the queue, whatever their status (a
        filter lists every status), every page."""
        query: dict[str, Any] = {
            "jobQueue": job_queue,
            "filters": [{"name": "JOB_NAME", "values": [job_name]}],
        }
        jobs: list[dict[str, Any]] = []
        while True:
            answer = self.client.list_service_jobs(**query)
            jobs += answer.get("jobSummaryList", [])
            if not answer.get("nextToken"):
                return jobs
            query["nextToken"] = answer["nextToken"]


def preemptions_of(description: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each preempted attempt a DescribeServiceJob answer lists: its training job ARN, when it started and
    stopped (epoch milliseconds) and why."""
    summary = description.get("preemptionSummary") or {}
    return [
        {
            "training_job_arn": (attempt.get("serviceResourceId") or {}).get("value"),
            "started_at": attempt.get("startedAt"),
            "stopped_at": attempt.get("stoppedAt"),
            "status_reason": attempt.get("statusReason"),
        }
        for attempt in summary.get("recentPreemptedAttempts", [])
    ]


def latest_training_job_arn(description: Mapping[str, Any]) -> str | None:
    latest = (description.get("latestAttempt") or {}).get("serviceResourceId") or {}
    value = latest.get("value")
    return str(value) if value else None


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
    ) -> None:
        self.sagemaker = sagemaker
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.poll_interval = poll_interval
        self.settle_seconds = settle_seconds
        self.log = log
        self.jobs = ServiceJobs(aws_conn_id, region_name)

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
        from airflow_quota.triggers.batch_service_job import BatchServiceJobTrigger

        settle = timedelta(seconds=self.settle_seconds)
        return BatchServiceJobTrigger(
            job_id=job_id,
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
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
