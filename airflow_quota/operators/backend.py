"""The interface between QuotaTrainingOperator and where its granted job trains (a strategy per backend).

``TrainingBackend`` is what the operator asks of a backend; ``SageMakerBackend``
(``operators/sagemaker_backend.py``) and ``LocalBackend`` (``operators/local_backend.py``) implement it,
and the operator picks one by its ``backend`` argument. The backends import this module, never the
operator: they are given the operator's settings and its logger when they are built.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from airflow_quota.backends.sagemaker import CAPACITY_FAILURE_PREFIX, RUNNING_STATUSES, TaskIdentity
from airflow_quota.protocol import Backend, TrainingJobRecord

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

RecordState = Literal["launched", "ended"]
#: ``training_job_config`` given as a request dict, a ``ModelTrainer``, or a callable returning either.
TrainingJobConfig = Mapping[str, Any] | Any | Callable[..., Any]
#: The longest ``ended_as`` line kept in a training job record.
MAX_ENDED_AS_LENGTH = 300


class TaskLog(Protocol):
    """The task's logger (the operator's ``log``), which a backend writes the task log with."""

    def info(self, event: Any, /, *args: Any) -> Any: ...

    def warning(self, event: Any, /, *args: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A validated request: the capacity it needs and the backend's own document."""

    capacity_unit: str
    instance_count: int
    document: dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobState:
    """A training job as the operator sees it, in SageMaker's status words whatever the backend."""

    name: str
    status: str  # InProgress | Stopping | Completed | Failed | Stopped | Missing | Error
    secondary_status: str | None = None
    failure_reason: str | None = None
    arn: str | None = None
    model_artifacts: str | None = None
    #: SageMaker: the training job's ``CheckpointConfig.S3Uri`` (for the allocator's checkpoint reports).
    checkpoint_uri: str | None = None

    @property
    def running(self) -> bool:
        return self.status in RUNNING_STATUSES

    @property
    def capacity_failure(self) -> bool:
        """Whether the job failed for want of instance capacity (FailureReason ``CapacityError...``)."""
        return self.status == "Failed" and (self.failure_reason or "").startswith(CAPACITY_FAILURE_PREFIX)

    @property
    def ended_as(self) -> str | None:
        """How a job that did not complete ended, in one line of at most 300 characters (None: completed)."""
        if self.status == "Completed":
            return None
        detail = self.failure_reason or self.secondary_status
        line = (
            f"{self.status}: {detail.strip().splitlines()[0]}" if detail and detail.strip() else self.status
        )
        return line if len(line) <= MAX_ENDED_AS_LENGTH else line[: MAX_ENDED_AS_LENGTH - 1] + "…"

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> JobState:
        return cls(
            name=str(event.get("training_job_name")),
            status=str(event.get("status")),
            secondary_status=event.get("secondary_status"),
            failure_reason=event.get("failure_reason"),
            arn=event.get("training_job_arn"),
            model_artifacts=event.get("model_artifacts"),
        )


@dataclass(frozen=True, slots=True)
class ConsoleLink:
    """Where the job is in the AWS console: what the operator's ``SageMakerTrainingJobLink`` shows."""

    training_job_name: str
    region_name: str
    partition: str


class TrainingBackend(Protocol):
    """Where a granted job trains. Every method may be called again after a crash: all are idempotent.

    The local backend differs in one place: its job is a process of the worker, so the worker itself
    watches it (``LocalBackend.watch``) instead of a monitoring trigger, with the preemption signal as its
    stop condition, then ends or requeues as ``on_monitor`` does.
    """

    kind: Backend

    def prepare(self, config: TrainingJobConfig, context: Context) -> PreparedRequest:
        """Render or compile ``config`` and validate it; raise ``TrainingRequestError`` if bad."""

    def job_name(self, identity: TaskIdentity, attempt: int) -> str: ...

    def record(self, name: str, attempt: int, lease_id: str, state: RecordState) -> TrainingJobRecord:
        """The ``TrainingJobRecord``, with what the allocator needs to stop an orphan of this backend."""

    def launch(
        self,
        prepared: PreparedRequest,
        name: str,
        identity: TaskIdentity,
        tags: Mapping[str, str],
        grant: Mapping[str, Any],
    ) -> JobState:
        """Start the job called ``name`` on what ``grant`` gives; if it exists, return it (re-attach)."""

    def state(self, name: str) -> JobState: ...

    def request_stop(self, name: str) -> None: ...

    def stop_and_wait(self, name: str) -> JobState:
        """Stop the job and return once it no longer runs."""

    def monitor(self, name: str) -> BaseTrigger:
        """The trigger that fires once, when the job ends (its event feeds ``JobState.from_event``)."""

    def console_link(self, name: str) -> ConsoleLink | None:
        """Where the job is in the AWS console; None when it has no page there."""

    def outputs(self, job: JobState) -> dict[str, Any]:
        """What a completed job's task returns beside its name, attempts and preemptions."""


def training_job_record(
    backend: Backend, name: str, attempt: int, lease_id: str, state: RecordState
) -> TrainingJobRecord:
    """What every backend records under ``TRAINING_JOB_KEY``; each adds what it needs to stop an orphan."""
    return {"backend": backend, "name": name, "attempt": attempt, "lease_id": lease_id, "state": state}


def call_factory(factory: Callable[..., Any], context: Context) -> Any:
    """A ``training_job_config`` factory's result: called with ``context`` when it takes an argument."""
    try:
        takes_context = bool(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        takes_context = False
    return factory(context) if takes_context else factory()


def task_identity(context: Context) -> TaskIdentity:
    """Who the task instance is (DAG, run, task, map index, try, and the try's id): what its job names and
    tags are made of."""
    ti = context["ti"]
    map_index = -1 if ti.map_index is None else int(ti.map_index)
    ti_id = getattr(ti, "id", None)
    return TaskIdentity(
        ti.dag_id, ti.run_id, ti.task_id, map_index, int(ti.try_number), "" if ti_id is None else str(ti_id)
    )
