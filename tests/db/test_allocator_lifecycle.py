"""The allocator follows each job's task instance: progress, preemption signals, stop reports, release.

Against a real, migrated Airflow metadata DB (SQLite and PostgreSQL), each test writes what Airflow and
the task would leave behind (task instance states, triggers, ``task_state_store`` values) between
cycles, and checks what the allocator wrote back: the ledger, the resumed task instances and the
signals a task reads. Tests of orphaned training jobs also run the host's step after each commit
(``request_stops``), as ``allocator.host.run_cycle`` does.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from airflow import settings as airflow_settings
from airflow.models.taskinstance import TaskInstance
from airflow.models.trigger import Trigger
from airflow.sdk.serde import deserialize
from airflow.state import TaskScope, get_state_backend
from airflow.utils.state import TaskInstanceState

from airflow_quota.allocator import host
from airflow_quota.allocator.cycle import CycleReport, request_stops, run_allocation_cycle
from airflow_quota.allocator.orphans import LOCAL_KILL_MARGIN_SECONDS
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.allocator.stops import StopAnswer, StoppedTrainingJobs
from airflow_quota.engine.config import parse_quota_config
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.lifecycle import record_termination
from airflow_quota.ledger.models import AuditKind, JobRow
from airflow_quota.ledger.queue_state import load_queue_state
from airflow_quota.protocol import PREEMPT_KEY, TRAINING_JOB_KEY, TrainingJobRecord
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, QuotaAdmissionTrigger
from tests.db.conftest import Database
from tests.db.test_allocator_cycle import DAG_ID, QUEUE, RUN_ID, START, audit, db, defer, job

pytestmark = pytest.mark.db
__all__ = ["db"]  # the fixture this module borrows

MONITOR_CLASSPATH = "airflow_quota.triggers.sagemaker.QuotaTrainingJobTrigger"
#: Two teams on 4 GPUs: team-a lends its 2, team-b owns 2 and may borrow without limit.
TWO_TEAMS = parse_quota_config(
    {
        "jobQueues": [
            {
                "jobQueueName": QUEUE,
                "capacityLimits": [
                    {"capacityUnit": "gpu", "maxCapacity": 4},
                    {"capacityUnit": "local-gpu", "maxCapacity": 2},
                ],
                "quotaShares": [
                    {
                        "quotaShareName": "team-a",
                        "capacityLimits": [
                            {"capacityUnit": "gpu", "maxCapacity": 2},
                            {"capacityUnit": "local-gpu", "maxCapacity": 2},
                        ],
                        "resourceSharingConfiguration": {"strategy": "LEND"},
                        "preemptionConfiguration": {"inSharePreemption": "ENABLED"},
                    },
                    {
                        "quotaShareName": "team-b",
                        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
                        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": -1},
                    },
                ],
            }
        ]
    },
    "quotas.yaml",
)


@pytest.fixture
def teams(db: Database) -> Iterator[Database]:
    with db.session() as session, session.begin():
        apply_quota_config(session, TWO_TEAMS, applied_by="test", source="quotas.yaml", now=START)
    yield db


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def cycle(db: Database, seconds: float, **settings: Any) -> CycleReport:
    with db.session() as session, session.begin():
        return run_allocation_cycle(session, at(seconds), CycleSettings(**settings))


def hosted_cycle(db: Database, seconds: float, settings: CycleSettings) -> CycleReport:
    """One cycle as ``allocator.host.run_cycle`` runs it: committed, then its listed training jobs asked to
    stop (``request_stops``); ``settings`` is kept across cycles like the host's memory of stopped jobs."""
    with db.session() as session, session.begin():
        report = run_allocation_cycle(session, at(seconds), settings)
    request_stops(report, settings)
    return report


def ti_of(db: Database, task_id: str) -> TaskInstance:
    with db.session() as session:
        ti = session.scalar(sa.select(TaskInstance).where(TaskInstance.task_id == task_id))
        assert ti is not None
        return ti


def set_ti(db: Database, task_id: str, **values: Any) -> None:
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(TaskInstance.__table__).where(TaskInstance.task_id == task_id).values(**values)
        )


def defer_on_monitor(db: Database, task_id: str, *, seconds: float = 0, pid: int | None = None) -> None:
    """The granted task launched its training job and deferred on its monitoring trigger."""
    with db.session() as session, session.begin():
        trigger = Trigger(MONITOR_CLASSPATH, {"training_job_name": task_id}, created_date=at(seconds))
        session.add(trigger)
        session.flush()
        trigger_id = trigger.id
    set_ti(
        db,
        task_id,
        state=TaskInstanceState.DEFERRED,
        trigger_id=trigger_id,
        next_method="on_monitor",
        pid=pid,
    )


def redefer_for_admission(db: Database, task_id: str, job_id: str, *, seconds: float, share: str) -> None:
    """The task stopped its training job and deferred for admission again (from a worker: pid set)."""
    kwargs = QuotaAdmissionTrigger(
        job_queue=QUEUE,
        job_name=task_id,
        quota_share_name=share,
        capacity_unit="gpu",
        instance_count=2,
        submitted_at=START.isoformat(),
        attempt=1,
    ).serialize()[1] | {"released_lease_id": f"{job_id}#1"}
    with db.session() as session, session.begin():
        trigger = Trigger(ADMISSION_CLASSPATH, kwargs, created_date=at(seconds))
        session.add(trigger)
        session.flush()
        trigger_id = trigger.id
    set_ti(
        db, task_id, state=TaskInstanceState.DEFERRED, trigger_id=trigger_id, next_method="on_grant", pid=7
    )


