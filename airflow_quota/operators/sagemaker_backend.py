"""QuotaTrainingOperator's SageMaker strategy: a granted job is a SageMaker training job.

Requests, names and calls are ``airflow_quota.backends.sagemaker``'s (through the amazon provider's
hook); the job is followed by ``SageMakerTrainingJobTrigger`` in the triggerer.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_quota.backends.sagemaker import (
    SageMakerTrainingJobs,
    TaskIdentity,
    TrainingRequestError,
    build_request,
    capacity_of,
    checkpoint_s3_uri,
    compile_model_trainer,
    is_model_trainer,
    normalized_request,
    request_problems,
    sagemaker_sdk_missing,
    training_job_name,
)
from airflow_quota.operators.backend import (
    ConsoleLink,
    JobState,
    PreparedRequest,
    RecordState,
    TaskLog,
    TrainingJobConfig,
    call_factory,
    training_job_record,
)
from airflow_quota.operators.task_store import REQUEST_KEY, read_document
from airflow_quota.protocol import Backend, TrainingJobRecord
from airflow_quota.triggers.sagemaker import SageMakerTrainingJobTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger


class SageMakerBackend:
    """Training jobs on SageMaker, through the amazon provider's hook (``backends.sagemaker``).

    One per worker process: it holds the AWS session. ``log`` is the task's logger.
    """

    kind: Backend = "sagemaker"

    def __init__(
        self,
        *,
        aws_conn_id: str | None,
        region_name: str | None,
        verify: bool | str | None,
        botocore_config: dict[str, Any] | None,
        input_data_config: Any,
        poll_interval: float,
        stop_poll_interval: float,
        stop_timeout: float,
        settle_seconds: float,
        log: TaskLog,
        checkpoint_per_try: bool = False,
    ) -> None:
        self.aws_conn_id = aws_conn_id
        self.input_data_config = input_data_config
        self.poll_interval = poll_interval
        self.stop_poll_interval = stop_poll_interval
        self.stop_timeout = stop_timeout
        self.settle_seconds = settle_seconds
        self.checkpoint_per_try = checkpoint_per_try
        self.log = log
        self.jobs = SageMakerTrainingJobs(
            aws_conn_id, region_name, verify=verify, botocore_config=botocore_config
        )

    def prepare(self, config: TrainingJobConfig, context: Context) -> PreparedRequest:
        document = normalized_request(self._request_document(config, context))
        problems = request_problems(document)
        if problems:
            raise TrainingRequestError(problems)
        capacity_unit, instance_count = capacity_of(document)
        return PreparedRequest(capacity_unit, instance_count, document)

    def _request_document(self, config: TrainingJobConfig, context: Context) -> Mapping[str, Any]:
        """A request dict as rendered; from a ModelTrainer or a factory, this try's (``REQUEST_KEY``)."""
        if isinstance(config, Mapping):
            return config
        store, try_number = context["task_state_store"], int(context["ti"].try_number)
        kept = read_document(store.get(REQUEST_KEY))
        if kept and kept.get("try_number") == try_number and isinstance(kept.get("request"), Mapping):
            return dict(kept["request"])
        document = self._document_of(config, context)
        store.set(REQUEST_KEY, {"try_number": try_number, "request": dict(document)})
        return document

    def _document_of(self, config: Any, context: Context) -> Mapping[str, Any]:
        """What ``config`` asks: a dict as is, a ModelTrainer compiled, a factory's result either way."""
        try:
            if callable(config) and not is_model_trainer(config):
                config = call_factory(config, context)
            if isinstance(config, Mapping):
                return config
            if is_model_trainer(config):
                return compile_model_trainer(config, self.input_data_config)
        except ImportError as error:  # a factory importing the SageMaker SDK on a worker without it
            missing = sagemaker_sdk_missing() if (error.name or "").partition(".")[0] == "sagemaker" else None
            if missing is None:
                raise
            raise TrainingRequestError([f"training_job_config: {missing}"]) from error
        expected = "expected a CreateTrainingJob request dict or a ModelTrainer"
        missing = sagemaker_sdk_missing()
        raise TrainingRequestError(
            [
                f"training_job_config: {expected}, got {type(config).__name__}"
                + (f" ({missing})" if missing else "")
            ]
        )

    def job_name(self, identity: TaskIdentity, attempt: int) -> str:
        return training_job_name(identity, attempt)

    def record(self, name: str, attempt: int, lease_id: str, state: RecordState) -> TrainingJobRecord:
        record = training_job_record(self.kind, name, attempt, lease_id, state)
        record["aws_conn_id"] = self.aws_conn_id
        record["region_name"] = self.jobs.region
        return record

    def launch(
        self,
        prepared: PreparedRequest,
        name: str,
        identity: TaskIdentity,
        tags: Mapping[str, str],
        grant: Mapping[str, Any],
    ) -> JobState:
        request = build_request(
            prepared.document,
            name=name,
            checkpoint_uri=checkpoint_s3_uri(prepared.document, identity, per_try=self.checkpoint_per_try),
            tags=tags,
        )
        description, created = self.jobs.launch(request)
        verb = "Launched" if created else "Re-attached to"
        self.log.info(
            "%s SageMaker training job %s (%s x %d, checkpoints %s)",
            verb,
            name,
            prepared.capacity_unit,
            prepared.instance_count,
            request["CheckpointConfig"]["S3Uri"],
        )
        return job_state(name, description)

    def state(self, name: str) -> JobState:
        return job_state(name, self.jobs.describe(name))

    def request_stop(self, name: str) -> None:
        self.jobs.request_stop(name)

    def stop_and_wait(self, name: str) -> JobState:
        description = self.jobs.stop_and_wait(
            name, poll_interval=self.stop_poll_interval, timeout=self.stop_timeout
        )
        return job_state(name, description)

    def monitor(self, name: str) -> BaseTrigger:
        settle = timedelta(seconds=self.settle_seconds)
        return SageMakerTrainingJobTrigger(
            training_job_name=name,
            aws_conn_id=self.aws_conn_id,
            region_name=self.jobs.region,
            verify=self.jobs.verify,
            botocore_config=self.jobs.botocore_config,
            poll_interval=self.poll_interval,
            not_before=(datetime.now(UTC) + settle).isoformat(),
        )

    def console_link(self, name: str) -> ConsoleLink | None:
        return ConsoleLink(
            training_job_name=name, region_name=self.jobs.region, partition=self.jobs.partition
        )

    def outputs(self, job: JobState) -> dict[str, Any]:
        return {"training_job_arn": job.arn, "model_artifacts": job.model_artifacts}


def job_state(name: str, description: Mapping[str, Any] | None) -> JobState:
    """A DescribeTrainingJob answer as a ``JobState`` (``Missing`` when there is no such job)."""
    if description is None:
        return JobState(name, "Missing")
    return JobState(
        name=name,
        status=str(description["TrainingJobStatus"]),
        secondary_status=description.get("SecondaryStatus"),
        failure_reason=description.get("FailureReason"),
        arn=description.get("TrainingJobArn"),
        model_artifacts=(description.get("ModelArtifacts") or {}).get("S3ModelArtifacts"),
        checkpoint_uri=(description.get("CheckpointConfig") or {}).get("S3Uri"),
    )
