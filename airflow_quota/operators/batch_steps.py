"""QuotaTrainingOperator on a job queue AWS Batch schedules: submit the service job, wait for its end.

The admission event is ``{"scheduler": "AWS_BATCH"}`` instead of a grant: ``on_grant`` hands over to
``_submit_service_job``, which submits (or re-attaches to) the task's AWS Batch service job through
``BatchBackend`` (``operators/batch_backend.py``) and defers on ``BatchServiceJobTrigger`` until it ends
(``on_service_job``). AWS Batch admits, preempts and re-queues the job; no lease is involved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk.exceptions import AirflowFailException

from airflow_quota.aws_batch.service_jobs import latest_training_job_arn
from airflow_quota.operators.admission_steps import AdmissionSteps
from airflow_quota.operators.arguments import attempt_seconds
from airflow_quota.operators.batch_backend import SERVICE_JOB_XCOM_KEY, BatchBackend, ServiceJobSpec
from airflow_quota.operators.links import TRAINING_JOB_XCOM_KEY, SageMakerTrainingJobLink
from airflow_quota.operators.sagemaker_backend import SageMakerBackend

if TYPE_CHECKING:
    from airflow.sdk import Context


class BatchSteps(AdmissionSteps):
    """The steps of a job AWS Batch schedules: one service job per task instance, followed to its end.

    ``retry_strategy``: the service job's ``retryStrategy`` (``{attempts, evaluateOnExit}``, as
    SubmitServiceJob takes it); None (default): what AWS's SDK sends
    (``batch_backend.DEFAULT_RETRY_STRATEGY``). Not used on a queue our allocator schedules.
    """

    def __init__(self, *, retry_strategy: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.retry_strategy = retry_strategy

    def _submit_service_job(self, context: Context) -> NoReturn:
        """The job queue is AWS Batch's: submit (or re-attach to) the task's service job, wait on it."""
        if self.backend != "sagemaker":
            raise AirflowFailException(
                f"Job queue {self.job_queue} is scheduled by AWS Batch, which runs SageMaker training jobs "
                f"only: use backend='sagemaker' (this task's is {self.backend!r}), or a queue our allocator "
                "schedules"
            )
        batch = self._batch_backend()
        prepared = self._prepare(context)
        spec = ServiceJobSpec(
            self.job_queue,
            self.quota_share_name,
            self.scheduling_priority,
            self.preemption_retries_before_termination,
            # Checked with the other arguments (``_prepare``): None only when not given.
            attempt_seconds(self.attempt_timeout),
            self.retry_strategy,
        )
        job = batch.launch(context, prepared, spec)
        self._current_service_job = str(job["jobId"])
        context["ti"].xcom_push(
            key=SERVICE_JOB_XCOM_KEY, value={"job_id": job["jobId"], "job_arn": job.get("jobArn")}
        )
        # The SageMaker training job link: a re-attached job's latest attempt, else none yet.
        training_job = SageMakerTrainingJobLink.xcom_value_of_arn(latest_training_job_arn(job))
        context["ti"].xcom_push(key=TRAINING_JOB_XCOM_KEY, value=training_job)
        self.defer(trigger=batch.monitor(str(job["jobId"])), method_name="on_service_job", timeout=None)

    def on_service_job(self, context: Context, event: Mapping[str, Any] | None = None) -> Any:
        """The service job ended: its result (service and training job ARNs, attempts, preemptions)."""
        self._current_service_job = None
        training_job = SageMakerTrainingJobLink.xcom_value_of_arn((event or {}).get("training_job_arn"))
        context["ti"].xcom_push(key=TRAINING_JOB_XCOM_KEY, value=training_job)  # its last attempt's
        return self._batch_backend().finish(event or {})

    def _batch_backend(self) -> BatchBackend:
        sagemaker = self._backend()
        assert isinstance(sagemaker, SageMakerBackend)
        return BatchBackend(
            sagemaker=sagemaker,
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
            poll_interval=self.poll_interval,
            settle_seconds=self.settle_seconds,
            log=self.log,
            verify=self.verify,
            botocore_config=self.botocore_config,
        )
