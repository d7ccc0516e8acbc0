"""Local GPU device indices across capacity changes and job queues, against a real metadata DB.

Each test runs cycles on SQLite and PostgreSQL with task instances deferred for admission on a
``local-gpu`` unit, ends tasks between cycles as Airflow would, and reads the device indices the ledger
granted: never one index held by two jobs, whatever the quota file did meanwhile. Each grant's audit row
names its devices, and the GPU timeline draws the job on those GPUs' rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from airflow.models.taskinstance import TaskInstance
from airflow.utils.state import TaskInstanceState

from airflow_quota.allocator.cycle import CycleReport, run_allocation_cycle
from airflow_quota.engine.config import QuotaConfig, parse_quota_config
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.models import AuditKind, AuditRow, JobRow
from airflow_quota.ledger.timeline import queue_timeline
from tests.db.conftest import Database
from tests.db.metadata_rows import reset_for_allocation
from tests.db.test_allocator_cycle import DAG_ID, RUN_ID, START, defer

pytestmark = pytest.mark.db

QUEUE = "workstation"


def workstation(gpus: int, queue: str = QUEUE) -> dict[str, Any]:
    """A job queue of ``gpus`` local GPUs, all of them the RESERVE share ``team-a``'s."""
    return {
        "jobQueueName": queue,
        "capacityLimits": [{"capacityUnit": "local-gpu", "maxCapacity": gpus}],
        "quotaShares": [
            {
                "quotaShareName": "team-a",
                "capacityLimits": [{"capacityUnit": "local-gpu", "maxCapacity": gpus}],
                "resourceSharingConfiguration": {"strategy": "RESERVE"},
            }
        ],
    }


@pytest.fixture
def db(migrated: Database) -> Iterator[Database]:
    quotas = parse_quota_config({"jobQueues": [workstation(4)]}, "quotas.yaml")
    reset_for_allocation(migrated.engine, dag_id=DAG_ID, run_id=RUN_ID, start=START, quotas=quotas)
    yield migrated


def apply(db: Database, quotas: QuotaConfig) -> None:
    with db.session() as session, session.begin():
        apply_quota_config(session, quotas, applied_by="admin", source="quotas.yaml", now=START)


def cycle(db: Database, seconds: float) -> CycleReport:
    with db.session() as session, session.begin():
        return run_allocation_cycle(session, START + timedelta(seconds=seconds))


def wait_for_gpu(db: Database, task_id: str, queue: str = QUEUE) -> str:
    return defer(db, task_id, gpus=1, job_queue=queue, capacity_unit="local-gpu")


def end(db: Database, *task_ids: str) -> None:
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(TaskInstance.__table__)
            .where(TaskInstance.__table__.c.task_id.in_(task_ids))
            .values(state=TaskInstanceState.SUCCESS)
        )


def devices(db: Database) -> dict[str, list[int]]:
    """The device indices each job holds now, by task id."""
    with db.session() as session:
        rows = session.scalars(sa.select(JobRow))
        return {row.task_id: row.held_devices for row in rows if row.held_devices}


def test_an_index_held_beyond_a_lowered_capacity_stays_held_counts_and_is_never_given_again(
    db: Database,
) -> None:
    for n in range(4):
        wait_for_gpu(db, f"held-{n}")
    cycle(db, 1)
    assert devices(db) == {"held-0": [0], "held-1": [1], "held-2": [2], "held-3": [3]}
    # The admin takes a GPU away while its job runs on it (allowed: the job keeps it until it ends).
    apply(db, parse_quota_config({"jobQueues": [workstation(3)]}, "quotas.yaml"))
    end(db, "held-0", "held-1")
    first = wait_for_gpu(db, "new-0")
    second = wait_for_gpu(db, "new-1")

    report = cycle(db, 2)

    assert report.failed_queues == {}
    assert [lease.job_id for lease in report.granted] == [first]  # 3 GPUs: held-2, held-3 and new-0
    assert devices(db) == {"held-2": [2], "held-3": [3], "new-0": [0]}

    end(db, "held-3")
    report = cycle(db, 3)

    assert [lease.job_id for lease in report.granted] == [second]
    assert devices(db) == {"held-2": [2], "new-0": [0], "new-1": [1]}  # index 3 is gone with its GPU


def test_two_job_queues_with_local_units_applied_before_the_rule_never_share_a_device(db: Database) -> None:
    # A ledger applied before a quota file could name one local unit only: two queues on the host's GPUs.
    legacy = QuotaConfig.model_validate({"jobQueues": [workstation(2), workstation(2, "second")]})
    apply(db, legacy)
    wait_for_gpu(db, "first-0")
    wait_for_gpu(db, "first-1")
    cycle(db, 1)
    late = wait_for_gpu(db, "second-0", queue="second")

    report = cycle(db, 2)

    assert late not in [lease.job_id for lease in report.granted]
    assert devices(db) == {"first-0": [0], "first-1": [1]}
    assert "one local unit" in report.failed_queues["second"]

    end(db, "first-1")  # its index is free once its queue's part of a cycle has released it
    granted = [lease.job_id for seconds in (3, 4) for lease in cycle(db, seconds).granted]

    assert granted == [late]
    assert devices(db) == {"first-0": [0], "second-0": [1]}


def granted_devices(db: Database) -> dict[str, list[int]]:
    """The devices each GRANTED audit row names, by job id (every grant of this test has them)."""
    with db.session() as session:
        rows = session.scalars(sa.select(AuditRow).where(AuditRow.kind == AuditKind.GRANTED.value))
        return {str(row.job_id): (row.details or {})["devices"] for row in rows}


def timeline_rows(db: Database, queue: str) -> dict[str, tuple[bool, list[tuple[int, int | None]]]]:
    """The queue's GPU timeline: per unit, whether its rows are GPUs, and each job's (row, device)."""
    with db.session() as session:
        timeline = queue_timeline(session, queue, None, START + timedelta(seconds=60))
    return {
        unit.capacity_unit: (unit.devices, sorted((bar.row, bar.device) for bar in unit.bars))
        for unit in timeline.units
    }


def test_a_grant_records_its_gpus_and_the_timeline_draws_the_job_on_them(db: Database) -> None:
    """Two job queues on the host's GPUs (a ledger applied before the one-local-unit rule): the second
    queue's job trains on GPU 1 (GPU 0 is the first queue's), and its queue's timeline draws it on GPU 1,
    not on the first row of its own queue as a count alone would lay it out."""
    legacy = QuotaConfig.model_validate({"jobQueues": [workstation(2), workstation(2, "second")]})
    apply(db, legacy)
    first = wait_for_gpu(db, "first-0")
    cycle(db, 1)
    late = wait_for_gpu(db, "second-0", queue="second")
    cycle(db, 2)

    assert devices(db) == {"first-0": [0], "second-0": [1]}
    assert granted_devices(db) == {first: [0], late: [1]}
    assert timeline_rows(db, "second") == {"local-gpu": (True, [(1, 1)])}
    assert timeline_rows(db, QUEUE) == {"local-gpu": (True, [(0, 0)])}

    # first-0 ends; second-0 keeps GPU 1 and a new job of the first queue gets GPU 0 again.
    end(db, "first-0")
    cycle(db, 3)
    again = wait_for_gpu(db, "first-1")
    cycle(db, 4)
    assert granted_devices(db)[again] == [0]
    assert timeline_rows(db, "second") == {"local-gpu": (True, [(1, 1)])}
