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
``BatchServiceJobTrigger`` until it ends (``on_service_job``); AWS Batch preempts and re-queues it
(``operators/batch_backend.py``).

Where the job trains is a strategy the operator picks by its ``backend`` argument (the interface:
``operators/backend.py``): ``SageMakerBackend`` (``operators/sagemaker_backend.py``) or ``LocalBackend``
(``operators/local_backend.py``: a process of the worker on the granted GPUs). A local job has no
monitoring trigger: in step 2 the worker runs it, streams its output into the task log and polls the
preemption signal, then ends the task or requeues as step 3 does, all in the same worker run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, cast

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.triggers.base import StartTriggerArgs

from airflow_quota.backends.local import DEFAULT_GRACE_PERIOD
from airflow_quota.backends.sagemaker import TaskIdentity, TrainingRequestError, quota_tags
from airflow_quota.operators.arguments import (
    LOCAL_ARGUMENTS,
    TIMING_ARGUMENTS,
    argument_problems,
    has_template,
    parse_time_job_name,
    problem_list,
    quota_problems,
)
from airflow_quota.operators.backend import (
    JobState,
    PreparedRequest,
    RecordState,
    TrainingBackend,
    TrainingJobConfig,
)
from airflow_quota.operators.batch_backend import (
    AWS_BATCH,
    SCHEDULER_EVENT_KEY,
    SERVICE_JOB_XCOM_KEY,
    BatchBackend,
    ServiceJobSpec,
)
from airflow_quota.operators.links import TRAINING_JOB_XCOM_KEY, QuotaShareLink, SageMakerTrainingJobLink
from airflow_quota.operators.local_backend import LocalBackend
from airflow_quota.operators.sagemaker_backend import SageMakerBackend
from airflow_quota.operators.task_store import (
    keep_training_job_record,
    preempt_signal,
    training_job_record_in,
)
from airflow_quota.protocol import PREEMPT_KEY, Backend
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, QuotaAdmissionTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class QuotaTrainingOperator(BaseOperator):
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
    operator_extra_links = (SageMakerTrainingJobLink(), QuotaShareLink())

    def __init__(
        self,
        *,
        job_queue: str,
        quota_share_name: str,
        training_job_config: TrainingJobConfig,
        scheduling_priority: int = 0,
        preemption_retries_before_termination: int | None = None,
        backend: Backend = "sagemaker",
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
        input_data_config: Any = None,
        poll_interval: float = 30.0,
        stop_poll_interval: float = 10.0,
        stop_timeout: float = 1800.0,
        settle_seconds: float = 10.0,
        follow_seconds: float = 5.0,
        entry_point: Sequence[str] | None = None,
        local_root_dir: str | None = None,
        working_dir: str | None = None,
        stop_grace_period: float = DEFAULT_GRACE_PERIOD,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_queue = job_queue
        self.quota_share_name = quota_share_name
        # A dict is templated; a ModelTrainer or a factory is kept apart (Airflow would call a callable
        # template field with its own arguments).
        is_dict = isinstance(training_job_config, Mapping)
        self.training_job_config: Any = training_job_config if is_dict else None
        self.model_trainer: Any = None if is_dict else training_job_config
        self.scheduling_priority = scheduling_priority
        self.preemption_retries_before_termination = preemption_retries_before_termination
        self.backend = backend
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.verify = verify
        self.botocore_config = botocore_config
        self.input_data_config = input_data_config
        self.poll_interval = poll_interval
        self.stop_poll_interval = stop_poll_interval
        self.stop_timeout = stop_timeout
        self.settle_seconds = settle_seconds
        self.follow_seconds = follow_seconds
        self.entry_point: Any = list(entry_point) if isinstance(entry_point, list | tuple) else entry_point
        self.local_root_dir = local_root_dir
        self.working_dir = working_dir
        self.stop_grace_period = stop_grace_period
        #: The training job this worker process launched or watches (what ``on_kill`` stops).
        self._current_job: str | None = None
        #: The AWS Batch service job this worker process submitted (what ``on_kill`` terminates).
        self._current_service_job: str | None = None
        self._training_backend: TrainingBackend | None = None
        # A bad argument fails this task when it runs, never the DAG file: its other tasks stay.
        problems = self._argument_problems() + self._quota_problems("placeholder", 1)
        if problems:
            self.log.warning("Task %s will fail when it runs: %s", self.task_id, "; ".join(problems))
        else:
            self._start_from_trigger_when_static()

    def _argument_problems(self) -> list[str]:
        """What is wrong with the operator's own arguments (the request is checked by ``_prepare``)."""
        return argument_problems(
            backend=self.backend,
            has_request=self.training_job_config is not None or self.model_trainer is not None,
            seconds={name: getattr(self, name) for name in TIMING_ARGUMENTS},
            local_arguments={name: getattr(self, name) for name in LOCAL_ARGUMENTS},
        )

    def _start_from_trigger_when_static(self) -> None:
        """Wait for quota from the triggerer, with no worker run first, when the request is known now.

        Airflow's ``start_from_trigger``: the scheduler defers the task on ``QuotaAdmissionTrigger`` as it
        schedules it. That saves a worker run per task, and the first grant needs no settle time (only a
        task that deferred from a worker run can be failed by its stale executor event). A request with
        templates, a ``ModelTrainer`` or factory, or one that does not validate here, waits from
        ``execute`` instead, where it is rendered and validated, and a bad one fails its own task with
        every problem. Airflow 3.3 starts mapped tasks in a worker whatever this says. A task with an
        ``execution_timeout`` also starts in a worker: from the triggerer, Airflow would count the wait
        for quota against it (``TaskInstance.defer_task``), and a long queue would fail the task.
        """
        templated = [getattr(self, name) for name in self.template_fields]
        if self.model_trainer is not None or has_template(templated) or self.get_dag() is None:
            return
        if self.execution_timeout is not None:
            return
        try:
            prepared = self._backend().prepare(self._request_config(), cast("Context", {}))
        except (TrainingRequestError, ValueError):
            return
        finally:
            self._training_backend = None
        if self._quota_problems(prepared.capacity_unit, prepared.instance_count):
            return
        job_name = parse_time_job_name(self.dag_id, self.task_id)
        trigger = self._admission_trigger(job_name, prepared, submitted_at=None, admission=0)
        self.start_trigger_args = StartTriggerArgs(
            trigger_cls=ADMISSION_CLASSPATH,
            trigger_kwargs=trigger.serialize()[1],
            next_method="on_grant",
            next_kwargs={"admission": 0, "preemptions": 0},
            timeout=None,
        )
        self.start_from_trigger = True

    # --- the steps -------------------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        """Validate the request and wait for quota."""
        identity = _identity(context)
        prepared = self._prepare(context)
        submitted_at = datetime.now(UTC).isoformat()
        self.log.info(
            "Job %s asks %s x %d in quota share %s of job queue %s (priority %d): waiting for quota",
            identity.base_name,
            prepared.capacity_unit,
            prepared.instance_count,
            self.quota_share_name,
            self.job_queue,
            self.scheduling_priority,
        )
        # The extra link reads this key when the task pauses; it is filled once a training job is launched.
        context["ti"].xcom_push(key=TRAINING_JOB_XCOM_KEY, value={})
        self._wait_for_quota(context, prepared, submitted_at=submitted_at, admission=0, preemptions=0)

    def on_grant(
        self,
        context: Context,
        event: Mapping[str, Any] | None = None,
        *,
        submitted_at: str | None = None,
        admission: int = 0,
        preemptions: int = 0,
    ) -> Any:
        """Granted (or rejected): launch or re-attach, then watch the training job."""
        event = event or {}
        if event.get("rejected"):
            raise AirflowFailException(f"The quota allocator rejected this job: {event.get('reason')}")
        if event.get(SCHEDULER_EVENT_KEY) == AWS_BATCH:
            return self._submit_service_job(context)
        # A task started from the triggerer learns its first submission from its grant.
        submitted_at = submitted_at or event.get("submitted_at") or datetime.now(UTC).isoformat()
        prepared = self._prepare(context)
        ti_id = str(context["ti"].id)
        if event.get("ti_id") != ti_id:
            self.log.warning(
                "Ignoring lease %s of task instance %s (this one is %s): waiting for quota again",
                event.get("lease_id"),
                event.get("ti_id"),
                ti_id,
            )
            self._wait_for_quota(
                context, prepared, submitted_at=submitted_at, admission=admission, preemptions=preemptions
            )
        lease_id = str(event["lease_id"])
        attempt = int(event["attempt"])
        if (event.get("capacityUnit"), event.get("instanceCount")) != (
            prepared.capacity_unit,
            prepared.instance_count,
        ):
            raise AirflowException(
                f"Lease {lease_id} grants {event.get('capacityUnit')} x {event.get('instanceCount')} but the "
                f"request now asks {prepared.capacity_unit} x {prepared.instance_count}"
            )
        self.log.info("Granted lease %s (attempt %d, %s borrowed)", lease_id, attempt, event.get("borrowed"))
        backend = self._backend()
        store = context["task_state_store"]
        monitor_kwargs: dict[str, Any] = {
            "submitted_at": submitted_at,
            "admission": admission,
            "preemptions": preemptions,
            "lease_id": lease_id,
        }

        signal = preempt_signal(store, lease_id)
        if signal is not None:  # preempted before this run launched anything for the lease
            record = training_job_record_in(store) or {}
            launched = record.get("state") == "launched" and record.get("lease_id") == lease_id
            name = str(record["name"]) if launched else None
            return self._stop_and_requeue(context, backend, prepared, name, signal, **monitor_kwargs)

        job = self._reattachable_job(context, backend, lease_id)
        if job is None:
            name = backend.job_name(_identity(context), attempt)
            self._write_record(context, backend, name, attempt, lease_id, "launched")
            self._current_job = name
            tags = quota_tags(
                _identity(context),
                job_queue=self.job_queue,
                quota_share_name=self.quota_share_name,
                attempt=attempt,
                lease_id=lease_id,
            )
            job = backend.launch(prepared, name, _identity(context), tags, event)
        link = SageMakerTrainingJobLink.xcom_value(backend.console_link(job.name))
        context["ti"].xcom_push(key=TRAINING_JOB_XCOM_KEY, value=link)

        if isinstance(backend, LocalBackend):  # the worker watches its own process: no monitoring trigger
            return self._watch_local_job(context, backend, prepared, job.name, **monitor_kwargs)

        job, signal = self._follow_launched_job(store, backend, job, lease_id)
        if signal is not None:  # arrived while this worker ran: nobody resumes the monitor for it
            return self._stop_and_requeue(context, backend, prepared, job.name, signal, **monitor_kwargs)
        if not job.running:  # it ended within the settle time: no monitoring trigger needed
            return self._finish(context, backend, job, lease_id, preemptions)
        self.defer(
            trigger=backend.monitor(job.name),
            method_name="on_monitor",
            kwargs={**monitor_kwargs, "training_job_name": job.name},
            timeout=None,
        )

    def on_monitor(
        self,
        context: Context,
        event: Mapping[str, Any] | None = None,
        *,
        submitted_at: str,
        lease_id: str,
        training_job_name: str,
        admission: int = 0,
        preemptions: int = 0,
    ) -> Any:
        """The training job ended, or the allocator preempts it."""
        event = event or {}
        backend = self._backend()
        store = context["task_state_store"]
        self._current_job = training_job_name
        monitor_kwargs: dict[str, Any] = {
            "submitted_at": submitted_at,
            "admission": admission,
            "preemptions": preemptions,
            "lease_id": lease_id,
        }
        if event.get("preempt"):
            if event.get("lease_id") != lease_id:
                self.log.warning(
                    "Ignoring a preemption of lease %s (this task holds %s)", event.get("lease_id"), lease_id
                )
                self.defer(
                    trigger=backend.monitor(training_job_name),
                    method_name="on_monitor",
                    kwargs={**monitor_kwargs, "training_job_name": training_job_name},
                    timeout=None,
                )
            prepared = self._prepare(context)
            return self._stop_and_requeue(
                context, backend, prepared, training_job_name, event, **monitor_kwargs
            )

        job = JobState.from_event(event)
        if job.status == "Stopped" and (signal := preempt_signal(store, lease_id)) is not None:
            # Preempted through the store while the trigger saw the stop first.
            prepared = self._prepare(context)
            return self._stop_and_requeue(
                context, backend, prepared, training_job_name, signal, **monitor_kwargs
            )
        return self._finish(context, backend, job, lease_id, preemptions)

    def _follow_launched_job(
        self, store: Any, backend: TrainingBackend, job: JobState, lease_id: str
    ) -> tuple[JobState, dict[str, Any] | None]:
        """Follow a just-launched job from this worker run for ``follow_seconds``; stop early when it
        ends or a ``Preempt`` of this lease arrives. Returns the job's last state and the signal, if any.

        A deferral's monitoring trigger may not fire within ``settle_seconds`` (the #71580 guard), so a
        short job ends sooner here than through the trigger, with no extra worker run. Not botocore's
        training-job waiter: between two polls this loop must read the task's store for a preemption,
        and a waiter cannot be interrupted before its own end.
        """
        deadline = time.monotonic() + self.follow_seconds
        while True:
            signal = preempt_signal(store, lease_id)
            remaining = deadline - time.monotonic()
            if signal is not None or not job.running or remaining <= 0:
                return job, signal
            time.sleep(min(self.poll_interval, 1.0, remaining))
            job = backend.state(job.name)

    def _watch_local_job(
        self,
        context: Context,
        backend: LocalBackend,
        prepared: PreparedRequest,
        name: str,
        *,
        submitted_at: str,
        admission: int,
        preemptions: int,
        lease_id: str,
    ) -> Any:
        """Run the local job to its end, polling the store for a ``Preempt`` of this lease every second."""
        store = context["task_state_store"]
        signals: list[dict[str, Any]] = []

        def preempt_requested() -> bool:
            signal = preempt_signal(store, lease_id)
            if signal is not None:
                signals.append(signal)
            return signal is not None

        job = backend.watch(name, preempt_requested)
        self.log.info("Local training job %s ended: %s", name, job.status)
        if signals:
            return self._stop_and_requeue(
                context,
                backend,
                prepared,
                name,
                signals[0],
                submitted_at=submitted_at,
                admission=admission,
                preemptions=preemptions,
                lease_id=lease_id,
            )
        return self._finish(context, backend, job, lease_id, preemptions)

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
        )
        job = batch.launch(context, prepared, spec)
        self._current_service_job = str(job["jobId"])
        context["ti"].xcom_push(
            key=SERVICE_JOB_XCOM_KEY, value={"job_id": job["jobId"], "job_arn": job.get("jobArn")}
        )
        self.defer(trigger=batch.monitor(str(job["jobId"])), method_name="on_service_job", timeout=None)

    def on_service_job(self, context: Context, event: Mapping[str, Any] | None = None) -> Any:
        """The service job ended: its result (service and training job ARNs, attempts, preemptions)."""
        self._current_service_job = None
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
        )

    def on_kill(self) -> None:
        """The task is killed while it runs in a worker: stop the training job it launched or watches."""
        if self._current_service_job is not None:
            self.log.info("Task killed: terminating service job %s", self._current_service_job)
            self._batch_backend().request_stop(self._current_service_job, "Its Airflow task was killed")
        if self._current_job is not None:
            self.log.info("Task killed: stopping training job %s", self._current_job)
            self._backend().request_stop(self._current_job)

    # --- helpers ---------------------------------------------------------------------------------------

    def _backend(self) -> TrainingBackend:
        """The strategy for ``backend`` (one per worker process: it holds the AWS session)."""
        if self._training_backend is None:
            if self.backend == "local":
                self._training_backend = LocalBackend(
                    entry_point=self.entry_point,
                    local_root_dir=self.local_root_dir,
                    working_dir=self.working_dir,
                    stop_grace_period=self.stop_grace_period,
                    log=self.log,
                )
            else:
                self._training_backend = SageMakerBackend(
                    aws_conn_id=self.aws_conn_id,
                    region_name=self.region_name,
                    verify=self.verify,
                    botocore_config=self.botocore_config,
                    input_data_config=self.input_data_config,
                    poll_interval=self.poll_interval,
                    stop_poll_interval=self.stop_poll_interval,
                    stop_timeout=self.stop_timeout,
                    settle_seconds=self.settle_seconds,
                    log=self.log,
                )
        return self._training_backend

    def _request_config(self) -> TrainingJobConfig:
        """The request as given: the (rendered) dict, else the ``ModelTrainer`` or the factory."""
        if self.training_job_config is not None:
            return self.training_job_config
        return self.model_trainer

    def _prepare(self, context: Context) -> PreparedRequest:
        """The validated request; a bad request or argument fails the task at once, with no retry and
        every problem listed."""
        problems = self._argument_problems()
        prepared = None
        if not problems:
            try:
                prepared = self._backend().prepare(self._request_config(), context)
            except TrainingRequestError as error:
                problems += error.problems
        capacity = (prepared.capacity_unit, prepared.instance_count) if prepared else ("placeholder", 1)
        problems += self._quota_problems(*capacity)
        if problems or prepared is None:
            raise AirflowFailException(problem_list(f"task {self.task_id}", problems))
        return prepared

    def _quota_problems(self, capacity_unit: str, instance_count: int) -> list[str]:
        return quota_problems(
            f"task {self.task_id}",
            job_queue=self.job_queue,
            quota_share_name=self.quota_share_name,
            capacity_unit=capacity_unit,
            instance_count=instance_count,
            scheduling_priority=self.scheduling_priority,
            preemption_retries_before_termination=self.preemption_retries_before_termination,
        )

    def _wait_for_quota(
        self,
        context: Context,
        prepared: PreparedRequest,
        *,
        submitted_at: str,
        admission: int,
        preemptions: int,
        released_lease_id: str | None = None,
    ) -> NoReturn:
        trigger = self._admission_trigger(
            _identity(context).base_name,
            prepared,
            submitted_at=submitted_at,
            admission=admission,
            released_lease_id=released_lease_id,
        )
        self.defer(
            trigger=trigger,
            method_name="on_grant",
            kwargs={"submitted_at": submitted_at, "admission": admission, "preemptions": preemptions},
            timeout=None,
        )

    def _admission_trigger(
        self,
        job_name: str,
        prepared: PreparedRequest,
        *,
        submitted_at: str | None,
        admission: int,
        released_lease_id: str | None = None,
    ) -> QuotaAdmissionTrigger:
        return QuotaAdmissionTrigger(
            job_queue=self.job_queue,
            job_name=job_name,
            quota_share_name=self.quota_share_name,
            capacity_unit=prepared.capacity_unit,
            instance_count=prepared.instance_count,
            scheduling_priority=self.scheduling_priority,
            preemption_retries_before_termination=self.preemption_retries_before_termination,
            submitted_at=submitted_at,
            attempt=admission,
            released_lease_id=released_lease_id,
        )

    def _reattachable_job(self, context: Context, backend: TrainingBackend, lease_id: str) -> JobState | None:
        """The training job an earlier run left running (or completed), now under this lease; else None."""
        record = training_job_record_in(context["task_state_store"])
        if not record or record.get("state") != "launched" or record.get("backend") != backend.kind:
            return None
        name = str(record["name"])
        job = backend.state(name)
        if job.status == "Stopping":
            job = backend.stop_and_wait(name)
        if job.status in ("InProgress", "Completed"):
            self.log.info(
                "Re-attaching to training job %s (%s), launched for lease %s",
                name,
                job.status,
                record.get("lease_id"),
            )
            self._write_record(context, backend, name, int(record.get("attempt", 0)), lease_id, "launched")
            self._current_job = name
            return job
        self.log.info("Training job %s of an earlier run is %s: launching a new one", name, job.status)
        self._write_record(
            context, backend, name, int(record.get("attempt", 0)), str(record.get("lease_id")), "ended"
        )
        return None

    def _write_record(
        self,
        context: Context,
        backend: TrainingBackend,
        name: str,
        attempt: int,
        lease_id: str,
        state: RecordState,
        ended_as: str | None = None,
    ) -> None:
        record = backend.record(name, attempt, lease_id, state)
        if ended_as is not None:
            record["ended_as"] = ended_as
        keep_training_job_record(context["task_state_store"], record)

    def _stop_and_requeue(
        self,
        context: Context,
        backend: TrainingBackend,
        prepared: PreparedRequest,
        name: str | None,
        signal: Mapping[str, Any],
        *,
        submitted_at: str,
        admission: int,
        preemptions: int,
        lease_id: str,
    ) -> dict[str, Any]:
        """Preempted: stop the training job, wait until it has stopped, and wait for quota again.

        Returns only when the job completed before it could be stopped (the task's result then).
        """
        self.log.warning(
            "Preempted (lease %s) by %s, rule %s: %s",
            lease_id,
            signal.get("preempted_by"),
            signal.get("rule"),
            signal.get("reason"),
        )
        if name is not None:
            self._current_job = name
            job = backend.stop_and_wait(name)
            self.log.info("Training job %s is %s (%s)", name, job.status, job.secondary_status)
            if job.status == "Completed":  # it finished before the stop reached it: the work is done
                context["task_state_store"].delete(PREEMPT_KEY)
                return self._finish(context, backend, job, lease_id, preemptions)
            record = training_job_record_in(context["task_state_store"]) or {}
            self._write_record(context, backend, name, int(record.get("attempt", 0)), lease_id, "ended")
        context["task_state_store"].delete(PREEMPT_KEY)
        self._current_job = None
        self.log.info("Capacity of lease %s released: waiting for quota again", lease_id)
        self._wait_for_quota(
            context,
            prepared,
            submitted_at=submitted_at,
            admission=admission + 1,
            preemptions=preemptions + 1,
            released_lease_id=lease_id,
        )

    def _finish(
        self, context: Context, backend: TrainingBackend, job: JobState, lease_id: str, preemptions: int
    ) -> dict[str, Any]:
        store = context["task_state_store"]
        record = training_job_record_in(store) or {}
        attempts = int(record.get("attempt", 0))
        self._write_record(context, backend, job.name, attempts, lease_id, "ended", job.ended_as)
        if preempt_signal(store, lease_id) is not None:  # the job ended before the preemption reached it
            store.delete(PREEMPT_KEY)
        self._current_job = None
        if job.status == "Completed":
            self.log.info("Training job %s completed: %s", job.name, job.model_artifacts)
            return {
                "training_job_name": job.name,
                **backend.outputs(job),
                "attempts": attempts,
                "preemptions": preemptions,
            }
        if job.status == "Stopped" and job.secondary_status == "MaxRuntimeExceeded":
            raise AirflowException(
                f"Training job {job.name} ran past its runtime limit (StoppingCondition.MaxRuntimeInSeconds)"
            )
        if job.status == "Stopped":
            raise AirflowException(f"Training job {job.name} was stopped outside the quota allocator")
        if job.status == "Failed":
            raise AirflowException(f"Training job {job.name} failed: {job.failure_reason}")
        raise AirflowException(
            f"Training job {job.name} is {job.status}: {job.failure_reason or 'no details'}"
        )

    def execute_complete(self, context: Context, event: Any = None) -> Any:  # pragma: no cover - unused
        raise AirflowException("QuotaTrainingOperator resumes in on_grant or on_monitor only")


def _identity(context: Context) -> TaskIdentity:
    ti = context["ti"]
    map_index = -1 if ti.map_index is None else int(ti.map_index)
    return TaskIdentity(ti.dag_id, ti.run_id, ti.task_id, map_index, int(ti.try_number))


__all__ = ["QuotaTrainingOperator"]
