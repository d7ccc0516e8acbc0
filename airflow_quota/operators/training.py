"""QuotaTrainingOperator: a training job that waits for quota, trains, and is preempted and resumed.

The task's life, all in one Airflow try (``airflow_quota.protocol`` names every message):

1. The job waits on ``QuotaAdmissionTrigger``: RUNNABLE, holding no worker slot. A request known when the
   DAG is parsed (no templates, a request dict that validates) starts there without a worker run (Airflow's
   ``start_from_trigger``): the scheduler defers the task as it schedules it. Otherwise ``execute`` renders
   and validates the request (SageMaker's API model, the capacity, the quota fields) and defers.
2. ``on_grant`` (the allocator resumed it with a ``Grant``) launches ``<base>-a<attempt>`` (or re-attaches
   to the training job its record says still runs), follows it from the worker for ``follow_seconds``
   (a job that ends or is preempted in that time ends the task in this run), then defers on the
   backend's monitoring trigger.
3. ``on_monitor`` ends the task when the training job ends, or, on a ``Preempt`` for its lease, stops the
   job, waits until it has really stopped, and defers on ``QuotaAdmissionTrigger`` again (``attempt`` + 1,
   the same ``submitted_at``, ``released_lease_id``): back to RUNNABLE at its place in the queue, no
   Airflow retry used. The next grant launches a new training job on the same checkpoint prefix.

On a job queue AWS Batch schedules, the admission event is ``{"scheduler": "AWS_BATCH"}`` instead of a
grant: ``on_grant`` submits (or re-attaches to) the task's AWS Batch service job and defers on
``BatchServiceJobTrigger`` until it ends (``on_service_job``); AWS Batch preempts and re-queues it.

Where the job trains is a strategy the operator picks by its ``backend`` argument (the interface:
``operators/backend.py``): ``SageMakerBackend`` (``operators/sagemaker_backend.py``) or ``LocalBackend``
(``operators/local_backend.py``: a process of the worker on the granted GPUs). A local job has no
monitoring trigger: in step 2 the worker runs it, streams its output into the task log and polls the
preemption signal, then ends the task or requeues as step 3 does, all in the same worker run.

The steps live beside this module, one module a part of the life: step 1 in ``admission_steps.py`` (with
the arguments and the request), steps 2 and 3 in ``lease_steps.py``, the AWS Batch path in
``batch_steps.py``. This module puts them together and says which one an admission event goes to.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_quota.operators.batch_steps import BatchSteps
from airflow_quota.operators.lease_steps import LeaseSteps
from airflow_quota.operators.links import BatchServiceJobLink, QuotaShareLink, SageMakerTrainingJobLink
from airflow_quota.protocol import AWS_BATCH, SCHEDULER_EVENT_KEY

if TYPE_CHECKING:
    from airflow.sdk import Context


class QuotaTrainingOperator(LeaseSteps, BatchSteps):
    """Run one training job under a quota share of a job queue, with preemption and resume.

    :param job_queue: the job queue whose capacity the job uses.
    :param quota_share_name: the quota share the job is charged to.
    :param training_job_config: a SageMaker CreateTrainingJob request (templated dict), a SageMaker SDK
        ``ModelTrainer``, or a callable returning either (called on the worker, with ``context`` when it
        takes an argument: build a ``ModelTrainer`` there, never at DAG parse time). Its
        ``ResourceConfig`` (InstanceType, InstanceCount) is the capacity the job asks for. The name,
        ``CheckpointConfig.S3Uri`` and quota tags are set by the operator.
    :param scheduling_priority: AWS Batch's schedulingPriority, 0..9999, higher first.
    :param preemption_retries_before_termination: how many preemptions the job survives; None: no limit.
    :param attempt_timeout: on a job queue AWS Batch schedules, the longest one attempt of the service job
        may run (whole seconds, or a ``timedelta``), sent as ``timeoutConfig.attemptDurationSeconds``:
        AWS Batch then terminates the attempt and the job fails. None (default): not sent, and AWS Batch
        defers to the training request's own ``StoppingCondition`` (which SageMaker applies to each
        attempt's training job on both kinds of queue). On a queue our allocator schedules it is not
        used: there ``StoppingCondition.MaxRuntimeInSeconds`` is the limit of each training job.
    :param input_data_config: the ``input_data_config`` passed to a ``ModelTrainer``'s request builder.
    :param poll_interval: seconds between DescribeTrainingJob calls while the job trains.
    :param stop_timeout: how long a preemption waits for the training job to reach ``Stopped``.
    :param settle_seconds: the monitoring trigger fires no sooner than this after the task deferred on it
        (a guard against apache/airflow#71580: a task resumed too soon after a worker deferral is failed).
    :param follow_seconds: after a launch the worker follows the training job for this long before it
        defers on the monitoring trigger: a job that ends (or is preempted) within it ends the task in the
        launching run, with no second worker run and no wait for ``settle_seconds``. A job that ends
        later than this but sooner than this plus ``settle_seconds`` is seen ended only then.
    :param backend: ``"sagemaker"`` (default), or ``"local"``: the entry point runs in the worker on the
        granted GPUs of a ``local-`` capacity unit (docs/operator.md, "The local backend").
    :param entry_point: local backend: the entry point's argv, e.g. ``[sys.executable, "train.py"]``.
    :param local_root_dir: local backend: where ``<dag>/<run>/<task>/<map index>/`` holds the checkpoint
        directory (shared by every attempt and try) and each attempt's model and output directories.
        Default: ``$AIRFLOW_HOME/quota-training``.
    :param working_dir: local backend: the entry point's working directory (default: the worker's).
    :param stop_grace_period: local backend: seconds between SIGTERM and SIGKILL when the job is stopped
        (SageMaker's 120 by default).
    """

    template_fields = (
        "training_job_config",
        "job_queue",
        "quota_share_name",
        "entry_point",
        "local_root_dir",
        "working_dir",
    )
    template_fields_renderers = {"training_job_config": "json"}  # noqa: RUF012 - BaseOperator declares it
    ui_color = "#f0e4ff"
    operator_extra_links = (SageMakerTrainingJobLink(), BatchServiceJobLink(), QuotaShareLink())

    def on_grant(
        self,
        context: Context,
        event: Mapping[str, Any] | None = None,
        *,
        submitted_at: str | None = None,
        admission: int = 0,
        preemptions: int = 0,
    ) -> Any:
        """The allocator answered: a grant (``LeaseSteps``), a rejection, or AWS Batch schedules the queue."""
        event = event or {}
        if event.get("rejected"):
            raise AirflowFailException(f"The quota allocator rejected this job: {event.get('reason')}")
        if event.get(SCHEDULER_EVENT_KEY) == AWS_BATCH:
            return self._submit_service_job(context)
        # A task started from the triggerer learns its first submission from its grant.
        submitted_at = submitted_at or event.get("submitted_at") or datetime.now(UTC).isoformat()
        return self._run_granted(
            context, event, submitted_at=submitted_at, admission=admission, preemptions=preemptions
        )

    def on_kill(self) -> None:
        """The task is killed while it runs in a worker: stop the training job it launched or watches."""
        if self._current_service_job is not None:
            self.log.info("Task killed: terminating service job %s", self._current_service_job)
            self._batch_backend().request_stop(self._current_service_job, "Its Airflow task was killed")
        if self._current_job is not None:
            self.log.info("Task killed: stopping training job %s", self._current_job)
            self._backend().request_stop(self._current_job)

    def execute_complete(self, context: Context, event: Any = None) -> Any:  # pragma: no cover - unused
        raise AirflowException("QuotaTrainingOperator resumes in on_grant or on_monitor only")


__all__ = ["QuotaTrainingOperator"]
