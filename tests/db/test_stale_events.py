"""The scheduler hosting the allocator ignores a deferring run's stale success event (allocator.stale_events).

Airflow's own ``SchedulerJobRunner.process_executor_events`` runs on the metadata DB with a real
``LocalExecutor``'s event buffer and the serialized DAG the scheduler reads: first as installed (it fails a
task resumed after a deferral when the deferring run's success arrives late: the bug this works around),
then with the fix the allocator's executor installs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import airflow
import pytest
import sqlalchemy as sa
from airflow.executors.local_executor import LocalExecutor
from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.models.taskinstancekey import TaskInstanceKey
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from airflow.serialization.serialized_objects import DagSerialization
from airflow.utils.state import TaskInstanceState

from airflow_quota.allocator.stale_events import ignore_stale_defer_exit_events
from tests.db.allocation import DAG_ID, RUN_ID, START
from tests.db.conftest import Database

pytestmark = pytest.mark.db

JOB_ID = 7


class OneDagBag:
    """The scheduler's DAG bag for the one DAG these task instances belong to (serialized, as it reads it)."""

    def __init__(self, task_ids: list[str]) -> None:
        with DAG(DAG_ID, schedule=None) as dag:
            for task_id in task_ids:
                EmptyOperator(task_id=task_id)
        self.dag = DagSerialization.from_dict(DagSerialization.to_dict(dag))

    def get_dag_for_run(self, dag_run: Any, session: Any) -> Any:
        return self.dag


@pytest.fixture
def db(migrated: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    with migrated.engine.begin() as connection:
        for model in (TaskInstance, DagRun):
            connection.execute(sa.delete(model.__table__))
        connection.execute(
            sa.insert(DagRun.__table__).values(
                dag_id=DAG_ID, run_id=RUN_ID, run_type="manual", run_after=START, state="running"
            )
        )
    # Whatever a test installs is undone after it.
    monkeypatch.setattr(
        SchedulerJobRunner, "process_executor_events", SchedulerJobRunner.__dict__["process_executor_events"]
    )
    yield migrated


def task_instance(db: Database, task_id: str, state: TaskInstanceState, next_method: str | None) -> None:
    with db.engine.begin() as connection:
        connection.execute(
            sa.insert(TaskInstance.__table__).values(
                id=uuid.uuid4(),
                dag_id=DAG_ID,
                run_id=RUN_ID,
                task_id=task_id,
                map_index=-1,
                try_number=1,
                pool="default_pool",
                pool_slots=1,
                priority_weight=1,
                queue="default",
                state=state,
                next_method=next_method,
                queued_by_job_id=JOB_ID,
            )
        )


def the_worker_reports(executor: LocalExecutor, *task_ids: str) -> None:
    """The executor's success of try 1 of each task: its worker run ended (for a deferral, a stale one)."""
    for task_id in task_ids:
        key = TaskInstanceKey(DAG_ID, task_id, RUN_ID, 1, -1)
        executor.event_buffer[key] = (TaskInstanceState.SUCCESS, None)


def process_events(db: Database, executor: LocalExecutor, task_ids: list[str]) -> dict[str, str]:
    """One scheduler loop's processing of the executor's events; each task instance's state after it."""
    with db.session() as session, session.begin():
        SchedulerJobRunner.process_executor_events(
            executor=executor, job_id=JOB_ID, scheduler_dag_bag=OneDagBag(task_ids), session=session
        )
    with db.session() as session:
        rows = session.execute(sa.select(TaskInstance.task_id, TaskInstance.state))
        return {task_id: str(state) for task_id, state in rows}


@pytest.mark.parametrize("resumed_state", [TaskInstanceState.QUEUED, TaskInstanceState.RUNNING])
def test_airflow_as_installed_fails_a_resumed_task_on_the_deferring_runs_late_success(
    db: Database, resumed_state: TaskInstanceState
) -> None:
    task_instance(db, "resumed", resumed_state, next_method="on_grant")
    executor = LocalExecutor(parallelism=1)
    the_worker_reports(executor, "resumed")

    states = process_events(db, executor, ["resumed"])

    assert states["resumed"] == "failed", (
        f"Airflow {airflow.__version__} no longer fails a task resumed after a deferral on the deferring "
        "run's late success (apache/airflow#72716 fixed): airflow_quota/allocator/stale_events.py can go"
    )


def test_with_the_fix_the_stale_success_is_dropped_and_a_real_end_still_counts(db: Database) -> None:
    assert ignore_stale_defer_exit_events()
    assert not ignore_stale_defer_exit_events()  # once
    task_instance(db, "queued_again", TaskInstanceState.QUEUED, next_method="on_grant")
    task_instance(db, "running_again", TaskInstanceState.RUNNING, next_method="on_stop")
    # A run that never deferred, still RUNNING when its worker says it ended: killed outside Airflow.
    task_instance(db, "killed", TaskInstanceState.RUNNING, next_method=None)
    executor = LocalExecutor(parallelism=1)
    the_worker_reports(executor, "queued_again", "running_again", "killed")

    states = process_events(db, executor, ["queued_again", "running_again", "killed"])

    assert states == {"queued_again": "queued", "running_again": "running", "killed": "failed"}
    assert executor.event_buffer == {}  # every event consumed: none left for the next loop
