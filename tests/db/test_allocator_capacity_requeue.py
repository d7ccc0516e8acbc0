"""A granted job whose launch met a capacity error gives its lease back and waits out its backoff.

The task (``operators/lease_steps.py``) defers for admission again naming its lease as released, with
``requeue_reason`` (what AWS answered, and when it tries again) and ``not_before``. The allocator requeues
the job at its place without counting a preempted attempt, releases its capacity at once, and neither
grants it nor lets it preempt before ``not_before``. Against a real, migrated Airflow metadata DB (SQLite
and PostgreSQL), as ``test_allocator_lifecycle``.
"""

from __future__ import annotations

import pytest
from airflow.models.trigger import Trigger
from airflow.utils.state import TaskInstanceState

from airflow_quota.ledger.models import AuditKind
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, QuotaAdmissionTrigger
from tests.db.conftest import Database
from tests.db.test_allocator_cycle import QUEUE, START, audit, db, defer, job
from tests.db.test_allocator_lifecycle import at, cycle, event_of, held, set_ti, teams, ti_of

pytestmark = pytest.mark.db
__all__ = ["db", "teams"]  # the fixtures this module borrows

REASON = (
    "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - CreateTrainingJob answered InsufficientCapacityError at "
    "2026-03-01T12:00:03Z (no capacity); requeued at its original position, trying again after "
    "2026-03-01T12:01:03Z (capacity error 1 of this try, backoff 60 s, at most 900 s)"
)


def give_back(db: Database, task_id: str, job_id: str, *, seconds: float, not_before: float) -> None:
    """The granted task's launch met a capacity error: it deferred for admission again (from a worker),
    its lease released, not to be granted before ``not_before`` seconds."""
    kwargs = QuotaAdmissionTrigger(
        job_queue=QUEUE,
        job_name=task_id,
        quota_share_name="team-a",
        capacity_unit="gpu",
        instance_count=2,
        submitted_at=START.isoformat(),
        attempt=1,
        released_lease_id=f"{job_id}#1",
    ).serialize()[1] | {"not_before": at(not_before).isoformat(), "requeue_reason": REASON}
    with db.session() as session, session.begin():
        trigger = Trigger(ADMISSION_CLASSPATH, kwargs, created_date=at(seconds))
        session.add(trigger)
        session.flush()
        trigger_id = trigger.id
    set_ti(
        db, task_id, state=TaskInstanceState.DEFERRED, trigger_id=trigger_id, next_method="on_grant", pid=7
    )


def test_a_capacity_error_requeues_the_job_releases_its_capacity_and_regrants_after_the_backoff(
    teams: Database,
) -> None:
    train = defer(teams, "train", gpus=2, quota_share_name="team-a", preemption_retries_before_termination=0)
    assert [lease.job_id for lease in cycle(teams, 1).granted] == [train]
    set_ti(teams, "train", state=TaskInstanceState.RUNNING)
    give_back(teams, "train", train, seconds=3, not_before=63)

    report = cycle(teams, 4)

    assert report.requeued == [train]
    assert report.stopped == [] and report.granted == []
    assert held(teams) == {}  # released at once
    row = job(teams, train)
    # At its place, with what AWS answered as its reason, no preempted attempt used (0 allowed).
    assert (row.status, row.status_reason, row.preempted_attempt_count) == ("RUNNABLE", REASON, 0)
    assert row.submitted_at.replace(tzinfo=START.tzinfo) == START
    assert [(each.job_id, each.message) for each in audit(teams, AuditKind.REQUEUED)] == [(train, REASON)]

    waiting = cycle(teams, 62)  # the backoff has not ended: not granted, the reason kept
    assert waiting.granted == [] and waiting.backing_off == [train]
    assert job(teams, train).status_reason == REASON

    after = cycle(teams, 64)

    assert [lease.job_id for lease in after.granted] == [train]
    assert after.backing_off == []
    assert event_of(teams, "train")["lease_id"] == f"{train}#2"
    assert held(teams) == {train: 2}
    assert ti_of(teams, "train").state == TaskInstanceState.SCHEDULED


def test_the_capacity_a_backing_off_job_gave_back_goes_to_another_job_meanwhile(teams: Database) -> None:
    train = defer(teams, "train", gpus=2, quota_share_name="team-a")
    cycle(teams, 1)
    set_ti(teams, "train", state=TaskInstanceState.RUNNING)
    give_back(teams, "train", train, seconds=3, not_before=600)
    cycle(teams, 4)
    other = defer(teams, "other", gpus=2, quota_share_name="team-a", deferred_at=at(5))

    report = cycle(teams, 6)

    # The later job of the same share starts while the earlier one cannot: nothing is preempted for it.
    assert [lease.job_id for lease in report.granted] == [other]
    assert report.preempted == {} and report.backing_off == [train]
    assert held(teams) == {other: 2}
