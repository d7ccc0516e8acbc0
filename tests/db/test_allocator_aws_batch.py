"""Allocation cycles on a job queue AWS Batch schedules (``scheduler: AWS_BATCH`` in the quota file), on a
real, migrated Airflow metadata DB: its waiting tasks are handed to AWS Batch, with no lease and nothing in
the ledger; jobs the ledger knew before the queue moved go on through our allocator.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from airflow.models.taskinstance import TaskInstance
from airflow.sdk.serde import deserialize
from airflow.utils.state import TaskInstanceState

from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.engine.config import QuotaConfig, parse_quota_config
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.models import AuditRow, JobRow
from tests.db.allocation import DAG_ID, QUEUE, RUN_ID, START, cycle, defer
from tests.db.conftest import Database
from tests.db.metadata_rows import reset_for_allocation

pytestmark = pytest.mark.db

SETTLE_TIME = CycleSettings().settle_time


def quotas(scheduler: str | None) -> QuotaConfig:
    queue: dict[str, Any] = {
        "jobQueueName": QUEUE,
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 1}],
        "quotaShares": [
            {
                "quotaShareName": "team-a",
                "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 1}],
                "resourceSharingConfiguration": {"strategy": "RESERVE"},
            }
        ],
    }
    if scheduler is not None:
        queue["scheduler"] = scheduler
    return parse_quota_config({"jobQueues": [queue]}, "quotas.yaml")


@pytest.fixture
def db(migrated: Database) -> Iterator[Database]:
    reset_for_allocation(
        migrated.engine, dag_id=DAG_ID, run_id=RUN_ID, start=START, quotas=quotas("AWS_BATCH")
    )
    yield migrated


def apply(db: Database, config: QuotaConfig, at: datetime) -> None:
    with db.session() as session, session.begin():
        apply_quota_config(session, config, applied_by="test", source="quotas.yaml", now=at)


def task(db: Database, task_id: str) -> TaskInstance:
    with db.session() as session:
        return session.scalars(sa.select(TaskInstance).where(TaskInstance.task_id == task_id)).one()


def handed_over(db: Database, task_id: str, job_id: str) -> bool:
    """The task was resumed with the handover event (and nothing else of what it deferred with changed)."""
    ti = task(db, task_id)
    return (ti.state, ti.trigger_id, ti.next_method, deserialize(ti.next_kwargs)) == (
        TaskInstanceState.SCHEDULED,
        None,
        "on_grant",
        {"round": 1, "event": {"scheduler": "AWS_BATCH", "job_id": job_id}},
    )


def ledger_jobs(db: Database) -> dict[str, str]:
    with db.session() as session:
        return {job_id: status for job_id, status in session.execute(sa.select(JobRow.job_id, JobRow.status))}


def test_every_waiting_task_of_an_aws_batch_queue_is_handed_over_with_no_lease(db: Database) -> None:
    """More requests than the queue's capacity: AWS Batch, not our allocator, decides who waits."""
    jobs = {task_id: defer(db, task_id) for task_id in ("job0", "job1", "job2")}

    report = cycle(db, START + timedelta(seconds=1))

    assert (report.submitted, report.granted, report.rejected) == ([], [], {})
    assert all(handed_over(db, task_id, job_id) for task_id, job_id in jobs.items())
    assert ledger_jobs(db) == {}
    with db.session() as session:  # only the quota file's apply is audited: no job decision
        assert {row.kind for row in session.scalars(sa.select(AuditRow))} == {"CONFIG_CHANGED"}


def test_a_task_deferred_from_a_worker_is_handed_over_once_it_has_settled(db: Database) -> None:
    job_id = defer(db, "job0", pid=4242)

    cycle(db, START + SETTLE_TIME - timedelta(seconds=1))

    assert task(db, "job0").state == TaskInstanceState.DEFERRED  # a stale executor event could follow
    assert ledger_jobs(db) == {}

    cycle(db, START + SETTLE_TIME)

    assert handed_over(db, "job0", job_id)


def test_moving_a_queue_to_aws_batch_keeps_the_jobs_our_allocator_knows_and_hands_over_new_ones(
    db: Database,
) -> None:
    apply(db, quotas(None), START)
    running = defer(db, "running")
    waiting = defer(db, "waiting")
    cycle(db, START + timedelta(seconds=1))
    assert ledger_jobs(db) == {running: "SCHEDULED", waiting: "RUNNABLE"}  # one GPU: granted, and waiting

    apply(db, quotas("AWS_BATCH"), START + timedelta(seconds=2))  # the queue's one line changes
    new = defer(db, "new", deferred_at=START + timedelta(seconds=3))
    cycle(db, START + timedelta(seconds=4))

    assert handed_over(db, "new", new)
    assert ledger_jobs(db) == {running: "SCHEDULED", waiting: "RUNNABLE"}  # unchanged, still ours
    assert task(db, "waiting").state == TaskInstanceState.DEFERRED

    apply(db, quotas("AIRFLOW"), START + timedelta(seconds=5))  # and back: new requests are ours again
    back = defer(db, "back", deferred_at=START + timedelta(seconds=6))
    report = cycle(db, START + timedelta(seconds=7))

    assert report.submitted == [back]
    assert ledger_jobs(db)[back] == "RUNNABLE"
    assert task(db, "back").state == TaskInstanceState.DEFERRED
