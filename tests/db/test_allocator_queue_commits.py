"""A host's cycle commits each job queue's part as it ends (``run_allocation_cycle(commit_each_queue=True)``).

A queue's grants reach their tasks without waiting for the other queues' parts, each part holds the
allocator's lock in its own transaction, and a cycle that finds another allocator holding it between two
parts ends there. Against a migrated metadata DB; the PostgreSQL cases block a part for real with a row
lock held from another connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from airflow.models.taskinstance import TaskInstance
from airflow.utils.state import TaskInstanceState
from sqlalchemy.orm import Session

from airflow_quota.allocator.cycle import ALLOCATOR_LOCK_ID, CycleReport, run_allocation_cycle
from airflow_quota.allocator.kept_state import KeptQueues
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.engine.config import parse_quota_config
from airflow_quota.ledger.models import JobQueueRow, JobRow
from tests.db.allocation import DAG_ID, RUN_ID, START, defer
from tests.db.conftest import Database
from tests.db.metadata_rows import reset_for_allocation

pytestmark = pytest.mark.db

POSTGRESQL_ONLY = pytest.mark.parametrize("database", ["postgresql"], indirect=True)
NOW = START + timedelta(seconds=1)
WAIT_S = 20.0


def queue(name: str) -> dict[str, object]:
    return {
        "jobQueueName": name,
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 1}],
        "quotaShares": [
            {
                "quotaShareName": "team-a",
                "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 1}],
                "resourceSharingConfiguration": {"strategy": "RESERVE"},
            }
        ],
    }


QUOTAS = parse_quota_config({"jobQueues": [queue("queue-a"), queue("queue-b")]}, "quotas.yaml")


@pytest.fixture
def db(migrated: Database) -> Iterator[Database]:
    reset_for_allocation(migrated.engine, dag_id=DAG_ID, run_id=RUN_ID, start=START, quotas=QUOTAS)
    defer(migrated, "on-a", job_queue="queue-a")
    defer(migrated, "on-b", job_queue="queue-b")
    yield migrated


def host_cycle(db: Database) -> CycleReport:
    """A cycle as ``allocator.host.run_cycle`` runs it: each queue's part committed."""
    with Session(db.engine, expire_on_commit=False) as session:
        report = run_allocation_cycle(
            session, NOW, CycleSettings(kept_queues=KeptQueues()), commit_each_queue=True
        )
        assert not session.in_transaction()  # nothing left for the caller to commit
        return report


def state_of(db: Database, task_id: str) -> str | None:
    with Session(db.engine) as session:
        return session.scalar(sa.select(TaskInstance.state).where(TaskInstance.task_id == task_id))


def jobs_of(db: Database, queue_name: str) -> list[str]:
    with Session(db.engine) as session:
        return list(session.scalars(sa.select(JobRow.status).where(JobRow.job_queue_name == queue_name)))


def in_thread(work: Callable[[], CycleReport]) -> tuple[threading.Thread, list[CycleReport]]:
    reports: list[CycleReport] = []
    thread = threading.Thread(target=lambda: reports.append(work()), daemon=True)
    thread.start()
    return thread, reports


def eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.05)


def hold_queue_row(db: Database, queue_name: str) -> sa.Connection:
    """Another connection holding the queue's row lock (a part of that queue waits for it)."""
    connection = db.engine.connect()
    table = JobQueueRow.__table__
    connection.execute(sa.select(table).where(table.c.job_queue_name == queue_name).with_for_update())
    return connection


def test_each_queues_part_is_committed_and_nothing_is_left_open(db: Database) -> None:
    report = host_cycle(db)

    assert sorted(lease.job_id.split("/")[2] for lease in report.granted) == ["on-a", "on-b"]
    assert state_of(db, "on-a") == state_of(db, "on-b") == TaskInstanceState.SCHEDULED
    assert jobs_of(db, "queue-a") == jobs_of(db, "queue-b") == ["SCHEDULED"]


