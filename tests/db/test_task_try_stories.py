"""A job whose task try ended says what ended it: a failure, a lost task runner, a reset, a clear.

Each try ends the way Airflow 3.3 ends it, with Airflow's own code (``tests.db.airflow_transitions``), on
a real, migrated metadata DB (SQLite and PostgreSQL); the job's reason is what the user reads in the
page, the CLI and the REST API. Before issue 18 a try that failed with retries left (or whose runner died,
or that a restarted scheduler reset) read "Its task try 1 was cleared; the task instance is now at try 1":
Airflow gives the task instance a new id as soon as it archives a try, and that read as a clear.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa
from airflow.jobs.job import Job
from airflow.models.log import Log
from airflow.models.taskinstance import TaskInstance
from airflow.models.taskinstancehistory import TaskInstanceHistory

from airflow_quota.allocator.job_ids import job_id_for
from tests.db.airflow_transitions import (
    a_scheduler_job,
    cleared_by_user,
    heartbeat_timed_out,
    run_in_worker,
    scheduler_restarted,
)
from tests.db.conftest import Database
from tests.db.test_allocator_cycle import DAG_ID, RUN_ID, db, defer, job
from tests.db.test_allocator_lifecycle import cycle, defer_on_monitor, record_training_job, teams

pytestmark = pytest.mark.db
__all__ = ["db", "teams"]  # the fixtures this module borrows

TASK = "train"


@pytest.fixture
def fresh(teams: Database) -> Iterator[Database]:
    """Airflow's history of earlier tests' tries is gone too (the same task ids and try numbers)."""
    with teams.engine.begin() as connection:
        for model in (Log, TaskInstanceHistory, Job):
            connection.execute(sa.delete(model.__table__))
    yield teams


def retries_left(db: Database) -> None:
    """The task has one retry (Airflow sets ``max_tries`` from the task's ``retries``)."""
    with db.engine.begin() as connection:
        connection.execute(sa.update(TaskInstance.__table__).values(max_tries=1))


def failed(db: Database, scheduler: int) -> None:
    """The task failed and the scheduler handled it (``TaskInstance.handle_failure``)."""
    with db.session() as session:
        ti = session.scalar(sa.select(TaskInstance).where(TaskInstance.task_id == TASK))
        assert ti is not None
        ti.handle_failure(error="Training job train-a1 failed: killed by SIGKILL", session=session)
        session.commit()


def training_killed(db: Database, scheduler: int) -> None:
    """The task saw its local training killed (SIGKILL from outside), recorded how it ended, and failed."""
    job_id = job_id_for(DAG_ID, RUN_ID, TASK, -1, 1)
    ended_as = "Failed: The training entry point was killed by SIGKILL after 3.2 s."
    record_training_job(db, job_id, "ended", backend="local", ended_as=ended_as)
    failed(db, scheduler)


def failed_with_a_retry(db: Database, scheduler: int) -> None:
    retries_left(db)
    failed(db, scheduler)


def failed_and_retry_scheduled(db: Database, scheduler: int) -> None:
    """The try failed with a retry left, and the scheduler scheduled the retry before the allocator looked
    (``DagRun.schedule_tis``: the next try number, SCHEDULED)."""
    failed_with_a_retry(db, scheduler)
    with db.engine.begin() as connection:
        table = TaskInstance.__table__
        connection.execute(sa.update(table).values(state="scheduled", try_number=table.c.try_number + 1))


def runner_died(db: Database, scheduler: int) -> None:
    heartbeat_timed_out(db.engine, TASK)


def runner_died_with_a_retry(db: Database, scheduler: int) -> None:
    retries_left(db)
    heartbeat_timed_out(db.engine, TASK)


def scheduler_died(db: Database, scheduler: int) -> None:
    scheduler_restarted(db.engine, scheduler)


def cleared_while_running(db: Database, scheduler: int) -> None:
    cleared_by_user(db.engine, TASK)


def cleared_while_deferred(db: Database, scheduler: int) -> None:
    defer_on_monitor(db, TASK)
    cleared_by_user(db.engine, TASK)


STORIES = [
    pytest.param(failed, "Its task try 1 failed", id="a try that failed for good"),
    pytest.param(
        training_killed,
        "Its task try 1 failed; its training job train-a1 ended Failed: The training entry point was killed "
        "by SIGKILL after 3.2 s.",
        id="a try whose training was killed says so",
    ),
    pytest.param(
        failed_with_a_retry,
        "Its task try 1 failed; it is up for retry",
        id="a try that failed with a retry left: failed, not cleared",
    ),
    pytest.param(
        failed_and_retry_scheduled,
        "Its task try 1 failed; the task instance is now at try 2",
        id="a failed try whose retry was scheduled before the allocator looked",
    ),
    pytest.param(
        runner_died,
        "Its task try 1 lost its task runner: no heartbeat within the scheduler's timeout "
        "(its worker or task runner died)",
        id="a try whose task runner died",
    ),
    pytest.param(
        runner_died_with_a_retry,
        "Its task try 1 lost its task runner: no heartbeat within the scheduler's timeout "
        "(its worker or task runner died); it is up for retry",
        id="a try whose task runner died, with a retry left",
    ),
    pytest.param(
        scheduler_died,
        "Its task try 1 was reset: the scheduler running it stopped and the next one could not adopt it",
        id="a try reset by a restarted scheduler",
    ),
    pytest.param(
        cleared_while_running, "Its task try 1 was cleared while it ran", id="a user cleared it as it ran"
    ),
    pytest.param(cleared_while_deferred, "Its task try 1 was cleared", id="a user cleared it while deferred"),
]


@pytest.mark.parametrize(("end_the_try", "reason"), STORIES)
def test_a_job_whose_try_ended_says_what_ended_it(
    fresh: Database, end_the_try: Callable[[Database, int], None], reason: str
) -> None:
    job_id = defer(fresh, TASK, gpus=1, quota_share_name="team-a")
    assert [lease.job_id for lease in cycle(fresh, 1).granted] == [job_id]
    scheduler = a_scheduler_job(fresh.engine)
    run_in_worker(fresh.engine, TASK, scheduler)
    cycle(fresh, 2)

    end_the_try(fresh, scheduler)
    report = cycle(fresh, 3)

    assert report.finished == [job_id]
    row = job(fresh, job_id)
    assert (row.status, row.status_reason, row.held_instance_count) == ("FAILED", reason, 0)