def store_get(db: Database, task_id: str, key: str) -> Any:
    with db.session() as session:
        value = get_state_backend().get(TaskScope(DAG_ID, RUN_ID, task_id), key, session=session)
        return None if value is None else json.loads(value)


def store_set(db: Database, task_id: str, key: str, document: Any) -> None:
    with db.session() as session, session.begin():
        get_state_backend().set(
            TaskScope(DAG_ID, RUN_ID, task_id), key, json.dumps(document), session=session
        )


def record_training_job(
    db: Database, job_id: str, state: str, *, backend: str = "sagemaker", **extra: Any
) -> None:
    """The task of ``job_id`` (task ``train``) recorded its first attempt's training job ``train-a1``."""
    record = {"backend": backend, "name": "train-a1", "attempt": 1, "lease_id": f"{job_id}#1", "state": state}
    store_set(db, "train", TRAINING_JOB_KEY, record | extra)


def event_of(db: Database, task_id: str) -> Any:
    return deserialize(ti_of(db, task_id).next_kwargs)["event"]


def held(db: Database) -> dict[str, int]:
    """Units each job holds, by job id (what the ledger counts as taken)."""
    with db.session() as session:
        rows = session.scalars(sa.select(JobRow).where(JobRow.held_instance_count > 0))
        return {row.job_id: row.held_instance_count for row in rows}


def borrower_and_lender(db: Database) -> tuple[str, str, str]:
    """team-b runs b-own on its 2 GPUs and b-borrow on team-a's idle 2; then team-a's job arrives."""
    own = defer(db, "b-own", gpus=2, quota_share_name="team-b", deferred_at=START)
    borrower = defer(db, "b-borrow", gpus=2, quota_share_name="team-b", deferred_at=at(0.5))
    report = cycle(db, 1)
    assert [lease.job_id for lease in report.granted] == [own, borrower]
    lender = defer(db, "a-job", gpus=2, quota_share_name="team-a", deferred_at=at(2))
    return own, borrower, lender


def test_a_granted_task_moves_scheduled_starting_running_as_it_starts_and_launches(teams: Database) -> None:
    job_id = defer(teams, "train", gpus=1, quota_share_name="team-a")
    cycle(teams, 1)
    assert job(teams, job_id).status == "SCHEDULED"

    set_ti(teams, "train", state=TaskInstanceState.RUNNING)
    cycle(teams, 2)
    assert job(teams, job_id).status == "STARTING"

    record_training_job(teams, job_id, "launched")
    cycle(teams, 3)
    row = job(teams, job_id)
    assert row.status == "RUNNING"
    assert row.training_job == {"backend": "sagemaker", "name": "train-a1", "state": "launched"}
    # Once its CreateTrainingJob answered, the task's record has the ARN: the API's serviceResourceId.
    arn = "arn:aws:sagemaker:us-west-2:123456789012:training-job/train-a1"
    record_training_job(teams, job_id, "launched", arn=arn)
    cycle(teams, 4)
    assert job(teams, job_id).training_job == {**row.training_job, "arn": arn}
    record_training_job(teams, job_id, "launched")  # a later record of the same job without it keeps it
    cycle(teams, 5)
    assert job(teams, job_id).training_job == {**row.training_job, "arn": arn}


def test_a_borrower_deferred_on_its_monitor_is_resumed_with_a_preempt_event_and_told_in_its_store(
    teams: Database,
) -> None:
    _, borrower, lender = borrower_and_lender(teams)
    defer_on_monitor(teams, "b-borrow")

    report = cycle(teams, 3)

    assert report.preempted == {lender: [borrower]}
    assert report.preempted_by_rule == {"RECLAIM": 1}
    assert ti_of(teams, "b-borrow").state == TaskInstanceState.SCHEDULED
    event = event_of(teams, "b-borrow")
    assert event["preempt"] is True
    assert (event["lease_id"], event["preempted_by"], event["rule"]) == (f"{borrower}#1", lender, "RECLAIM")
    assert store_get(teams, "b-borrow", PREEMPT_KEY) == event
    # Two-phase: the borrower still holds its GPUs, the lender waits for them.
    assert held(teams)[borrower] == 2
    assert job(teams, lender).status == "RUNNABLE"
    assert ti_of(teams, "a-job").state == TaskInstanceState.DEFERRED


def test_a_borrower_that_just_deferred_on_its_monitor_from_a_worker_gets_the_event_once_settled(
    teams: Database,
) -> None:
    _, borrower, _ = borrower_and_lender(teams)
    defer_on_monitor(teams, "b-borrow", seconds=2.5, pid=4242)  # from its on_grant run in a worker

    early = cycle(teams, 3)

    assert early.signalled == [borrower]  # told through its store at once ...
    assert store_get(teams, "b-borrow", PREEMPT_KEY)["lease_id"] == f"{borrower}#1"
    assert ti_of(teams, "b-borrow").state == TaskInstanceState.DEFERRED  # ... not resumed while it settles
    assert cycle(teams, 12).signalled == []

    settled = cycle(teams, 12.5)

    assert settled.signalled == [borrower]
    assert ti_of(teams, "b-borrow").state == TaskInstanceState.SCHEDULED
    assert event_of(teams, "b-borrow")["preempt"] is True


def test_a_borrower_running_in_a_worker_is_told_through_its_store_only(teams: Database) -> None:
    _, borrower, lender = borrower_and_lender(teams)
    set_ti(teams, "b-borrow", state=TaskInstanceState.RUNNING)

    cycle(teams, 3)

    assert ti_of(teams, "b-borrow").state == TaskInstanceState.RUNNING
    signal = store_get(teams, "b-borrow", PREEMPT_KEY)
    assert (signal["lease_id"], signal["preempted_by"]) == (f"{borrower}#1", lender)
    assert job(teams, borrower).stop_signalled_at is not None


