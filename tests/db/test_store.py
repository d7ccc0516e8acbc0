"""The ledger on real databases: configuration revisions, jobs and the audit log round-trip through the rows.

Every step runs in its own transaction, as the allocator will, and the state is read back in a new session:
after each step the ledger must hold exactly the state the engine produced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from airflow_quota.engine.config import QuotaConfig, parse_quota_config
from airflow_quota.engine.model import (
    CyclePlan,
    Grant,
    JobRequest,
    JobStatus,
    Preemption,
    PreemptionRule,
    QueueState,
)
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.ledger.audit import add_audit_row, audit_rows_in_bulk
from airflow_quota.ledger.configuration import applied_config, apply_quota_config
from airflow_quota.ledger.decisions import record_cycle
from airflow_quota.ledger.errors import ConfigApplyError, LedgerError
from airflow_quota.ledger.job_rows import job_rows_in_bulk, set_columns, to_engine_time
from airflow_quota.ledger.lifecycle import (
    Submission,
    TaskInstanceRef,
    record_finish,
    record_priority_change,
    record_status_change,
    record_stop_completed,
    record_submission,
    record_submissions,
    record_termination,
)
from airflow_quota.ledger.models import AuditKind, AuditRow, ConfigRevisionRow, JobRow, ledger_metadata
from airflow_quota.ledger.queue_state import load_queue_state
from tests.db.conftest import Database

pytestmark = pytest.mark.db

QUEUE = "gpu-training"
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
T = TypeVar("T")


def share(name: str, gpus: int, strategy: str, **extra: Any) -> dict[str, Any]:
    return {
        "quotaShareName": name,
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": gpus}],
        "resourceSharingConfiguration": {"strategy": strategy},
        **extra,
    }


LENDER = share("lender", 2, "LEND")
BORROWER = share("borrower", 2, "LEND_AND_BORROW")
URGENT = share("urgent", 2, "RESERVE", preemptionConfiguration={"inSharePreemption": "ENABLED"})


def quota_file(
    *shares: dict[str, Any], capacity: int = 6, queue: str = QUEUE, scheduler: str | None = None
) -> QuotaConfig:
    job_queue: dict[str, Any] = {
        "jobQueueName": queue,
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": capacity}],
        "quotaShares": list(shares),
    }
    if scheduler is not None:
        job_queue["scheduler"] = scheduler
    return parse_quota_config({"jobQueues": [job_queue]}, "quotas.yaml")


THREE_SHARES = quota_file(LENDER, BORROWER, URGENT)


@pytest.fixture(scope="module")
def tables(database: Database) -> Database:
    ledger_metadata.create_all(database.engine)
    return database


class Ledger:
    """One test's view of the ledger: a clock, and each step in its own transaction."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.now = START
        self.state: QueueState | None = None

    def tick(self) -> datetime:
        self.now += timedelta(seconds=7, microseconds=123457)
        return self.now

    def step(self, action: Callable[[Session], T]) -> T:
        with self.database.session() as session, session.begin():
            return action(session)

    def load(self, queue: str = QUEUE) -> QueueState:
        with self.database.session() as session:
            return load_queue_state(session, queue)

    def apply(self, config: QuotaConfig) -> Any:
        now = self.tick()
        return self.step(
            lambda session: apply_quota_config(
                session, config, applied_by="alice", source="quotas.yaml", now=now
            )
        )

    def submit(self, job_id: str, share_name: str, gpus: int, priority: int = 0, **extra: Any) -> None:
        state, now = self.load(), self.tick()
        request = JobRequest(job_id, share_name, "gpu", gpus, priority, **extra)
        task = TaskInstanceRef("train", "run-1", job_id, try_number=1, ti_id=None)
        self.state = self.step(lambda session: record_submission(session, state, job_id, request, task, now))
        assert self.load() == self.state

    def cycle(self) -> CyclePlan:
        before, now = self.load(), self.tick()
        plan = plan_cycle(before, to_engine_time(now))
        self.step(lambda session: record_cycle(session, before, plan, now))
        self.state = plan.state
        assert self.load() == plan.state
        return plan

    def event(self, record: Callable[[Session, QueueState, datetime], QueueState]) -> QueueState:
        before, now = self.load(), self.tick()
        self.state = self.step(lambda session: record(session, before, now))
        assert self.load() == self.state
        return self.state

    def job(self, job_id: str) -> JobRow:
        with self.database.session() as session:
            row = session.get(JobRow, job_id)
            assert row is not None
            return row

    def audit(self, *kinds: AuditKind) -> list[AuditRow]:
        with self.database.session() as session:
            query = sa.select(AuditRow).order_by(AuditRow.id)
            if kinds:
                query = query.where(AuditRow.kind.in_([kind.value for kind in kinds]))
            return list(session.scalars(query))

    def snapshot(self) -> dict[str, list[Any]]:
        """Every row of every ledger table, to show that something changed nothing."""
        with self.database.engine.connect() as connection:
            return {
                table.name: sorted(map(repr, connection.execute(sa.select(table)).all()))
                for table in ledger_metadata.sorted_tables
            }


