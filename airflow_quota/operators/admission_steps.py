"""QuotaTrainingOperator's request and its wait for quota: the base every step of the operator builds on.

``AdmissionSteps`` holds the operator's arguments, checks them (``operators/arguments.py``), picks the
backend strategy they name (``operators/backend.py``), has it render and validate the request, and defers
the task on ``QuotaAdmissionTrigger`` (RUNNABLE, holding no worker slot): from ``execute``, from the
triggerer when the request is known at parse time (Airflow's ``start_from_trigger``), and again after a
preemption. What happens once the allocator answers is ``LeaseSteps`` (``operators/lease_steps.py``) or,
on a queue AWS Batch schedules, ``BatchSteps`` (``operators/batch_steps.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, cast

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException
from airflow.triggers.base import StartTriggerArgs

from airflow_quota.backends.local import DEFAULT_GRACE_PERIOD
from airflow_quota.backends.sagemaker import TrainingRequestError
from airflow_quota.operators.arguments import (
    LOCAL_ARGUMENTS,
    TIMING_ARGUMENTS,
    argument_problems,
    has_template,
    parse_time_job_name,
    problem_list,
    quota_problems,
)
from airflow_quota.operators.backend import PreparedRequest, TrainingBackend, TrainingJobConfig, task_identity
from airflow_quota.operators.links import TRAINING_JOB_XCOM_KEY
from airflow_quota.operators.local_backend import LocalBackend
from airflow_quota.operators.sagemaker_backend import SageMakerBackend
from airflow_quota.protocol import Backend
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, QuotaAdmissionTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Seconds a job waits before it may be granted again after its first capacity error; each further
#: capacity error of the try doubles it, up to ``DEFAULT_CAPACITY_RETRY_MAX_DELAY``.
DEFAULT_CAPACITY_RETRY_DELAY = 60.0
DEFAULT_CAPACITY_RETRY_MAX_DELAY = 900.0


class AdmissionSteps(BaseOperator):
    """The operator's arguments, its request, and the deferral that waits for quota (the arguments are
    documented on ``QuotaTrainingOperator``)."""

    def __init__(
        self,
        *,
        job_queue: str,
        quota_share_name: str,
        training_job_config: TrainingJobConfig,
        scheduling_priority: int = 0,
        preemption_retries_before_termination: int | None = None,
        attempt_timeout: int | timedelta | None = None,
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
        checkpoint_per_try: bool = False,
        capacity_retry_delay: float = DEFAULT_CAPACITY_RETRY_DELAY,
        capacity_retry_max_delay: float = DEFAULT_CAPACITY_RETRY_MAX_DELAY,
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
        self.attempt_timeout = attempt_timeout
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
        self.checkpoint_per_try = checkpoint_per_try
        self.capacity_retry_delay = capacity_retry_delay
        self.capacity_retry_max_delay = capacity_retry_max_delay
        self.entry_point: Any = list(entry_point) if isinstance(entry_point, list | tuple) else entry_point
        self.local_root_dir = local_root_dir
        self.working_dir = working_dir
        self.stop_grace_period = stop_grace_period
        #: The training job this worker process launched or watches (what ``on_kill`` stops).
        self._current_job: str | None = None
        #: The AWS Batch service job this worker process submitted (what ``on_kill`` terminates).
        self._current_service_job: str | None = None
        self._training_backend: TrainingBackend | None = None
        # A bad argument or request fails this task when it runs, never the DAG file: its other tasks stay.
        problems = self._argument_problems() + self._quota_problems("placeholder", 1)
        prepared = None
        if not problems:
            prepared, problems = self._parse_time_request()
        if problems:
            self.log.warning("Task %s will fail when it runs: %s", self.task_id, "; ".join(problems))
        elif prepared is not None:
            self._start_from_trigger_when_static(prepared)

    def _argument_problems(self) -> list[str]:
        """What is wrong with the operator's own arguments (the request is checked by ``_prepare``)."""
        problems = argument_problems(
            backend=self.backend,
            has_request=self.training_job_config is not None or self.model_trainer is not None,
            seconds={name: getattr(self, name) for name in TIMING_ARGUMENTS},
            local_arguments={name: getattr(self, name) for name in LOCAL_ARGUMENTS},
            attempt_timeout=self.attempt_timeout,
        )
        if not isinstance(self.checkpoint_per_try, bool):
            problems.append(f"checkpoint_per_try: must be True or False, got {self.checkpoint_per_try!r}")
        return problems

    def _parse_time_request(self) -> tuple[PreparedRequest | None, list[str]]:
        """The request, validated, when it is known as the DAG file is parsed (a dict without templates),
        and what will fail the task when it runs (the request's own problems, its capacity's against the
        quota bounds: an ``InstanceCount`` or capacity unit out of them). What only a worker can tell (the
        local backend's ``working_dir`` on that worker) is left to it."""
        templated = [getattr(self, name) for name in self.template_fields]
        if self.model_trainer is not None or has_template(templated):
            return None, []
        try:
            prepared = self._backend().prepare(self._request_config(), cast("Context", {}))
        except TrainingRequestError as error:
            return None, [problem for problem in error.problems if not problem.startswith("working_dir:")]
        except ValueError:
            return None, []
        finally:
            self._training_backend = None
        return prepared, self._quota_problems(prepared.capacity_unit, prepared.instance_count)

    def _start_from_trigger_when_static(self, prepared: PreparedRequest) -> None:
        """Wait for quota from the triggerer, with no worker run first: the request is known now.

        Airflow's ``start_from_trigger``: the scheduler defers the task on ``QuotaAdmissionTrigger`` as it
        schedules it. That saves a worker run per task, and the first grant needs no settle time (only a
        task that deferred from a worker run can be failed by its stale executor event). A request with
        templates, a ``ModelTrainer`` or factory, or one that does not validate here, waits from
        ``execute`` instead, where it is rendered and validated, and a bad one fails its own task with
        every problem. Airflow 3.3 starts mapped tasks in a worker whatever this says. A task with an
        ``execution_timeout`` also starts in a worker: from the triggerer, Airflow would count the wait
        for quota against it (``TaskInstance.defer_task``), and a long queue would fail the task.
        """
        if self.get_dag() is None or self.execution_timeout is not None:
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

    def execute(self, context: Context) -> Any:
        """Validate the request and wait for quota."""
        identity = task_identity(context)
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

    def _backend(self) -> TrainingBackend:
        """The strategy for ``backend`` (one per worker process: it holds the AWS session)."""
        if self._training_backend is None:
            if self.backend == "local":
                self._training_backend = LocalBackend(
                    entry_point=self.entry_point,
                    local_root_dir=self.local_root_dir,
                    working_dir=self.working_dir,
                    stop_grace_period=self.stop_grace_period,
                    checkpoint_per_try=self.checkpoint_per_try,
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
                    checkpoint_per_try=self.checkpoint_per_try,
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
        not_before: str | None = None,
        requeue_reason: str | None = None,
    ) -> NoReturn:
        trigger = self._admission_trigger(
            task_identity(context).base_name,
            prepared,
            submitted_at=submitted_at,
            admission=admission,
            released_lease_id=released_lease_id,
            not_before=not_before,
            requeue_reason=requeue_reason,
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
        not_before: str | None = None,
        requeue_reason: str | None = None,
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
            not_before=not_before,
            requeue_reason=requeue_reason,
        )
