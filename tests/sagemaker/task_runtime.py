"""Stand-ins for a task process' runtime, to drive QuotaTrainingOperator as the task runner does.

Two pieces of Airflow's runtime only exist inside a task process that a scheduler started: the task
instance (its identity and ``xcom_push``) and its ``task_state_store``. These stand in for them: the store
round-trips values through JSON, as the Execution API does. Everything else is real: the operator's
methods are called through ``resume_execution`` with the deferral's own kwargs plus the event, and
monitoring events come from running the real trigger against the moto server.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_quota.operators.training import QuotaTrainingOperator
from airflow_quota.protocol import TRAINING_JOB_KEY
from airflow_quota.triggers.sagemaker import SageMakerTrainingJobTrigger


@dataclass
class TaskStateStoreStandIn:
    """``context["task_state_store"]``: values go through JSON, as over the Execution API."""

    values: dict[str, str] = field(default_factory=dict)
    writes: list[tuple[str, Any]] = field(default_factory=list)

    def get(self, key: str, default: Any = None) -> Any:
        return json.loads(self.values[key]) if key in self.values else default

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        assert value is not None
        self.values[key] = json.dumps(value)
        self.writes.append((key, value))

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


@dataclass
class TaskInstanceStandIn:
    """``context["ti"]``: identity and XCom push."""

    dag_id: str
    run_id: str
    task_id: str = "train"
    map_index: int = -1
    try_number: int = 1
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    xcom: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = json.loads(json.dumps(value))


@dataclass
class TaskRun:
    """One task instance of one DAG run, as successive worker runs see it (the store is shared by tries)."""

    operator: QuotaTrainingOperator
    ti: TaskInstanceStandIn
    store: TaskStateStoreStandIn = field(default_factory=TaskStateStoreStandIn)

    @property
    def context(self) -> Any:
        return {"ti": self.ti, "task_state_store": self.store}

    def start_from_trigger(self) -> TaskDeferred:
        """What the scheduler does with a task that starts from the triggerer: defer it, no worker run."""
        args = self.operator.start_trigger_args
        assert self.operator.start_from_trigger and args is not None
        module, _, name = args.trigger_cls.rpartition(".")
        trigger = getattr(importlib.import_module(module), name)(**(args.trigger_kwargs or {}))
        return TaskDeferred(trigger=trigger, method_name=args.next_method, kwargs=args.next_kwargs)

    def execute(self) -> TaskDeferred:
        with pytest.raises(TaskDeferred) as deferred:
            self.operator.execute(self.context)
        return deferred.value

    def resume(self, deferred: TaskDeferred, event: dict[str, Any]) -> Any:
        """What the task runner does on a resume: ``next_method(context, **next_kwargs, event=...)``."""
        next_kwargs = json.loads(json.dumps({**(deferred.kwargs or {}), "event": event}))
        return self.operator.resume_execution(deferred.method_name, next_kwargs, self.context)

    def resume_deferred(self, deferred: TaskDeferred, event: dict[str, Any]) -> TaskDeferred:
        with pytest.raises(TaskDeferred) as again:
            self.resume(deferred, event)
        return again.value

    def retry(self) -> TaskRun:
        """The next try of the same task instance: a new TI id, the same task_state_store."""
        ti = TaskInstanceStandIn(self.ti.dag_id, self.ti.run_id, try_number=self.ti.try_number + 1)
        return TaskRun(self.operator, ti, self.store)

    def grant(self, attempt: int = 1, *, ti_id: str | None = None) -> dict[str, Any]:
        ti = self.ti
        job_id = f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.map_index}/{ti.try_number}"
        return {
            "lease_id": f"{job_id}#{attempt}",
            "job_id": job_id,
            "ti_id": ti_id or str(self.ti.id),
            "try_number": self.ti.try_number,
            "attempt": attempt,
            "capacityUnit": "ml.p4d.24xlarge",
            "instanceCount": 2,
            "borrowed": 0,
            "granted_at": "2026-11-30T05:00:00+00:00",
            "submitted_at": "2026-11-30T04:59:00+00:00",
        }

    def record(self) -> dict[str, Any]:
        return dict(self.store.get(TRAINING_JOB_KEY))


def monitor_event(deferred: TaskDeferred, timeout: float = 10) -> dict[str, Any]:
    """Run the monitoring trigger the task deferred on until its one event (as the triggerer would)."""
    trigger = deferred.trigger
    assert isinstance(trigger, SageMakerTrainingJobTrigger)

    async def first() -> dict[str, Any]:
        return dict((await anext(trigger.run())).payload)

    return asyncio.run(asyncio.wait_for(first(), timeout))