@pytest.fixture
def ledger(tables: Database) -> Iterator[Ledger]:
    with tables.engine.begin() as connection:
        for table in reversed(ledger_metadata.sorted_tables):
            connection.execute(table.delete())
    yield Ledger(tables)


def run(ledger: Ledger, job_id: str) -> None:
    ledger.event(
        lambda session, state, now: record_status_change(session, state, job_id, JobStatus.RUNNING, now)
    )


# --- configuration ---------------------------------------------------------------------------------------


def test_applying_a_quota_file_makes_revision_1_and_the_engine_queue(ledger: Ledger) -> None:
    changes = ledger.apply(THREE_SHARES)

    assert [(change.quota_share_name, change.revision, change.old) for change in changes] == [
        (None, 1, None),
        ("lender", 1, None),
        ("borrower", 1, None),
        ("urgent", 1, None),
    ]
    assert ledger.load() == QueueState(THREE_SHARES.to_job_queues()[0], {})
    with ledger.database.session() as session:
        history = session.scalars(sa.select(ConfigRevisionRow)).one()
    assert (history.revision, history.applied_by, history.source) == (1, "alice", "quotas.yaml")
    assert history.config == THREE_SHARES.job_queues[0].model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    assert history.applied_at == ledger.now
    assert [row.kind for row in ledger.audit()] == [AuditKind.CONFIG_CHANGED] * 4