@pytest.mark.parametrize(
    ("backend", "asked"),
    [
        pytest.param("sagemaker", True, id="a SageMaker victim's job is asked to stop from the decision on"),
        pytest.param("local", False, id="a local victim's process is left to its own worker"),
    ],
)
def test_a_victims_training_job_is_listed_for_a_stop_every_cycle_from_the_decision_until_it_stopped(
    teams: Database, backend: str, asked: bool
) -> None:
    _, borrower, lender = borrower_and_lender(teams)
    record = {"backend": backend, "name": "b-borrow-a1", "attempt": 1, "lease_id": f"{borrower}#1"}
    store_set(teams, "b-borrow", TRAINING_JOB_KEY, record | {"state": "launched"})
    set_ti(teams, "b-borrow", state=TaskInstanceState.RUNNING)

    decided = cycle(teams, 3)

    assert decided.preempted == {lender: [borrower]}
    expected = [(borrower, "b-borrow-a1", f"{borrower}#1", True)] if asked else []
    assert listed_stops(decided) == expected
    assert listed_stops(cycle(teams, 4)) == expected  # again while it is being stopped: asked each commit


def listed_stops(report: CycleReport) -> list[tuple[str, str, str, bool]]:
    """The report's stop requests: (job id, training job, its lease, whether the job is a victim)."""
    return [
        (each.job_id, each.record["name"], each.record["lease_id"], each.victim)
        for each in report.stop_requests
    ]


def test_the_victims_redeferral_is_its_stop_report_then_it_is_requeued_and_the_lender_granted(
    teams: Database,
) -> None:
    own, borrower, lender = borrower_and_lender(teams)
    set_ti(teams, "b-borrow", state=TaskInstanceState.RUNNING)
    cycle(teams, 3)
    assert held(teams)[borrower] == 2  # told to stop, not stopped yet
    redefer_for_admission(teams, "b-borrow", borrower, seconds=4, share="team-b")

    report = cycle(teams, 5)

    assert report.stopped == [borrower]
    assert [lease.job_id for lease in report.granted] == [lender]
    assert held(teams) == {own: 2, lender: 2}
    requeued = job(teams, borrower)
    assert (requeued.status, requeued.preempted_attempt_count) == ("RUNNABLE", 1)
    assert requeued.recent_preempted_attempts[0]["preemptedBy"] == lender
    # It waits again at its old place (deferred from a worker, it also waits out the settle time).
    assert ti_of(teams, "b-borrow").state == TaskInstanceState.DEFERRED
    assert [row.job_id for row in audit(teams, AuditKind.REQUEUED)] == [borrower]


def test_capacity_is_released_when_the_task_try_ends_and_the_job_takes_its_outcome(teams: Database) -> None:
    done = defer(teams, "done", gpus=1, quota_share_name="team-a")
    broken = defer(teams, "broken", gpus=1, quota_share_name="team-a")
    cycle(teams, 1)
    set_ti(teams, "done", state=TaskInstanceState.SUCCESS)
    set_ti(teams, "broken", state=TaskInstanceState.FAILED)

    report = cycle(teams, 2)

    assert sorted(report.finished) == sorted([done, broken])
    assert held(teams) == {}
    assert job(teams, done).status == "SUCCEEDED"
    failed = job(teams, broken)
    assert (failed.status, failed.status_reason) == ("FAILED", "Its task try 1 failed")


@pytest.mark.parametrize(
    ("task_state", "training_job", "holder_status"),
    [
        pytest.param(TaskInstanceState.SUCCESS, None, "SUCCEEDED", id="its task succeeded"),
        pytest.param(TaskInstanceState.SUCCESS, "ended", "SUCCEEDED", id="job ended, task succeeded"),
        pytest.param(TaskInstanceState.FAILED, None, "FAILED", id="its task failed"),
        pytest.param(TaskInstanceState.FAILED, "ended", "FAILED", id="job ended, task failed"),
    ],
)
def test_a_finished_jobs_capacity_is_granted_in_the_cycle_that_sees_it_end(
    teams: Database, task_state: TaskInstanceState, training_job: str | None, holder_status: str
) -> None:
    holder = defer(teams, "train", gpus=2, quota_share_name="team-a", deferred_at=START)
    waiter = defer(teams, "next", gpus=2, quota_share_name="team-a", deferred_at=at(0.5))
    first = cycle(teams, 1)
    assert [lease.job_id for lease in first.granted] == [holder]  # team-a lends: it never borrows
    assert job(teams, waiter).status == "RUNNABLE"
    if training_job is not None:
        record_training_job(teams, holder, training_job)
    set_ti(teams, "train", state=task_state)

    report = cycle(teams, 2)

    assert report.finished == [holder]
    assert [lease.job_id for lease in report.granted] == [waiter]  # not a cycle later
    assert job(teams, holder).status == holder_status
    assert held(teams) == {waiter: 2}
    assert ti_of(teams, "next").state == TaskInstanceState.SCHEDULED  # its task resumed with the lease


def test_a_job_that_ended_in_its_launching_run_keeps_its_training_job_on_its_row(teams: Database) -> None:
    job_id = defer(teams, "train", gpus=1, quota_share_name="team-a")
    cycle(teams, 1)
    record_training_job(teams, job_id, "ended")  # launched, followed and finished in one worker run
    set_ti(teams, "train", state=TaskInstanceState.SUCCESS)

    assert cycle(teams, 2).finished == [job_id]

    row = job(teams, job_id)
    assert row.status == "SUCCEEDED"
    assert row.training_job == {"backend": "sagemaker", "name": "train-a1", "state": "ended"}