@POSTGRESQL_ONLY  # row locks that block: SQLite takes one lock for the whole file
def test_a_queues_grants_are_committed_while_the_next_queues_part_still_runs(db: Database) -> None:
    blocker = hold_queue_row(db, "queue-b")
    try:
        thread, reports = in_thread(lambda: host_cycle(db))
        eventually(lambda: state_of(db, "on-a") == TaskInstanceState.SCHEDULED, "queue-a's grant committed")
        assert thread.is_alive()  # queue-b's part waits for the row
        assert state_of(db, "on-b") == TaskInstanceState.DEFERRED
    finally:
        blocker.rollback()
        blocker.close()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert len(reports[0].granted) == 2
    assert state_of(db, "on-b") == TaskInstanceState.SCHEDULED


@POSTGRESQL_ONLY  # the allocator's lock is PostgreSQL's advisory lock; SQLite runs one scheduler
def test_a_cycle_ends_when_another_allocator_takes_the_lock_between_two_parts(db: Database) -> None:
    blocker = hold_queue_row(db, "queue-a")  # the cycle waits inside its first part, holding the lock
    other = db.engine.connect()  # another allocator, waiting for the lock
    try:
        thread, reports = in_thread(lambda: host_cycle(db))
        eventually(
            lambda: _advisory_waiters(db) == 0 and _advisory_holders(db) == 1, "the cycle holds the lock"
        )
        waiter = threading.Thread(
            target=lambda: other.execute(
                sa.text("SELECT pg_advisory_xact_lock(:id)"), {"id": ALLOCATOR_LOCK_ID}
            ),
            daemon=True,
        )
        waiter.start()
        eventually(lambda: _advisory_waiters(db) == 1, "the other allocator waits for the lock")
        blocker.rollback()  # the first part goes on, commits, and the other allocator gets the lock
        thread.join(WAIT_S)
        waiter.join(WAIT_S)
        assert not thread.is_alive() and not waiter.is_alive()
        report = reports[0]
        assert [lease.job_id.split("/")[2] for lease in report.granted] == ["on-a"]
        assert state_of(db, "on-b") == TaskInstanceState.DEFERRED  # left to the allocator holding the lock
        assert jobs_of(db, "queue-b") == []
    finally:
        other.rollback()
        other.close()
        blocker.close()
    later = host_cycle(db)  # the lock free again: the next cycle takes queue-b
    assert [lease.job_id.split("/")[2] for lease in later.granted] == ["on-b"]


def _advisory_holders(db: Database) -> int:
    return _advisory_locks(db, granted=True)


def _advisory_waiters(db: Database) -> int:
    return _advisory_locks(db, granted=False)


def _waiting_for_a_row_lock(db: Database) -> int:
    """The sessions on this database waiting for a lock another one holds (the cycle, on a queue's row)."""
    with db.engine.connect() as connection:
        return int(
            connection.scalar(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
            or 0
        )


def _advisory_locks(db: Database, *, granted: bool) -> int:
    with db.engine.connect() as connection:
        return int(
            connection.scalar(
                sa.text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted = :granted "
                    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                ),
                {"granted": granted},
            )
            or 0
        )


@POSTGRESQL_ONLY  # row locks that block: SQLite takes one lock for the whole file
def test_a_task_that_ends_while_an_earlier_queues_part_runs_is_finished_in_the_same_cycle(
    db: Database,
) -> None:
    host_cycle(db)  # both granted
    set_state(db, "on-b", TaskInstanceState.RUNNING)  # its worker runs it
    blocker = hold_queue_row(db, "queue-a")  # the next cycle waits inside queue-a's part
    try:
        thread, reports = in_thread(lambda: host_cycle(db))
        eventually(lambda: _waiting_for_a_row_lock(db) == 1, "the cycle waits inside queue-a's part")
        set_state(db, "on-b", TaskInstanceState.SUCCESS)  # while queue-a's part runs
    finally:
        blocker.rollback()
        blocker.close()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert [job_id.split("/")[2] for job_id in reports[0].finished] == ["on-b"]
    assert jobs_of(db, "queue-b") == ["SUCCEEDED"]


def set_state(db: Database, task_id: str, state: TaskInstanceState) -> None:
    with db.engine.begin() as connection:
        table = TaskInstance.__table__
        connection.execute(sa.update(table).where(table.c.task_id == task_id).values(state=state))