def test_applying_the_same_file_again_changes_nothing(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    before = ledger.snapshot()

    assert ledger.apply(THREE_SHARES) == []
    assert ledger.apply(quota_file(URGENT, BORROWER, LENDER)) == []  # a new order alone is no change
    assert ledger.snapshot() == before


def test_changing_a_share_makes_revision_2_with_old_and_new_in_the_audit(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    smaller_lender = share("lender", 1, "LEND", state="DISABLED")

    changes = ledger.apply(quota_file(smaller_lender, BORROWER, URGENT))

    assert [(change.quota_share_name, change.revision) for change in changes] == [("lender", 2)]
    audit = ledger.audit(AuditKind.CONFIG_CHANGED)[-1]
    assert (audit.job_queue_name, audit.quota_share_name) == (QUEUE, "lender")
    assert audit.details is not None
    assert audit.details["revision"] == 2
    assert audit.details["old"]["capacityLimits"] == [{"capacityUnit": "gpu", "maxCapacity": 2}]
    assert audit.details["new"]["capacityLimits"] == [{"capacityUnit": "gpu", "maxCapacity": 1}]
    assert (audit.details["old"]["state"], audit.details["new"]["state"]) == ("ENABLED", "DISABLED")
    assert ledger.load().queue.share("lender").capacity_limits == {"gpu": 1}
    with ledger.database.session() as session:
        revisions = session.scalars(
            sa.select(ConfigRevisionRow.revision).order_by(ConfigRevisionRow.revision)
        )
        assert list(revisions) == [1, 2]


@pytest.mark.parametrize(
    ("first", "then"),
    [(None, "AWS_BATCH"), ("AWS_BATCH", "AIRFLOW"), ("AWS_BATCH", None), ("AIRFLOW", None)],
    ids=["left-out-to-aws-batch", "aws-batch-to-airflow", "aws-batch-to-left-out", "airflow-to-left-out"],
)
def test_changing_only_the_scheduler_line_makes_revision_2(
    ledger: Ledger, first: str | None, then: str | None
) -> None:
    """Moving a job queue between our allocator and AWS Batch is one line of the file: a new revision,
    audited with old and new, and the applied configuration says who schedules the queue now."""
    ledger.apply(quota_file(LENDER, BORROWER, URGENT, scheduler=first))

    changes = ledger.apply(quota_file(LENDER, BORROWER, URGENT, scheduler=then))

    assert [(change.quota_share_name, change.revision) for change in changes] == [(None, 2)]
    assert (changes[0].old or {}).get("scheduler") == first
    assert (changes[0].new or {}).get("scheduler") == then
    audit = ledger.audit(AuditKind.CONFIG_CHANGED)[-1]
    assert audit.details is not None
    assert (audit.details["old"].get("scheduler"), audit.details["new"].get("scheduler")) == (first, then)
    with ledger.database.session() as session:
        applied = applied_config(session, QUEUE)
        assert applied is not None
        assert applied.get("scheduler") == then
        history = session.scalars(sa.select(ConfigRevisionRow).order_by(ConfigRevisionRow.revision)).all()
    assert [(row.revision, (row.config or {}).get("scheduler")) for row in history] == [(1, first), (2, then)]
    assert ledger.apply(quota_file(LENDER, BORROWER, URGENT, scheduler=then)) == []


def test_removing_a_share_with_unfinished_jobs_is_refused_and_changes_nothing(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.submit("b1", "borrower", 2)
    ledger.cycle()
    ledger.submit("b2", "borrower", 4)
    before = ledger.snapshot()

    with pytest.raises(ConfigApplyError) as refused:
        ledger.apply(quota_file(LENDER, URGENT))

    message = str(refused.value)
    assert "quotas.yaml was not applied; nothing changed" in message
    assert "quota share borrower of job queue gpu-training is missing" in message
    assert "2 job(s) that have not finished (b1, b2)" in message
    assert ledger.snapshot() == before

    ledger.event(lambda session, state, now: record_finish(session, state, "b1", now, succeeded=True))
    ledger.event(lambda session, state, now: record_termination(session, state, "b2", now))
    changes = ledger.apply(quota_file(LENDER, URGENT))
    assert [(change.quota_share_name, change.revision, change.new) for change in changes] == [
        ("borrower", 2, None)
    ]
    assert ledger.load().queue.share_names() == ["lender", "urgent"]


def test_removing_a_job_queue_with_unfinished_jobs_is_refused(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.submit("l1", "lender", 1)
    before = ledger.snapshot()

    with pytest.raises(
        ConfigApplyError, match="job queue gpu-training is missing, but its quota share lender"
    ):
        ledger.apply(quota_file(LENDER, queue="other-queue"))

    assert ledger.snapshot() == before


def test_a_removed_job_queue_keeps_its_history_and_numbering(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.apply(quota_file(LENDER, queue="other-queue"))
    changes = ledger.apply(THREE_SHARES)

    assert {(change.job_queue_name, change.quota_share_name, change.revision) for change in changes} >= {
        (QUEUE, None, 3),
        ("other-queue", None, 2),
    }
    with pytest.raises(LedgerError, match="job queue other-queue is not in the quota ledger"):
        ledger.load("other-queue")


# --- jobs and decisions ----------------------------------------------------------------------------------


def test_a_grant_and_a_reclaim_round_trip_and_are_audited(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.submit("b1", "borrower", 4)

    plan = ledger.cycle()
    granted_at = ledger.now

    assert plan.decisions == (Grant("b1", "gpu", 4, borrowed=2),)
    b1 = ledger.job("b1")
    assert (b1.status, b1.attempt, b1.held_capacity_unit, b1.held_instance_count) == (
        "SCHEDULED",
        1,
        "gpu",
        4,
    )
    assert b1.borrowed_instance_count == 2
    assert (b1.dag_id, b1.run_id, b1.task_id, b1.map_index, b1.try_number) == ("train", "run-1", "b1", -1, 1)
    assert b1.started_at == granted_at == ledger.now
    granted = ledger.audit(AuditKind.GRANTED)[-1]
    assert (granted.job_id, granted.quota_share_name, granted.details) == (
        "b1",
        "borrower",
        {"capacityUnit": "gpu", "instanceCount": 4, "borrowed": 2, "attempt": 1},
    )
    run(ledger, "b1")

    ledger.submit("l1", "lender", 2)
    plan = ledger.cycle()

    assert plan.decisions == (Preemption("l1", ("b1",), PreemptionRule.RECLAIM, "gpu"),)
    preempted = ledger.audit(AuditKind.PREEMPTED)[-1]
    assert (preempted.job_queue_name, preempted.job_id, preempted.related_job_id, preempted.rule) == (
        QUEUE,
        "b1",
        "l1",
        "RECLAIM",
    )
    assert "b1 (borrower) preempted by l1 (lender), rule RECLAIM" in preempted.message
    b1 = ledger.job("b1")
    assert (b1.stop_cause, b1.preempted_by, b1.preemption_rule, b1.held_instance_count) == (
        "PREEMPTED",
        "l1",
        "RECLAIM",
        4,
    )
    assert ledger.job("l1").awaiting_victims == {"b1": 2}, "l1 takes 2 of b1's 4 units"

    ledger.event(lambda session, state, now: record_stop_completed(session, state, "b1", now))

    b1 = ledger.job("b1")
    assert (b1.status, b1.preempted_attempt_count, b1.held_instance_count, b1.stop_cause) == (
        "RUNNABLE",
        1,
        0,
        None,
    )
    assert b1.recent_preempted_attempts == [
        {
            "attempt": 1,
            "startedAt": granted_at.isoformat(),
            "stoppedAt": ledger.now.isoformat(),
            "preemptedBy": "l1",
            "rule": "RECLAIM",
            "statusReason": "Preempted by l1; requeued at its original position",
            "lostUnitSeconds": round(4 * (preempted.at - granted_at).total_seconds(), 1),
        }
    ]
    requeued = ledger.audit(AuditKind.REQUEUED)[-1]
    assert (requeued.job_id, requeued.related_job_id, requeued.rule) == ("b1", "l1", "RECLAIM")

    plan = ledger.cycle()

    assert plan.decisions == (Grant("l1", "gpu", 2, borrowed=0),)
    assert ledger.job("b1").status_reason.startswith("Waiting for capacity")
    assert [row.kind for row in ledger.audit() if row.job_id in ("b1", "l1")] == [
        "SUBMITTED",
        "GRANTED",
        "SUBMITTED",
        "PREEMPTED",
        "REQUEUED",
        "GRANTED",
    ]


def test_in_share_preemption_names_the_preemptor_and_the_rule(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.submit("low", "urgent", 2, priority=1)
    ledger.cycle()
    ledger.submit("high", "urgent", 2, priority=9)

    plan = ledger.cycle()

    assert plan.decisions == (Preemption("high", ("low",), PreemptionRule.IN_SHARE_PRIORITY, "gpu"),)
    preempted = ledger.audit(AuditKind.PREEMPTED)[-1]
    assert (preempted.job_id, preempted.related_job_id, preempted.rule) == (
        "low",
        "high",
        "IN_SHARE_PRIORITY",
    )


def test_only_the_last_10_preempted_attempts_are_kept(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.submit("victim", "urgent", 2, priority=1)
    for round_number in range(1, 13):
        ledger.cycle()  # the victim (re)starts
        ledger.submit(f"p{round_number}", "urgent", 2, priority=9)
        ledger.cycle()  # p<n> preempts it
        ledger.event(lambda session, state, now: record_stop_completed(session, state, "victim", now))
        ledger.cycle()  # p<n> starts
        ledger.event(
            lambda session, state, now, job=f"p{round_number}": record_finish(
                session, state, job, now, succeeded=True
            )
        )

    victim = ledger.job("victim")
    assert victim.preempted_attempt_count == 12
    assert [attempt["attempt"] for attempt in victim.recent_preempted_attempts] == list(range(3, 13))
    assert [attempt["preemptedBy"] for attempt in victim.recent_preempted_attempts] == [
        f"p{n}" for n in range(3, 13)
    ]


def test_preemption_retries_run_out_into_failed(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.submit("victim", "urgent", 2, priority=1, preemption_retries_before_termination=0)
    ledger.cycle()
    ledger.submit("boss", "urgent", 2, priority=9)
    ledger.cycle()

    state = ledger.event(lambda session, state, now: record_stop_completed(session, state, "victim", now))

    assert "victim" not in state.jobs
    victim = ledger.job("victim")
    assert (victim.status, victim.preempted_attempt_count, len(victim.recent_preempted_attempts)) == (
        "FAILED",
        1,
        1,
    )
    failed = ledger.audit(AuditKind.FAILED)[-1]
    assert (failed.job_id, failed.related_job_id, failed.rule) == ("victim", "boss", "IN_SHARE_PRIORITY")


def test_a_submission_to_a_disabled_share_is_failed_and_audited(ledger: Ledger) -> None:
    ledger.apply(quota_file(LENDER, BORROWER, share("urgent", 2, "RESERVE", state="DISABLED")))

    ledger.submit("late", "urgent", 1)

    assert ledger.job("late").status == "FAILED"
    assert "late" not in ledger.load().jobs
    assert [(row.kind, row.job_id) for row in ledger.audit(AuditKind.SUBMITTED, AuditKind.FAILED)] == [
        ("SUBMITTED", "late"),
        ("FAILED", "late"),
    ]


def test_a_batch_of_submissions_is_inserted_in_bulk_after_the_events_before_it(ledger: Ledger) -> None:
    """``record_submissions`` inserts its rows in bulk (issue 16), not as ORM objects: each row holds what
    the job and its task instance say, and the audit log keeps the order of events, an event recorded
    earlier in the same transaction (still pending in the session) first."""
    ledger.apply(quota_file(LENDER, BORROWER, share("urgent", 2, "RESERVE", state="DISABLED")))
    ledger.submit("early", "lender", 1)
    before, now = ledger.load(), ledger.tick()
    batch = [
        Submission(
            job_id,
            JobRequest(job_id, share_name, "gpu", 1, 5),
            TaskInstanceRef("train", "run-2", job_id, map_index=3, try_number=2, ti_id=f"ti-{job_id}"),
            submitted_at=START if job_id == "old" else None,
        )
        for job_id, share_name in (("b1", "borrower"), ("late", "urgent"), ("old", "lender"))
    ]

    def terminate_then_submit(session: Session) -> QueueState:
        state = record_termination(session, before, "early", now, "gone")
        return record_submissions(session, state, batch, now)

    state = ledger.step(terminate_then_submit)

    assert state == ledger.load() and sorted(state.jobs) == ["b1", "old"]
    row = ledger.job("old")
    assert (row.dag_id, row.run_id, row.task_id, row.map_index, row.try_number, row.ti_id) == (
        "train",
        "run-2",
        "old",
        3,
        2,
        "ti-old",
    )
    assert (row.status, row.submitted_at, row.created_at, row.updated_at) == ("RUNNABLE", START, now, now)
    assert (row.attempt, row.held_instance_count, row.recent_preempted_attempts) == (0, 0, [])
    assert ledger.job("late").status == "FAILED"
    assert [(row.kind, row.job_id) for row in ledger.audit() if row.at == now] == [
        ("TERMINATED", "early"),
        ("FAILED", "early"),
        ("SUBMITTED", "b1"),
        ("SUBMITTED", "late"),
        ("FAILED", "late"),
        ("SUBMITTED", "old"),
    ]


def test_job_rows_in_bulk_are_written_before_the_next_query_with_their_latest_values(ledger: Ledger) -> None:
    """Within ``job_rows_in_bulk`` (a queue's part of a cycle) the job rows that events change wait for
    one UPDATE: written before the session's next query (what the block reads is what it wrote) and when
    the block ends, each column with its latest value, also one the unit of work sets afterwards; a block
    that raises writes no more of its rows, and once its caller rolls back, the objects of the rows it wrote
    and of those it did not read the ledger's values again."""
    ledger.apply(quota_file(LENDER, BORROWER))
    for job_id, share_name in (("a", "lender"), ("b", "lender"), ("c", "borrower")):
        ledger.submit(job_id, share_name, 1)
    ledger.cycle()  # all three granted: SCHEDULED, holding 1 gpu each
    before, now = ledger.load(), ledger.tick()

    def status_in_database(session: Session, job_id: str) -> str | None:
        """Read on the session's connection itself, as the bulk's writes do not see it."""
        query = sa.select(JobRow.status).where(JobRow.job_id == job_id)
        return session.connection().execute(query).scalar()

    def finish_two(session: Session) -> QueueState:
        with job_rows_in_bulk(session):
            state = record_finish(session, before, "a", now, succeeded=True)
            assert session.get(JobRow, "a").status == "SUCCEEDED"  # the object holds it at once ...
            assert status_in_database(session, "a") == "SCHEDULED"  # ... the row waits for the bulk
            assert session.scalar(sa.select(JobRow.status).where(JobRow.job_id == "a")) == "SUCCEEDED"
            state = record_finish(session, state, "b", now, succeeded=False, reason="it broke")
            session.get(JobRow, "b").status_reason = "it broke, said the operator"  # later, the ORM's
            assert status_in_database(session, "b") == "SCHEDULED"
        assert status_in_database(session, "b") == "FAILED"  # written when the block ended
        return state

    ledger.state = ledger.step(finish_two)
    a, b = ledger.job("a"), ledger.job("b")
    assert (a.status, a.held_instance_count, a.held_capacity_unit) == ("SUCCEEDED", 0, None)
    assert (b.status, b.status_reason, b.held_instance_count) == ("FAILED", "it broke, said the operator", 0)

    later, a_reason = ledger.tick(), ledger.job("a").status_reason
    with ledger.database.session() as session, session.begin():
        state = ledger.load()
        with pytest.raises(RuntimeError), session.begin_nested(), job_rows_in_bulk(session):
            record_finish(session, state, "c", later, succeeded=True)
            assert session.scalar(sa.select(JobRow.status).where(JobRow.job_id == "c")) == "SUCCEEDED"
            set_columns(session.get(JobRow, "a"), {"status_reason": "never written"})  # waits for the bulk
            raise RuntimeError("the queue's part failed")
        c = session.get(JobRow, "c")  # written, then rolled back: as the ledger has it
        assert c is not None and (c.status, c.held_instance_count) == ("SCHEDULED", 1)
        a = session.get(JobRow, "a")  # never written: as the ledger has it
        assert a is not None and a.status_reason == a_reason != "never written"
    assert ledger.job("c").status == "SCHEDULED"
    assert [row.job_id for row in ledger.audit() if row.at == later] == []


def test_audit_rows_in_bulk_keep_the_order_of_events_and_vanish_with_a_block_that_raises(
    ledger: Ledger,
) -> None:
    """Within ``audit_rows_in_bulk`` (a cycle's reconciliation of hundreds of finishes) the events' audit
    rows go in one INSERT when the block ends: after an event recorded before it in the same transaction,
    in the order of the events; a block that raises leaves none of its rows."""
    ledger.apply(quota_file(LENDER, BORROWER))
    for job_id in ("first", "a", "b"):
        ledger.submit(job_id, "lender", 1)
    before, now = ledger.load(), ledger.tick()

    def terminate_three(session: Session) -> QueueState:
        state = record_termination(session, before, "first", now, "gone")  # pending, an ORM object
        with audit_rows_in_bulk(session):
            state = record_termination(session, state, "a", now, "gone too")
            state = record_termination(session, state, "b", now, "gone as well")
            assert session.scalar(sa.select(sa.func.count()).where(AuditRow.at == now)) == 2  # not yet
        return state

    ledger.state = ledger.step(terminate_three)

    assert [(row.kind, row.job_id) for row in ledger.audit() if row.at == now] == [
        ("TERMINATED", "first"),
        ("FAILED", "first"),
        ("TERMINATED", "a"),
        ("FAILED", "a"),
        ("TERMINATED", "b"),
        ("FAILED", "b"),
    ]
    later = ledger.tick()
    with ledger.database.session() as session, session.begin():  # committed: only the block failed
        with pytest.raises(RuntimeError), audit_rows_in_bulk(session):
            add_audit_row(session, later, QUEUE, AuditKind.FAILED, job_id="nobody", message="never")
            raise RuntimeError("the block failed")
        add_audit_row(session, later, QUEUE, AuditKind.FAILED, job_id="someone", message="after it")
    assert [row.job_id for row in ledger.audit() if row.at == later] == ["someone"]


def test_terminating_a_waiting_job_fails_it_and_a_running_one_after_its_stop(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.submit("running", "lender", 2)
    ledger.submit("waiting", "lender", 2)
    ledger.cycle()

    ledger.event(lambda session, state, now: record_termination(session, state, "waiting", now, "not needed"))
    ledger.event(lambda session, state, now: record_termination(session, state, "running", now, "cancelled"))

    assert ledger.job("waiting").status == "FAILED"
    running = ledger.job("running")
    assert (running.status, running.stop_cause, running.status_reason) == (
        "SCHEDULED",
        "TERMINATED",
        "Stopping: cancelled",
    )

    ledger.event(lambda session, state, now: record_stop_completed(session, state, "running", now))

    running = ledger.job("running")
    assert (running.status, running.status_reason, running.recent_preempted_attempts) == (
        "FAILED",
        "cancelled",
        [],
    )
    assert [(row.kind, row.job_id) for row in ledger.audit(AuditKind.TERMINATED, AuditKind.FAILED)] == [
        ("TERMINATED", "waiting"),
        ("FAILED", "waiting"),
        ("TERMINATED", "running"),
        ("FAILED", "running"),
    ]


def test_a_priority_change_is_audited_with_old_and_new(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.submit("job", "lender", 4)

    ledger.event(lambda session, state, now: record_priority_change(session, state, "job", 42, now))

    assert ledger.job("job").scheduling_priority == 42
    changed = ledger.audit(AuditKind.PRIORITY_CHANGED)[-1]
    assert (changed.job_id, changed.details) == ("job", {"old": 0, "new": 42})


def test_a_job_is_submitted_once(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.submit("job", "lender", 1)
    ledger.event(lambda session, state, now: record_termination(session, state, "job", now))

    with pytest.raises(LedgerError, match="job job is already in the quota ledger"):
        ledger.submit("job", "lender", 1)