def test_a_task_cleared_while_it_holds_capacity_ends_its_job(teams: Database) -> None:
    job_id = defer(teams, "train", gpus=1, quota_share_name="team-a")
    cycle(teams, 1)
    set_ti(teams, "train", state=None, try_number=2, id=uuid.uuid4())

    cycle(teams, 2)

    row = job(teams, job_id)
    assert (row.status, row.held_instance_count) == ("FAILED", 0)
    assert "cleared" in row.status_reason


class RecordingStopper:
    """Stands in for the SageMaker API (a fault we cannot cause for real here: an orphan that is slow to
    stop); records each stop request and answers "stopped" from the ``stopped_after``-th call on."""

    def __init__(self, stopped_after: int) -> None:
        self.calls: list[str] = []
        self.stopped_after = stopped_after

    def __call__(self, record: TrainingJobRecord) -> StopAnswer:
        self.calls.append(record["name"])
        return StopAnswer.STOPPED if len(self.calls) >= self.stopped_after else StopAnswer.RUNNING

    def settings(self, **settings: Any) -> CycleSettings:
        """What a host passes to each of its cycles: this stopper, and one memory of the jobs it stopped."""
        return CycleSettings(job_stopper=self, stopped_training_jobs=StoppedTrainingJobs(), **settings)


def an_orphaned_training_job(db: Database) -> str:
    """A granted task launched its SageMaker training job, then failed (e.g. its worker died under it)."""
    job_id = defer(db, "train", gpus=2, quota_share_name="team-a")
    cycle(db, 1)
    record_training_job(db, job_id, "launched")
    set_ti(db, "train", state=TaskInstanceState.FAILED)
    return job_id


def test_an_orphaned_training_job_is_stopped_before_its_capacity_is_released(teams: Database) -> None:
    job_id = an_orphaned_training_job(teams)
    stopper = RecordingStopper(stopped_after=2)  # still Stopping when first asked
    settings = stopper.settings()

    first = hosted_cycle(teams, 2, settings)

    assert (first.orphans, first.finished) == ([job_id], [])
    assert held(teams) == {job_id: 2}
    assert job(teams, job_id).status_reason.startswith("Stopping: ")
    assert stopper.calls == ["train-a1"]

    second = hosted_cycle(teams, 3, settings)

    assert (second.orphans, second.finished) == ([job_id], [])  # not known to be stopped when it ran
    assert held(teams) == {job_id: 2}
    assert stopper.calls == ["train-a1", "train-a1"]  # asked again; now it answered stopped

    third = hosted_cycle(teams, 4, settings)

    assert third.finished == [job_id]
    assert held(teams) == {}
    assert (third.stop_requests, stopper.calls) == ([], ["train-a1", "train-a1"])  # not asked again
    assert job(teams, job_id).status == "FAILED"


def test_an_orphan_not_confirmed_stopped_has_its_capacity_released_after_the_orphan_timeout(
    teams: Database,
) -> None:
    job_id = an_orphaned_training_job(teams)
    never = RecordingStopper(stopped_after=1_000)
    settings = never.settings(orphan_timeout=timedelta(seconds=60))

    hosted_cycle(teams, 2, settings)
    hosted_cycle(teams, 61, settings)
    assert held(teams) == {job_id: 2}

    late = hosted_cycle(teams, 62, settings)

    assert late.finished == [job_id]
    assert held(teams) == {}
    assert never.calls == ["train-a1"] * 3  # asked each cycle, the last time as its capacity was released


def test_a_stop_answered_before_the_orphan_was_first_seen_does_not_release_it(teams: Database) -> None:
    job_id = an_orphaned_training_job(teams)
    stopper = RecordingStopper(stopped_after=1_000)
    settings = stopper.settings()
    assert settings.stopped_training_jobs is not None
    # e.g. the job was asked to stop as a victim before it was created (SageMaker: no such job, not running)
    settings.stopped_training_jobs.remember(["train-a1"], asked_at=at(1))

    report = hosted_cycle(teams, 2, settings)

    assert (report.orphans, held(teams)) == ([job_id], {job_id: 2})


