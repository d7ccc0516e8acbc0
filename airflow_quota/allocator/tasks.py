"""The allocator's side of Airflow: read task instances, claim them, resume them, signal them.

Everything here runs inside the cycle's session (the scheduler side may use the metadata DB) and never
commits. A task instance is only resumed after it was *claimed*: on PostgreSQL the row is locked
``FOR UPDATE SKIP LOCKED`` with its state re-checked; on SQLite a guarded no-op UPDATE must match it (it
also takes the database's write lock until the cycle commits). A task cleared, failed or resumed by
someone else between the read and the write is then left alone instead of being resurrected
(research: grant-mechanism.md section 4.5).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from airflow.models.dagrun import DagRun
from airflow.models.task_state_store import TaskStateStoreModel
from airflow.models.taskinstance import TaskInstance, clear_task_instances
from airflow.models.trigger import Trigger, handle_event_submit
from airflow.state import TaskScope, get_state_backend
from airflow.triggers.base import TriggerEvent
from airflow.utils.sqlalchemy import with_row_locks
from airflow.utils.state import TaskInstanceState
from sqlalchemy import and_, select, update
from sqlalchemy.orm import Session

from airflow_quota.allocator.reconcile import TaskView
from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.store import FINAL_STATUSES
from airflow_quota.protocol import PREEMPT_KEY, TRAINING_JOB_KEY, TrainingJobRecord


def is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def deferred_on(session: Session, classpath: str) -> list[tuple[TaskInstance, Trigger]]:
    """Task instances deferred on triggers of ``classpath``, claimed, oldest deferral first."""
    query = (
        select(TaskInstance, Trigger)
        .join(Trigger, TaskInstance.trigger_id == Trigger.id)
        .where(TaskInstance.state == TaskInstanceState.DEFERRED, Trigger.classpath == classpath)
        .order_by(Trigger.created_date, TaskInstance.id)
    )
    if is_postgres(session):
        query = with_row_locks(query, session, of=TaskInstance, skip_locked=True, key_share=False)
        return [(ti, trigger) for ti, trigger in session.execute(query).all()]
    return [
        (ti, trigger)
        for ti, trigger in session.execute(query).all()
        if _claim_sqlite(session, ti.id, trigger.id)
    ]


def claim_deferred(session: Session, ti_id: str) -> TaskInstance | None:
    """The task instance ``ti_id`` if it is still deferred (on any trigger), claimed; else None."""
    query = select(TaskInstance).where(
        TaskInstance.id == uuid.UUID(ti_id), TaskInstance.state == TaskInstanceState.DEFERRED
    )
    if is_postgres(session):
        query = with_row_locks(query, session, of=TaskInstance, skip_locked=True, key_share=False)
        claimed: TaskInstance | None = session.scalar(query)
        return claimed
    ti: TaskInstance | None = session.scalar(query)
    if ti is None or ti.trigger_id is None or not _claim_sqlite(session, ti.id, ti.trigger_id):
        return None
    return ti


def _claim_sqlite(session: Session, ti_id: uuid.UUID, trigger_id: int) -> bool:
    """SQLite: prove the row is still deferred on this trigger and take the write lock until commit."""
    result = session.execute(
        update(TaskInstance)
        .where(
            TaskInstance.id == ti_id,
            TaskInstance.state == TaskInstanceState.DEFERRED,
            TaskInstance.trigger_id == trigger_id,
        )
        .values(trigger_id=TaskInstance.trigger_id)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0) == 1)


def resume(session: Session, ti: TaskInstance, payload: dict[str, Any]) -> None:
    """Resume a claimed deferred task with ``payload`` as its trigger event (what a fired trigger does)."""
    event = TriggerEvent(payload)  # type: ignore[no-untyped-call]  # untyped upstream __init__
    handle_event_submit(event, task_instance=ti, session=session)


def task_views(session: Session) -> dict[str, TaskView]:
    """The task instance of every open (not final) job, by job id; jobs without one are left out."""
    ti = TaskInstance
    query = (
        select(JobRow.job_id, ti.state, ti.try_number, ti.id, ti.pid, Trigger.classpath, Trigger.created_date)
        .join(
            ti,
            and_(
                ti.dag_id == JobRow.dag_id,
                ti.run_id == JobRow.run_id,
                ti.task_id == JobRow.task_id,
                ti.map_index == JobRow.map_index,
            ),
        )
        .outerjoin(Trigger, ti.trigger_id == Trigger.id)
        .where(JobRow.status.not_in(FINAL_STATUSES))
    )
    return {
        job_id: TaskView(
            state=None if state is None else str(state.value if hasattr(state, "value") else state),
            try_number=try_number,
            ti_id=str(ti_id),
            trigger_classpath=classpath,
            deferred_at=created,
            from_worker=pid is not None,
        )
        for job_id, state, try_number, ti_id, pid, classpath, created in session.execute(query).all()
    }


def training_records(session: Session) -> dict[str, TrainingJobRecord]:
    """What each open job's task last recorded under ``TRAINING_JOB_KEY``, by job id."""
    store = TaskStateStoreModel
    query = (
        select(JobRow.job_id, store.value)
        .join(
            store,
            and_(
                store.dag_id == JobRow.dag_id,
                store.run_id == JobRow.run_id,
                store.task_id == JobRow.task_id,
                store.map_index == JobRow.map_index,
            ),
        )
        .where(JobRow.status.not_in(FINAL_STATUSES), store.key == TRAINING_JOB_KEY)
    )
    records: dict[str, TrainingJobRecord] = {}
    for job_id, value in session.execute(query).all():
        try:
            document = json.loads(value)
        except ValueError:
            continue  # not ours to judge; an unreadable record is treated as no record
        if isinstance(document, dict) and isinstance(document.get("lease_id"), str):
            records[job_id] = document  # type: ignore[assignment]  # checked: a JSON object with a lease
    return records


def write_signal(session: Session, row: JobRow, document: dict[str, Any]) -> None:
    """Write the preemption signal a task running in a worker polls (its ``task_state_store``)."""
    if (
        session.scalar(select(DagRun.id).where(DagRun.dag_id == row.dag_id, DagRun.run_id == row.run_id))
        is None
    ):
        return  # the DAG run is gone; nothing can read the signal
    scope = TaskScope(row.dag_id, row.run_id, row.task_id, row.map_index)
    get_state_backend().set(scope, PREEMPT_KEY, json.dumps(document), session=session)


def clear_unresponsive(session: Session, ti_id: str) -> bool:
    """Last resort for a task that does not stop when told: clear it (its try ends)."""
    ti = session.scalar(select(TaskInstance).where(TaskInstance.id == uuid.UUID(ti_id)))
    if ti is None:
        return False
    clear_task_instances([ti], session, dag_run_state=False)
    return True
