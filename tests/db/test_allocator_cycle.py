"""One allocation cycle against a real, migrated Airflow metadata DB: deferred task instances get leases.

``airflow db migrate`` makes Airflow's tables and the ledger's; each test writes the rows a deferred task
leaves behind (a ``dag_run``, ``task_instance`` rows in DEFERRED with ``next_method`` set, and a ``trigger``
row of the admission trigger's classpath), runs cycles in their own transactions and reads back what
Airflow and the ledger hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from airflow.models.taskinstance import TaskInstance
from airflow.sdk.serde import deserialize
from airflow.utils.state import TaskInstanceState

from airflow_quota.allocator import tasks as tasks_module
from airflow_quota.allocator.cycle import ALLOCATOR_LOCK_ID, CycleReport, run_allocation_cycle
from airflow_quota.allocator.job_ids import job_id_for
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.engine.config import parse_quota_config
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.ledger.job_rows import to_engine_time
from airflow_quota.ledger.models import AuditKind, AuditRow, JobRow
from airflow_quota.ledger.queue_state import load_queue_state
from airflow_quota.ledger.timeline import jobs_touching_query
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, QuotaAdmissionTrigger
from tests.db.allocation import DAG_ID, QUEUE, RUN_ID, START, cycle, defer
from tests.db.conftest import Database
from tests.db.metadata_rows import reset_for_allocation

pytestmark = pytest.mark.db

SETTLE_TIME = CycleSettings().settle_time

QUOTAS = parse_quota_config(
    {
        "jobQueues": [
            {
                "jobQueueName": QUEUE,
                "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
                "quotaShares": [
                    {
                        "quotaShareName": "team-a",
                        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
                        "resourceSharingConfiguration": {"strategy": "RESERVE"},
                    }
                ],
            }
        ]
    },
    "quotas.yaml",
)


#: Runs a test on the PostgreSQL database alone (the module's other tests run on both backends).
POSTGRESQL_ONLY = pytest.mark.parametrize("database", ["postgresql"], indirect=True)


@pytest.fixture
def db(migrated: Database) -> Iterator[Database]:
    reset_for_allocation(migrated.engine, dag_id=DAG_ID, run_id=RUN_ID, start=START, quotas=QUOTAS)
    yield migrated


def task_instances(db: Database) -> dict[str, TaskInstance]:
    with db.session() as session:
        return {ti.task_id: ti for ti in session.scalars(sa.select(TaskInstance))}


def job(db: Database, job_id: str) -> JobRow:
    with db.session() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        return row


def audit(db: Database, kind: AuditKind) -> list[AuditRow]:
    with db.session() as session:
        return list(session.scalars(sa.select(AuditRow).where(AuditRow.kind == kind.value)))


def test_capacity_2_grants_two_of_three_and_the_third_waits(db: Database) -> None:
    first = defer(db, "job0", priority=10)
    second = defer(db, "job1", priority=9, plain_json=True)
    third = defer(db, "job2", priority=8)
    now = START + timedelta(seconds=1)

    report = cycle(db, now)

    assert report.submitted == [first, second, third]
    assert [lease.job_id for lease in report.granted] == [first, second]
    tis = task_instances(db)
    for task_id, lease in zip(["job0", "job1"], report.granted, strict=True):
        ti = tis[task_id]
        assert (ti.state, ti.trigger_id, ti.next_method) == (TaskInstanceState.SCHEDULED, None, "on_grant")
        assert deserialize(ti.next_kwargs) == {"round": 1, "event": lease.payload}
        assert lease.payload == {
            "lease_id": f"{lease.job_id}#1",
            "job_id": lease.job_id,
            "ti_id": str(ti.id),
            "try_number": 1,
            "attempt": 1,
            "capacityUnit": "gpu",
            "instanceCount": 1,
            "borrowed": 0,
            "granted_at": now.isoformat(),
            "submitted_at": START.isoformat(),  # the request's first submission, kept across requeues
        }
        assert job(db, lease.job_id).status == "SCHEDULED"
    assert tis["job2"].state == TaskInstanceState.DEFERRED
    assert tis["job2"].trigger_id is not None
    waiting = job(db, third)
    assert waiting.status == "RUNNABLE"
    assert waiting.status_reason
    assert waiting.ti_id == str(tis["job2"].id)

    again = cycle(db, now + timedelta(seconds=1))

    assert (again.submitted, again.granted) == ([], [])
    assert task_instances(db)["job2"].state == TaskInstanceState.DEFERRED
    assert [row.job_id for row in audit(db, AuditKind.GRANTED)] == [first, second]


def test_a_burst_of_requests_is_recorded_in_batches_the_earliest_submitted_first(db: Database) -> None:
    # Five tasks, named against their submission order: job4 was submitted first, job0 last.
    submitted = {
        f"job{n}": defer(db, f"job{n}", deferred_at=START + timedelta(seconds=4 - n)) for n in range(5)
    }
    batches = CycleSettings(max_new_requests=2)

    def batch_cycle(seconds: int) -> CycleReport:
        with db.session() as session, session.begin():
            return run_allocation_cycle(session, START + timedelta(seconds=seconds), batches)

    first = batch_cycle(10)

    assert first.submitted == [submitted["job4"], submitted["job3"]]
    assert [lease.job_id for lease in first.granted] == first.submitted  # the first grants, at once
    assert sorted(first.backlog) == sorted(submitted[f"job{n}"] for n in range(3))
    with db.session() as session:  # the others are not in the ledger yet, and their tasks still wait
        assert sorted(session.scalars(sa.select(JobRow.job_id))) == sorted(first.submitted)
    tis = task_instances(db)
    assert all(tis[f"job{n}"].state == TaskInstanceState.DEFERRED for n in range(3))

    second = batch_cycle(11)

    assert second.submitted == [submitted["job2"], submitted["job1"]]
    assert second.backlog == [submitted["job0"]]
    assert (second.granted, job(db, submitted["job2"]).status) == ([], "RUNNABLE")  # both GPUs are taken

    third = batch_cycle(12)

    assert (third.submitted, third.backlog) == ([submitted["job0"]], [])
    assert batch_cycle(13).submitted == []


def test_a_task_deferred_from_a_worker_waits_out_the_settle_time(db: Database) -> None:
    job_id = defer(db, "job0", pid=4242, deferred_at=START)

    early = cycle(db, START + SETTLE_TIME - timedelta(seconds=1))

    # Granted (its capacity held for it), but its task is resumed only once it has settled.
    assert (early.submitted, early.settling, early.granted) == ([job_id], [job_id], [])
    assert job(db, job_id).status == "SCHEDULED"
    assert task_instances(db)["job0"].state == TaskInstanceState.DEFERRED

    late = cycle(db, START + SETTLE_TIME)

    assert [lease.job_id for lease in late.granted] == [job_id]
    assert task_instances(db)["job0"].state == TaskInstanceState.SCHEDULED


def test_a_request_rejected_from_a_worker_run_is_resumed_with_the_reason_once_settled(db: Database) -> None:
    # Resumed sooner, Airflow can fail the task on its worker run's late event, and the reason is lost.
    job_id = defer(db, "nobody", quota_share_name="team-z", pid=4242, deferred_at=START)

    early = cycle(db, START + SETTLE_TIME - timedelta(seconds=1))

    assert (early.rejected, early.settling) == ({}, [job_id])
    assert task_instances(db)["nobody"].state == TaskInstanceState.DEFERRED

    late = cycle(db, START + SETTLE_TIME)

    assert "team-z" in late.rejected[job_id]
    resumed = task_instances(db)["nobody"]
    assert resumed.state == TaskInstanceState.SCHEDULED
    assert deserialize(resumed.next_kwargs)["event"]["rejected"] is True


def test_requests_the_ledger_cannot_take_are_reported_and_never_granted(db: Database) -> None:
    invalid = defer(db, "bad", gpus=0)
    unknown_share = defer(db, "nobody", quota_share_name="team-z")
    unknown_queue = defer(db, "elsewhere", job_queue="cpu-queue")

    report = cycle(db, START + timedelta(seconds=1))

    assert set(report.rejected) == {invalid, unknown_share, unknown_queue}
    assert "instanceCount" in report.rejected[invalid]
    assert "team-z" in report.rejected[unknown_share]
    assert "cpu-queue" in report.rejected[unknown_queue]
    assert report.granted == []
    assert job(db, unknown_share).status == "FAILED"
    # Each task is resumed with the rejection, so it fails with the reason (and nothing else changes).
    resumed = task_instances(db)
    for task_id, job_id in (("bad", invalid), ("nobody", unknown_share), ("elsewhere", unknown_queue)):
        assert resumed[task_id].state == TaskInstanceState.SCHEDULED
        event = deserialize(resumed[task_id].next_kwargs)["event"]
        assert event == {"rejected": True, "job_id": job_id, "reason": report.rejected[job_id]}
    assert cycle(db, START + timedelta(seconds=2)).granted == []


def test_a_task_instance_that_left_deferred_is_not_claimed(db: Database) -> None:
    defer(db, "job0")
    with db.engine.begin() as connection:
        connection.execute(sa.update(TaskInstance.__table__).values(state=TaskInstanceState.FAILED))

    report = cycle(db, START + timedelta(seconds=1))

    assert (report.submitted, report.granted) == ([], [])


def test_two_task_instances_deferred_on_one_trigger_row_both_wait(db: Database) -> None:
    # Airflow gives each deferral its own trigger row, and on PostgreSQL the cycle tells deferrals apart by
    # that row alone: two on one row must still be two requests, not one hidden behind the other.
    first, second = defer(db, "job0"), defer(db, "job1")
    table = TaskInstance.__table__
    with db.engine.begin() as connection:
        shared = connection.scalar(sa.select(table.c.trigger_id).where(table.c.task_id == "job0"))
        connection.execute(sa.update(table).where(table.c.task_id == "job1").values(trigger_id=shared))

    report = cycle(db, START + timedelta(seconds=1))

    assert sorted(report.submitted) == sorted([first, second])
    assert sorted(lease.job_id for lease in report.granted) == sorted([first, second])


def test_a_database_reset_under_a_running_allocator_is_found_by_the_periodic_check(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After ``airflow db reset`` trigger ids start again, while the scheduler's allocator still knows the
    # deferrals it read before by their triggers' ids (PostgreSQL): a new deferral on a trigger row with an
    # old one's id is taken for the old task until the periodic check (every CHECK_EVERY reads, here 2)
    # finds that row another task's; meanwhile nothing is granted to the task that is gone.
    monkeypatch.setattr(tasks_module, "CHECK_EVERY", 2)
    old = defer(db, "job0")
    defer(db, "job1")
    table = TaskInstance.__table__
    with db.engine.begin() as connection:
        reused = connection.scalar(sa.select(table.c.trigger_id).where(table.c.task_id == "job0"))
    assert cycle(db, START + timedelta(seconds=1)).granted  # read, and known by their trigger rows
    reset_for_allocation(db.engine, dag_id=DAG_ID, run_id=RUN_ID, start=START, quotas=QUOTAS)
    new = defer(db, "job2", trigger_id=reused)

    reports = [cycle(db, START + timedelta(seconds=2 + number)) for number in range(2)]

    assert [report.submitted for report in reports if report.submitted] == [[new]]
    assert old not in [lease.job_id for report in reports for lease in report.granted]
    assert [lease.job_id for report in reports for lease in report.granted] == [new]


@POSTGRESQL_ONLY  # advisory locks exist on PostgreSQL only; SQLite runs one scheduler
def test_on_postgresql_a_cycle_is_skipped_while_another_holds_the_allocator_lock(db: Database) -> None:
    defer(db, "job0")
    with db.session() as other, other.begin():
        assert other.scalar(sa.text("SELECT pg_try_advisory_xact_lock(:id)"), {"id": ALLOCATOR_LOCK_ID})

        report = cycle(db, START + timedelta(seconds=1))

        assert report == CycleReport(skipped=True)
    assert [lease.job_id for lease in cycle(db, START + timedelta(seconds=2)).granted] == [
        job_id_for(DAG_ID, RUN_ID, "job0", -1, 1)
    ]


@POSTGRESQL_ONLY  # row locks are PostgreSQL's; SQLite serializes writers with its database lock
def test_on_postgresql_a_task_instance_row_locked_elsewhere_is_skipped(db: Database) -> None:
    defer(db, "job0")
    locked = defer(db, "job1")
    with db.session() as other, other.begin():
        other.execute(
            sa.select(TaskInstance.id).where(TaskInstance.task_id == "job1").with_for_update()
        ).all()

        report = cycle(db, START + timedelta(seconds=1))

        assert locked not in report.submitted
        assert [lease.job_id for lease in report.granted] == [job_id_for(DAG_ID, RUN_ID, "job0", -1, 1)]
    assert [lease.job_id for lease in cycle(db, START + timedelta(seconds=2)).granted] == [locked]


def succeed(db: Database, task_id: str) -> None:
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(TaskInstance.__table__)
            .where(TaskInstance.__table__.c.task_id == task_id)
            .values(state=TaskInstanceState.SUCCESS)
        )


@POSTGRESQL_ONLY  # row locks are PostgreSQL's; SQLite serializes writers with its database lock
def test_on_postgresql_a_waiting_job_locked_elsewhere_when_granted_is_planned_again_without_it(
    db: Database,
) -> None:
    holder = defer(db, "job0", gpus=2, priority=10)
    locked = defer(db, "job1", gpus=2, priority=9)
    small = defer(db, "job2", gpus=1, priority=8)
    assert [lease.job_id for lease in cycle(db, START + timedelta(seconds=1)).granted] == [holder]
    succeed(db, "job0")
    with db.session() as other, other.begin():
        # The cycle reads it waiting (without locks) and plans its grant, but cannot claim it.
        other.execute(
            sa.select(TaskInstance.id).where(TaskInstance.task_id == "job1").with_for_update()
        ).all()

        report = cycle(db, START + timedelta(seconds=2))

        assert report.finished == [holder]
        assert [lease.job_id for lease in report.granted] == [small]
        assert report.unresumed == []
        assert job(db, locked).status == "RUNNABLE"
    assert task_instances(db)["job1"].state == TaskInstanceState.DEFERRED
    succeed(db, "job2")
    assert [lease.job_id for lease in cycle(db, START + timedelta(seconds=3)).granted] == [locked]


def test_the_admission_trigger_round_trips_and_never_fires() -> None:
    trigger = QuotaAdmissionTrigger(
        job_queue=QUEUE,
        job_name="job0",
        quota_share_name="team-a",
        capacity_unit="gpu",
        instance_count=2,
        scheduling_priority=7,
        preemption_retries_before_termination=3,
        submitted_at=START.isoformat(),
        attempt=1,
    )
    classpath, kwargs = trigger.serialize()

    assert classpath == ADMISSION_CLASSPATH
    assert QuotaAdmissionTrigger(**kwargs).serialize() == (classpath, kwargs)

    async def first_event() -> object:
        return await anext(trigger.run())

    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(first_event(), timeout=0.2))


def test_a_request_started_from_the_triggerer_is_placed_at_its_deferral_and_told_it_in_its_grant(
    db: Database,
) -> None:
    # A task started from the triggerer: the scheduler deferred it, no worker run ever named a submission.
    late = defer(db, "late", gpus=2, deferred_at=START + timedelta(seconds=5), submitted_at=None)
    early = defer(db, "early", gpus=2, deferred_at=START + timedelta(seconds=2), submitted_at=None)

    report = cycle(db, START + timedelta(seconds=9))

    assert [lease.job_id for lease in report.granted] == [early]  # FIFO by deferral, not by discovery
    assert report.granted[0].payload["submitted_at"] == (START + timedelta(seconds=2)).isoformat()
    assert job(db, late).submitted_at == START + timedelta(seconds=5)


def test_a_waiting_jobs_new_reason_is_written_and_shown_while_its_last_change_stays(db: Database) -> None:
    """When capacity turns over, a waiting job's statusReason is rewritten in bulk (``write_reasons``): the
    ledger (what the REST API, the page and the CLI read) says what it waits for now, the same words a
    cycle reading the queue whole gives it, but its ``updated_at`` stays, the job itself unchanged; a job
    that finished gets its end there, so the GPU timeline's window still finds both."""
    first = defer(db, "job0", gpus=2)
    front = defer(db, "job1", gpus=1, deferred_at=START + timedelta(seconds=1))
    behind = defer(db, "job2", gpus=2, deferred_at=START + timedelta(seconds=2))
    assert [lease.job_id for lease in cycle(db, START + timedelta(seconds=3)).granted] == [first]
    waited = job(db, behind)
    assert front in waited.status_reason

    succeed(db, "job0")
    turnover = START + timedelta(seconds=4)
    assert [lease.job_id for lease in cycle(db, turnover).granted] == [front]

    now = job(db, behind)
    assert now.status == "RUNNABLE"
    assert now.status_reason != waited.status_reason
    assert front not in now.status_reason and "more than quota share team-a has free" in now.status_reason
    with db.session() as session:  # what a cycle reading the queue whole says of it: the same
        replanned = plan_cycle(load_queue_state(session, QUEUE), to_engine_time(turnover))
    assert replanned.state.jobs[behind].status_reason == now.status_reason
    assert now.updated_at == waited.updated_at
    assert job(db, first).updated_at == turnover
    with db.session() as session:
        shown = {row.job_id for row in session.scalars(jobs_touching_query(QUEUE, turnover, turnover))}
    assert shown == {first, front, behind}
