"""The grants' task instances written in bulk (``tasks.write_resumed``): what the unit of work would write.

A cycle resumes each granted task with Airflow's own ``handle_event_submit`` (``tasks.resume``, flush
left to the caller) and writes them together; on both backends, against a migrated metadata DB.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from airflow.models.taskinstance import TaskInstance
from airflow.sdk.serde import deserialize
from airflow.utils.state import TaskInstanceState
from sqlalchemy.orm import Session

from airflow_quota.allocator.tasks import resume, write_resumed
from airflow_quota.engine.config import parse_quota_config
from tests.db.allocation import DAG_ID, QUEUE, RUN_ID, START, defer
from tests.db.conftest import Database
from tests.db.metadata_rows import reset_for_allocation

pytestmark = pytest.mark.db

QUOTAS = parse_quota_config(
    {
        "jobQueues": [
            {
                "jobQueueName": QUEUE,
                "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 4}],
                "quotaShares": [
                    {
                        "quotaShareName": "team-a",
                        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 4}],
                        "resourceSharingConfiguration": {"strategy": "RESERVE"},
                    }
                ],
            }
        ]
    },
    "quotas.yaml",
)


@pytest.fixture
def db(migrated: Database) -> Iterator[Database]:
    reset_for_allocation(migrated.engine, dag_id=DAG_ID, run_id=RUN_ID, start=START, quotas=QUOTAS)
    for task_id in ("job0", "job1", "job2"):
        defer(db=migrated, task_id=task_id)
    yield migrated


def loaded(session: Session) -> dict[str, TaskInstance]:
    return {ti.task_id: ti for ti in session.scalars(sa.select(TaskInstance))}


def statements_on_task_instance(session: Session) -> list[str]:
    """The UPDATEs of ``task_instance`` the session's connection runs from now on (a list that fills)."""
    seen: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        if statement.lstrip().upper().startswith("UPDATE") and "task_instance" in statement:
            seen.append(statement)

    sa.event.listen(session.connection(), "before_cursor_execute", record)
    return seen


def test_resumed_task_instances_are_written_as_airflow_leaves_them_and_not_written_again(
    db: Database,
) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    with db.session() as session, session.begin():
        tis = loaded(session)
        for task_id in ("job0", "job1"):
            resume(session, tis[task_id], {"lease_id": f"{task_id}#1"}, flush=False)
        updates = statements_on_task_instance(session)
        write_resumed(session, [tis["job0"], tis["job1"], tis["job2"]])  # job2 unchanged: not written
        assert len(updates) == 1  # both in one statement
        assert not session.dirty
        session.flush()
        assert len(updates) == 1  # nothing left for the unit of work
        assert tis["job0"] not in session and tis["job2"] in session  # the written ones forgotten
        assert tis["job0"].state == TaskInstanceState.SCHEDULED  # holding what was written
    with db.session() as session:
        tis = loaded(session)
        for task_id in ("job0", "job1"):
            ti = tis[task_id]
            assert (ti.state, ti.trigger_id, ti.next_method) == (
                TaskInstanceState.SCHEDULED,
                None,
                "on_grant",
            )
            assert deserialize(ti.next_kwargs) == {"round": 1, "event": {"lease_id": f"{task_id}#1"}}
            assert ti.scheduled_dttm is not None and ti.scheduled_dttm >= before
            assert ti.updated_at is not None and ti.updated_at >= before
        assert tis["job2"].state == TaskInstanceState.DEFERRED
        assert tis["job2"].trigger_id is not None


def test_a_task_instance_changed_beyond_its_plain_columns_is_left_to_the_unit_of_work(db: Database) -> None:
    with db.session() as session, session.begin():
        tis = loaded(session)
        resume(session, tis["job0"], {"lease_id": "job0#1"}, flush=False)
        resume(session, tis["job1"], {"lease_id": "job1#1"}, flush=False)
        tis["job1"]._rendered_map_index = "shown"  # the attribute of column rendered_map_index
        write_resumed(session, [tis["job0"], tis["job1"]])
        assert not session.dirty
    with db.session() as session:
        tis = loaded(session)
        assert [tis[task_id].state for task_id in ("job0", "job1")] == [TaskInstanceState.SCHEDULED] * 2
        assert tis["job1"]._rendered_map_index == "shown"


def test_a_failed_bulk_write_raises_and_leaves_the_task_instances_as_the_database_has_them(
    db: Database,
) -> None:
    with db.session() as session, session.begin():
        tis = loaded(session)
        savepoint = session.begin_nested()  # as a cycle's queue part runs
        resume(session, tis["job0"], {"lease_id": "job0#1"}, flush=False)
        tis["job0"].pool = None  # type: ignore[assignment]  # NOT NULL: the statement fails for real
        with pytest.raises(sa.exc.IntegrityError):
            write_resumed(session, [tis["job0"]])
        savepoint.rollback()
        assert tis["job0"].state == TaskInstanceState.DEFERRED  # read again: not the values that failed
        assert tis["job0"].pool is not None
