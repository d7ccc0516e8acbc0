"""The metadata an allocator test or benchmark starts from: an empty ledger, no task rows, one running DAG
run, and a quota file applied. Imports Airflow: import it once ``AIRFLOW_HOME`` is set."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from airflow.models.dagrun import DagRun
from airflow.models.task_state_store import TaskStateStoreModel
from airflow.models.taskinstance import TaskInstance
from airflow.models.trigger import Trigger
from airflow.sdk.serde import serialize
from airflow.utils.state import TaskInstanceState
from sqlalchemy.orm import Session

from airflow_quota.allocator.job_ids import job_id_for
from airflow_quota.engine.config import QuotaConfig
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.models import ledger_metadata
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH


def reset_for_allocation(
    engine: sa.Engine,
    *,
    dag_id: str,
    run_id: str,
    start: datetime,
    quotas: QuotaConfig,
    applied_by: str = "test",
    source: str = "quotas.yaml",
) -> None:
    """Empty the ledger and Airflow's task tables, write one running DAG run and apply ``quotas``."""
    with engine.begin() as connection:
        for table in reversed(ledger_metadata.sorted_tables):
            connection.execute(table.delete())
        for model in (TaskStateStoreModel, TaskInstance, Trigger, DagRun):
            connection.execute(sa.delete(model.__table__))
        connection.execute(
            sa.insert(DagRun.__table__).values(
                dag_id=dag_id, run_id=run_id, run_type="manual", run_after=start, state="running"
            )
        )
    with Session(engine) as session, session.begin():
        apply_quota_config(session, quotas, applied_by=applied_by, source=source, now=start)


def insert_deferred_task(
    session: Session,
    kwargs: dict[str, Any],
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    deferred_at: datetime,
    pid: int | None = None,
    next_kwargs: dict[str, Any] | None = None,
    plain_json: bool = False,
    trigger_id: int | None = None,
) -> str:
    """Write a task instance (try 1) DEFERRED on the admission trigger with ``kwargs``, as Airflow leaves
    one; return its job id. ``plain_json``: a worker's deferral (the Execution API stores the kwargs as
    json.dumps, unencrypted); ``pid``: deferred from a worker run; ``trigger_id``: the trigger row's id
    (by default the database's next)."""
    trigger = Trigger(ADMISSION_CLASSPATH, kwargs, created_date=deferred_at)
    trigger.id = trigger_id
    if plain_json:
        trigger.encrypted_kwargs = json.dumps(serialize(kwargs))
    session.add(trigger)
    session.flush()
    session.execute(
        sa.insert(TaskInstance.__table__).values(
            dag_id=dag_id,
            run_id=run_id,
            task_id=task_id,
            map_index=-1,
            try_number=1,
            pool="default_pool",
            pool_slots=1,
            state=TaskInstanceState.DEFERRED,
            trigger_id=trigger.id,
            next_method="on_grant",
            next_kwargs=serialize(next_kwargs or {}),
            pid=pid,
        )
    )
    return job_id_for(dag_id, run_id, task_id, -1, 1)