def test_a_stop_is_asked_only_once_the_cycle_has_committed_and_not_for_a_cycle_that_rolled_back(
    teams: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = an_orphaned_training_job(teams)
    monkeypatch.setattr(airflow_settings, "engine", teams.engine)  # the host's sessions on this database
    seen_when_asked: list[str] = []

    def stopper(record: TrainingJobRecord) -> StopAnswer:
        """Answers "stopped", noting what another connection sees of the orphan's job when asked."""
        seen_when_asked.append(job(teams, job_id).status_reason)
        return StopAnswer.STOPPED

    settings = CycleSettings(job_stopper=stopper, stopped_training_jobs=StoppedTrainingJobs())

    def cycle_whose_commit_fails(session: Any, now: datetime, settings: CycleSettings) -> CycleReport:
        run_allocation_cycle(session, now, settings)  # the orphan is listed in its stop_requests
        raise RuntimeError("the commit failed")

    monkeypatch.setattr(host, "run_allocation_cycle", cycle_whose_commit_fails)
    assert host.run_cycle(settings) is None
    assert seen_when_asked == []  # a cycle that rolled back asks nothing
    assert job(teams, job_id).stop_signalled_at is None

    monkeypatch.setattr(host, "run_allocation_cycle", run_allocation_cycle)
    first = host.run_cycle(settings)

    assert first is not None and first.orphans == [job_id]
    assert len(seen_when_asked) == 1
    assert seen_when_asked[0].startswith("Stopping: ")  # asked after the cycle committed, not inside it
    assert held(teams) == {job_id: 2}

    second = host.run_cycle(settings)

    assert second is not None and second.finished == [job_id]
    assert held(teams) == {}
    assert len(seen_when_asked) == 1


def test_a_training_job_recorded_as_ended_is_no_orphan(teams: Database) -> None:
    job_id = defer(teams, "train", gpus=2, quota_share_name="team-a")
    cycle(teams, 1)
    record_training_job(teams, job_id, "ended")
    set_ti(teams, "train", state=TaskInstanceState.FAILED)
    stopper = RecordingStopper(stopped_after=1)

    report = hosted_cycle(teams, 2, stopper.settings())

    assert (report.finished, report.stop_requests, stopper.calls) == ([job_id], [], [])


def test_a_victim_that_does_not_stop_within_the_stop_deadline_is_cleared(teams: Database) -> None:
    _, borrower, _ = borrower_and_lender(teams)
    set_ti(teams, "b-borrow", state=TaskInstanceState.RUNNING)
    cycle(teams, 3, stop_deadline=timedelta(seconds=30))

    patient = cycle(teams, 32, stop_deadline=timedelta(seconds=30))
    assert patient.cleared == []

    report = cycle(teams, 33, stop_deadline=timedelta(seconds=30))

    assert report.cleared == [borrower]
    assert ti_of(teams, "b-borrow").state == TaskInstanceState.RESTARTING


def test_a_victim_out_of_preemption_retries_is_failed_and_its_task_told_why(teams: Database) -> None:
    defer(teams, "b-own", gpus=2, quota_share_name="team-b")
    borrower = defer(
        teams,
        "b-borrow",
        gpus=2,
        quota_share_name="team-b",
        deferred_at=at(0.5),
        preemption_retries_before_termination=0,
    )
    cycle(teams, 1)
    defer(teams, "a-job", gpus=2, quota_share_name="team-a", deferred_at=at(2))
    set_ti(teams, "b-borrow", state=TaskInstanceState.RUNNING)
    cycle(teams, 3)
    redefer_for_admission(teams, "b-borrow", borrower, seconds=4, share="team-b")

    report = cycle(teams, 15)

    assert report.rejected[borrower] == job(teams, borrower).status_reason
    assert job(teams, borrower).status == "FAILED"
    event = event_of(teams, "b-borrow")
    assert event["rejected"] is True
    assert "preemptionRetriesBeforeTermination" in event["reason"] or "retries" in event["reason"]


def test_a_job_terminated_by_an_admin_is_told_to_stop_by_the_next_cycle(teams: Database) -> None:
    job_id = defer(teams, "train", gpus=1, quota_share_name="team-a")
    cycle(teams, 1)
    defer_on_monitor(teams, "train")
    with teams.session() as session, session.begin():
        record_termination(session, load_queue_state(session, QUEUE), job_id, at(2), "Wrong dataset")

    report = cycle(teams, 3)

    assert report.signalled == [job_id]
    event = event_of(teams, "train")
    assert (event["preempt"], event["preempted_by"], event["rule"]) == (True, None, "TERMINATED")


def test_local_gpu_grants_name_distinct_device_indices_and_a_stopped_jobs_indices_are_reused(
    teams: Database,
) -> None:
    first = defer(teams, "first", gpus=1, quota_share_name="team-a", capacity_unit="local-gpu")
    second = defer(teams, "second", gpus=1, quota_share_name="team-a", capacity_unit="local-gpu")

    report = cycle(teams, 1)

    devices = {lease.job_id: lease.payload["devices"] for lease in report.granted}
    assert devices == {first: [0], second: [1]}
    set_ti(teams, "first", state=TaskInstanceState.SUCCESS)
    third = defer(teams, "third", gpus=1, quota_share_name="team-a", capacity_unit="local-gpu")

    later = cycle(teams, 2)

    assert {lease.job_id: lease.payload["devices"] for lease in later.granted} == {third: [0]}
    assert job(teams, second).held_devices == [1]


def retry_defers_for_admission(db: Database, task_id: str, *, gpus: int, share: str, seconds: float) -> str:
    """The task's next try (a new task instance id) defers for admission; return its job id."""
    kwargs = QuotaAdmissionTrigger(
        job_queue=QUEUE,
        job_name=task_id,
        quota_share_name=share,
        capacity_unit="gpu",
        instance_count=gpus,
        submitted_at=START.isoformat(),
    ).serialize()[1]
    with db.session() as session, session.begin():
        trigger = Trigger(ADMISSION_CLASSPATH, kwargs, created_date=at(seconds))
        session.add(trigger)
        session.flush()
        trigger_id = trigger.id
    set_ti(
        db,
        task_id,
        id=uuid.uuid4(),
        try_number=2,
        state=TaskInstanceState.DEFERRED,
        trigger_id=trigger_id,
        next_method="on_grant",
        pid=None,
    )
    return f"{DAG_ID}/{RUN_ID}/{task_id}/-1/2"


def a_try_fails_with_its_training_job_running(db: Database) -> tuple[str, RecordingStopper]:
    job_id = defer(db, "train", gpus=2, quota_share_name="team-a")
    cycle(db, 1)
    record_training_job(db, job_id, "launched")
    set_ti(db, "train", state=TaskInstanceState.UP_FOR_RETRY)  # e.g. its worker was killed
    return job_id, RecordingStopper(stopped_after=1)


def test_a_retry_re_attaches_to_the_training_job_its_failed_try_left_running(teams: Database) -> None:
    first_try, stopper = a_try_fails_with_its_training_job_running(teams)
    settings = stopper.settings()

    waiting_for_retry = hosted_cycle(teams, 2, settings)

    assert (waiting_for_retry.finished, waiting_for_retry.orphans, stopper.calls) == ([], [], [])
    assert held(teams) == {first_try: 2}  # nobody else gets its GPUs meanwhile
    assert job(teams, first_try).status_reason.endswith("keeps its 2 gpu for the retry")

    retry = retry_defers_for_admission(teams, "train", gpus=2, share="team-a", seconds=3)
    report = hosted_cycle(teams, 4, settings)

    assert report.handed_over == {first_try: retry}
    [lease] = report.granted
    assert (lease.job_id, lease.payload["lease_id"], lease.payload["reattach"]) == (retry, f"{retry}#1", True)
    assert held(teams) == {retry: 2}
    assert stopper.calls == []
    previous = job(teams, first_try)
    assert (previous.status, previous.held_instance_count) == ("FAILED", 0)
    assert previous.status_reason.endswith(f"passed to its retry {retry}")
    assert [(row.job_id, row.related_job_id) for row in audit(teams, AuditKind.HANDED_OVER)] == [
        (retry, first_try)
    ]


def test_a_retry_asking_for_other_capacity_waits_and_its_previous_trys_training_job_is_stopped(
    teams: Database,
) -> None:
    first_try, stopper = a_try_fails_with_its_training_job_running(teams)
    settings = stopper.settings()
    retry = retry_defers_for_admission(teams, "train", gpus=1, share="team-a", seconds=3)

    report = hosted_cycle(teams, 4, settings)

    assert report.handed_over == {}
    assert report.orphans == [first_try]
    assert stopper.calls == ["train-a1"]  # asked once the cycle committed; it answered stopped
    assert held(teams) == {first_try: 2}  # team-a's 2 GPUs stay held until then: the retry waits
    assert job(teams, retry).status == "RUNNABLE"

    released = hosted_cycle(teams, 5, settings)

    assert released.finished == [first_try]
    assert job(teams, first_try).status == "FAILED"
    assert [lease.job_id for lease in released.granted] == [retry]
    assert held(teams) == {retry: 1}
    assert stopper.calls == ["train-a1"]


def test_a_victim_whose_try_fails_for_a_retry_keeps_nothing_for_it_and_its_training_job_is_stopped(
    teams: Database,
) -> None:
    _, borrower, lender = borrower_and_lender(teams)
    record = {"backend": "sagemaker", "name": "b-borrow-a1", "attempt": 1, "lease_id": f"{borrower}#1"}
    store_set(teams, "b-borrow", TRAINING_JOB_KEY, record | {"state": "launched"})
    set_ti(teams, "b-borrow", state=TaskInstanceState.RUNNING)
    stopper = RecordingStopper(stopped_after=2)  # still Stopping when asked at the decision
    settings = stopper.settings()
    assert hosted_cycle(teams, 3, settings).preempted == {lender: [borrower]}
    set_ti(teams, "b-borrow", state=TaskInstanceState.UP_FOR_RETRY)  # its worker died while stopping

    stopping = hosted_cycle(teams, 4, settings)

    assert stopping.orphans == [borrower]  # not held for its retry: the lender is owed these GPUs
    assert stopper.calls == ["b-borrow-a1", "b-borrow-a1"]
    released = hosted_cycle(teams, 5, settings)
    assert released.finished == [borrower]
    assert [lease.job_id for lease in released.granted] == [lender]
    assert borrower not in held(teams)


def test_a_try_that_fails_for_good_has_its_training_job_stopped(teams: Database) -> None:
    first_try, stopper = a_try_fails_with_its_training_job_running(teams)
    settings = stopper.settings()
    set_ti(teams, "train", state=TaskInstanceState.FAILED)

    stopping = hosted_cycle(teams, 2, settings)

    assert (stopping.orphans, stopper.calls) == ([first_try], ["train-a1"])
    assert held(teams) == {first_try: 2}

    report = hosted_cycle(teams, 3, settings)

    assert (report.finished, stopper.calls) == ([first_try], ["train-a1"])
    assert held(teams) == {}


def test_an_orphaned_local_process_group_keeps_its_devices_until_its_grace_period_has_passed(
    teams: Database,
) -> None:
    job_id = defer(teams, "train", gpus=1, quota_share_name="team-a", capacity_unit="local-gpu")
    cycle(teams, 1)
    record_training_job(teams, job_id, "launched", backend="local", grace_period=30.0)
    set_ti(teams, "train", state=TaskInstanceState.FAILED)  # its worker died; the watchdog stops the group

    dying = cycle(teams, 2)
    assert (dying.orphans, held(teams), dying.stop_requests) == ([job_id], {job_id: 1}, [])  # nothing to ask
    still = cycle(teams, 2 + 30 + LOCAL_KILL_MARGIN_SECONDS - 1)
    assert still.orphans == [job_id]

    gone = cycle(teams, 2 + 30 + LOCAL_KILL_MARGIN_SECONDS)

    assert gone.finished == [job_id]
    assert held(teams) == {}


# --- a victim's capacity is free once the allocator finds its training job stopped ------------------------


class SageMakerAnswers:
    """Stands in for SageMaker's answers to the host's StopTrainingJob + DescribeTrainingJob after each
    commit (the network; here also timings we cannot cause for real: a job still stopping when asked,
    one that completed first, one not created yet). Answers ``answers`` in turn, then the last one."""

    def __init__(self, *answers: StopAnswer) -> None:
        self.answers = list(answers)
        self.calls: list[str] = []

    def __call__(self, record: TrainingJobRecord) -> StopAnswer:
        self.calls.append(record["name"])
        return self.answers[min(len(self.calls), len(self.answers)) - 1]

    def settings(self) -> CycleSettings:
        return CycleSettings(job_stopper=self, stopped_training_jobs=StoppedTrainingJobs())


def a_victim_stopping_its_training_job(
    db: Database, *, backend: str = "sagemaker", retries: int | None = None
) -> tuple[str, str, str]:
    """b-own and b-borrow (team-b) run on all 4 GPUs, b-borrow on team-a's 2 with a launched training
    job ``b-borrow-a1``; team-a's a-job arrives. Its task runs in a worker (as it does while it waits for
    its job to stop). Returns (b-own, b-borrow, a-job); a-job preempts b-borrow in the next cycle."""
    own = defer(db, "b-own", gpus=2, quota_share_name="team-b", deferred_at=START)
    borrower = defer(
        db,
        "b-borrow",
        gpus=2,
        quota_share_name="team-b",
        deferred_at=at(0.5),
        preemption_retries_before_termination=retries,
    )
    cycle(db, 1)
    record = {"backend": backend, "name": "b-borrow-a1", "attempt": 1, "lease_id": f"{borrower}#1"}
    store_set(db, "b-borrow", TRAINING_JOB_KEY, record | {"state": "launched"})
    set_ti(db, "b-borrow", state=TaskInstanceState.RUNNING)
    lender = defer(db, "a-job", gpus=2, quota_share_name="team-a", deferred_at=at(2))
    return own, borrower, lender


def test_a_victim_whose_training_job_the_allocator_found_stopped_is_requeued_and_its_preemptor_granted_in_the_same_cycle(  # noqa: E501
    teams: Database,
) -> None:
    own, borrower, lender = a_victim_stopping_its_training_job(teams)
    sagemaker = SageMakerAnswers(StopAnswer.RUNNING, StopAnswer.STOPPED)  # Stopping, then Stopped
    settings = sagemaker.settings()

    decided = hosted_cycle(teams, 3, settings)
    assert decided.preempted == {lender: [borrower]}
    assert (decided.victims_found_stopped, held(teams)[borrower]) == ([], 2)

    still = hosted_cycle(teams, 4, settings)  # asked again after its commit: now Stopped
    assert still.victims_found_stopped == [borrower]  # the host runs the next cycle at once
    assert held(teams)[borrower] == 2

    released = hosted_cycle(teams, 4.01, settings)

    assert released.stopped == [borrower]
    assert [lease.job_id for lease in released.granted] == [lender]
    assert held(teams) == {own: 2, lender: 2}
    requeued = job(teams, borrower)
    assert (requeued.status, requeued.preempted_attempt_count) == ("RUNNABLE", 1)
    assert [row.job_id for row in audit(teams, AuditKind.REQUEUED)] == [borrower]
    assert (released.stop_requests, sagemaker.calls) == ([], ["b-borrow-a1", "b-borrow-a1"])  # not again
    assert ti_of(teams, "b-borrow").state == TaskInstanceState.RUNNING  # its task reports when it sees it


def test_a_host_runs_the_next_cycle_at_once_when_it_found_a_victims_job_stopped(
    teams: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    own, borrower, lender = a_victim_stopping_its_training_job(teams)
    settings = SageMakerAnswers(StopAnswer.RUNNING, StopAnswer.STOPPED).settings()  # Stopping, then Stopped
    hosted_cycle(teams, 3, settings)  # the decision; still Stopping when asked after it
    monkeypatch.setattr(airflow_settings, "engine", teams.engine)  # the host's sessions on this database
    # The host's cycles run at today's clock, long after this test's decision: not past any deadline.
    settings = dataclasses.replace(settings, stop_deadline=timedelta(days=36500))

    reports = host.run_cycles(settings)

    assert len(reports) == 2
    first, second = reports
    assert first is not None and first.victims_found_stopped == [borrower]
    assert second is not None and second.stopped == [borrower]
    assert [lease.job_id for lease in second.granted] == [lender]
    assert held(teams) == {own: 2, lender: 2}
    assert host.run_cycles(settings)[1:] == []  # nothing found stopped: one cycle


@pytest.mark.parametrize(
    ("asked_after", "released"),
    [
        pytest.param(-0.5, False, id="an answer from before the preemption does not release a victim"),
        pytest.param(0, True, id="an answer from the decision's own commit does"),
    ],
)
def test_only_an_answer_asked_since_the_decision_releases_a_victim(
    teams: Database, asked_after: float, released: bool
) -> None:
    own, borrower, lender = a_victim_stopping_its_training_job(teams)
    assert cycle(teams, 3).preempted == {lender: [borrower]}
    assert job(teams, borrower).stop_signalled_at is not None  # set at the decision
    settings = SageMakerAnswers(StopAnswer.RUNNING).settings()
    assert settings.stopped_training_jobs is not None
    # e.g. asked as an orphan-to-be before it was even created (SageMaker: no such job, not running)
    settings.stopped_training_jobs.remember(["b-borrow-a1"], asked_at=at(3 + asked_after))

    report = cycle(
        teams, 4, job_stopper=settings.job_stopper, stopped_training_jobs=settings.stopped_training_jobs
    )

    assert (report.stopped == [borrower]) is released
    assert held(teams) == ({own: 2, lender: 2} if released else {own: 2, borrower: 2})


@pytest.mark.parametrize(
    ("backend", "answer"),
    [
        pytest.param("sagemaker", StopAnswer.RUNNING, id="a job still stopping"),
        pytest.param(
            "sagemaker", StopAnswer.COMPLETED, id="a job that completed first: its task reports its success"
        ),
        pytest.param("sagemaker", StopAnswer.MISSING, id="no such job yet: its task may be creating it"),
        pytest.param("local", StopAnswer.STOPPED, id="a local victim waits for its task's report"),
    ],
)
def test_a_victim_keeps_its_capacity_until_its_job_is_found_stopped_or_its_task_reports(
    teams: Database, backend: str, answer: StopAnswer
) -> None:
    own, borrower, lender = a_victim_stopping_its_training_job(teams, backend=backend)
    sagemaker = SageMakerAnswers(answer)
    settings = sagemaker.settings()
    hosted_cycle(teams, 3, settings)

    waiting = hosted_cycle(teams, 4, settings)

    assert (waiting.stopped, waiting.victims_found_stopped, held(teams)[borrower]) == ([], [], 2)
    assert sagemaker.calls == ([] if backend == "local" else ["b-borrow-a1", "b-borrow-a1"])
    redefer_for_admission(teams, "b-borrow", borrower, seconds=5, share="team-b")

    reported = hosted_cycle(teams, 6, settings)

    assert reported.stopped == [borrower]
    assert held(teams) == {own: 2, lender: 2}


def test_the_victims_later_requeue_request_is_an_ordinary_request_no_second_preemption_counted(
    teams: Database,
) -> None:
    own, borrower, lender = a_victim_stopping_its_training_job(teams)
    settings = SageMakerAnswers(StopAnswer.STOPPED).settings()
    hosted_cycle(teams, 3, settings)
    assert hosted_cycle(teams, 3.01, settings).stopped == [borrower]  # found stopped at the decision
    set_ti(teams, "a-job", state=TaskInstanceState.SUCCESS)  # the lender is done: 2 GPUs free

    not_waiting = hosted_cycle(teams, 4, settings)

    assert not_waiting.finished == [lender]
    assert not_waiting.granted == []  # RUNNABLE, but its task is not waiting for admission yet
    assert held(teams) == {own: 2}
    redefer_for_admission(teams, "b-borrow", borrower, seconds=5, share="team-b")

    report = hosted_cycle(teams, 16, settings)  # its task reported (and settled)

    assert (report.stopped, report.rejected, report.preempted) == ([], {}, {})
    [lease] = report.granted
    assert (lease.job_id, lease.payload["lease_id"], lease.payload["attempt"]) == (
        borrower,
        f"{borrower}#2",
        2,
    )
    assert lease.payload["submitted_at"] == at(0.5).isoformat()  # at its original place
    assert job(teams, borrower).preempted_attempt_count == 1
    assert [row.job_id for row in audit(teams, AuditKind.REQUEUED)] == [borrower]
    assert held(teams) == {own: 2, borrower: 2}


def test_a_victim_out_of_preemption_retries_fails_once_found_stopped_and_its_later_request_is_rejected(
    teams: Database,
) -> None:
    own, borrower, lender = a_victim_stopping_its_training_job(teams, retries=0)
    settings = SageMakerAnswers(StopAnswer.STOPPED).settings()
    hosted_cycle(teams, 3, settings)

    released = hosted_cycle(teams, 3.01, settings)

    assert released.stopped == [borrower]
    assert [lease.job_id for lease in released.granted] == [lender]
    failed = job(teams, borrower)
    assert (failed.status, failed.held_instance_count) == ("FAILED", 0)
    assert "preemptionRetriesBeforeTermination=0" in failed.status_reason
    redefer_for_admission(teams, "b-borrow", borrower, seconds=4, share="team-b")

    report = hosted_cycle(teams, 15, settings)

    assert report.stopped == []
    assert report.rejected == {borrower: failed.status_reason}
    assert event_of(teams, "b-borrow")["rejected"] is True
    assert [row.job_id for row in audit(teams, AuditKind.FAILED)] == [borrower]  # failed once
    assert held(teams) == {own: 2, lender: 2}


def test_a_job_terminated_by_an_admin_fails_once_its_training_job_is_found_stopped(teams: Database) -> None:
    job_id = defer(teams, "train", gpus=2, quota_share_name="team-a")
    cycle(teams, 1)
    record_training_job(teams, job_id, "launched")
    set_ti(teams, "train", state=TaskInstanceState.RUNNING)
    with teams.session() as session, session.begin():
        record_termination(session, load_queue_state(session, QUEUE), job_id, at(2), "Wrong dataset")
    settings = SageMakerAnswers(StopAnswer.STOPPED).settings()

    signalled = hosted_cycle(teams, 3, settings)  # first told to stop now, its job asked after the commit

    assert (signalled.signalled, signalled.victims_found_stopped) == ([job_id], [job_id])
    report = hosted_cycle(teams, 3.01, settings)
    assert report.stopped == [job_id]
    stopped = job(teams, job_id)
    assert (stopped.status, stopped.status_reason, held(teams)) == ("FAILED", "Wrong dataset", {})


@pytest.mark.parametrize(
    "requeued_victim",
    [
        pytest.param(False, id="a waiting task marked failed ends its waiting job"),
        pytest.param(True, id="a requeued victim's task that fails before it reports ends its job"),
    ],
)
def test_a_task_that_ends_while_its_job_waits_ends_the_job(teams: Database, requeued_victim: bool) -> None:
    _, borrower, lender = a_victim_stopping_its_training_job(teams)
    settings = SageMakerAnswers(StopAnswer.STOPPED).settings()
    hosted_cycle(teams, 3, settings)
    if requeued_victim:
        assert hosted_cycle(teams, 3.01, settings).stopped == [borrower]
    ended, task_id = (borrower, "b-borrow") if requeued_victim else (lender, "a-job")
    assert job(teams, ended).status == "RUNNABLE"
    set_ti(teams, task_id, state=TaskInstanceState.FAILED)

    report = hosted_cycle(teams, 4, settings)

    assert ended in report.finished
    row = job(teams, ended)
    assert (row.status, row.held_instance_count) == ("FAILED", 0)
    assert row.status_reason == "Its task try 1 failed while it waited for quota"
