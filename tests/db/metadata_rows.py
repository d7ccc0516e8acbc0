"""The metadata an allocator test or benchmark starts from: an empty ledger, no task rows, one running DAG
run, and a quota file applied. Imports Airflow: import it once ``AIRFLOW_HOME`` is set."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from airflow.models.dagrun import DagRun
from airflow.models.task_state_store import TaskStateStoreModel
from airflow.models.taskinstance import TaskInstance
from airflow.models.trigger import Trigger
from sqlalchemy.orm import Session

from airflow_quota.engine.config import QuotaConfig
from airflow_quota.ledger.models import ledger_metadata
from airflow_quota.ledger.store import apply_quota_config


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
