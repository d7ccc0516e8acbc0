"""Fault isolation: what one job or one job queue cannot get through fails it alone; the cycle goes on.

Against a real, migrated Airflow metadata DB (SQLite and PostgreSQL): two job queues, each with a team,
and task instances deferred for admission in both. A request the ledger cannot record (a value beyond
its columns) is rejected on its own task, and every other request, in its queue and the other one, is
granted in the same cycle; a retry's request likewise, its previous try's job left as it was. A queue
whose part of the cycle fails is rolled back alone (nothing of it is written, its tasks keep waiting)
and reported; the other queues are granted.

Two faults are injected because they cannot be caused for real, and are named so: a validation that lets
a value through which the ledger cannot store (``validation_that_misses_a_bound``: the request bounds
catch every such value today, and the cycle must not depend on that), and a planner that raises
(``a_planner_that_fails_for``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from airflow.models.taskinstance import TaskInstance
from airflow.models.trigger import Trigger
from airflow.sdk.serde import deserialize
from airflow.state import TaskScope, get_state_backend
from airflow.utils.state import TaskInstanceState

from airflow_quota.allocator import admission as admission_module
from airflow_quota.allocator import cycle as cycle_module
from airflow_quota.allocator.cycle import CycleReport, run_allocation_cycle
from airflow_quota.allocator.job_ids import job_id_for
from airflow_quota.engine.config import parse_quota_config
from airflow_quota.engine.model import CyclePlan, JobRequest, QueueState
from airflow_quota.ledger.models import JobQueueRow, JobRow
from airflow_quota.protocol import TRAINING_JOB_KEY
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, QuotaAdmissionTrigger
from tests.db.conftest import Database
from tests.db.metadata_rows import insert_deferred_task, reset_for_allocation

pytestmark = pytest.mark.db

DAG_ID = "isolation"
RUN_ID = "run-1"
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
QUEUE_A, QUEUE_B = "queue-a", "queue-b"
QUOTAS = parse_quota_config(
    {
        "jobQueues": [
            {
                "jobQueueName": name,
                "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
                "quotaShares": [
                    {
                        "quotaShareName": "team",
                        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
                        "resourceSharingConfiguration": {"strategy": "RESERVE"},
                    }
                ],
            }
            for name in (QUEUE_A, QUEUE_B)
        ]
    },
    "quotas.yaml",
)


@pytest.fixture
def db(migrated: Database) -> Iterator[Database]:
    reset_for_allocation(migrated.engine, dag_id=DAG_ID, run_id=RUN_ID, start=START, quotas=QUOTAS)
    yield migrated


def request_kwargs(queue: str, task_id: str, **request: Any) -> dict[str, Any]:
    """The admission trigger's kwargs: one GPU of team ``team`` in ``queue``, ``request`` over them."""
    kwargs: dict[str, Any] = QuotaAdmissionTrigger(
        job_queue=queue,
        job_name=task_id,
        quota_share_name="team",
        capacity_unit="gpu",
        instance_count=1,
        submitted_at=START.isoformat(),
    ).serialize()[1]
    return kwargs | request


def defer(db: Database, task_id: str, queue: str, **request: Any) -> str:
    """A task instance DEFERRED on the admission trigger (one GPU of team ``team``); its job id."""
    kwargs = request_kwargs(queue, task_id, **request)
    with db.session() as session, session.begin():
        return insert_deferred_task(
            session, kwargs, dag_id=DAG_ID, run_id=RUN_ID, task_id=task_id, deferred_at=START
        )


def cycle(db: Database, seconds: float) -> CycleReport:
    with db.session() as session, session.begin():
        return run_allocation_cycle(session, START + timedelta(seconds=seconds))


def event_of(db: Database, task_id: str) -> Any:
    """The event a resumed task receives (None while it still waits)."""
    with db.session() as session:
        ti = session.scalar(sa.select(TaskInstance).where(TaskInstance.task_id == task_id))
        assert ti is not None
        if ti.state == TaskInstanceState.DEFERRED:
            return None
        return deserialize(ti.next_kwargs)["event"]


def ledger_job_ids(db: Database) -> set[str]:
    with db.session() as session:
        return set(session.scalars(sa.select(JobRow.job_id)))


def validation_that_misses_a_bound(raw: Mapping[str, Any], source: str = "request") -> JobRequest:
    """Injected fault: a request validation that lets every value through (here: whatever the ledger
    cannot store), standing in for a bound the request validation might miss one day."""
    return JobRequest(
        job_name=raw["jobName"],
        quota_share_name=raw["quotaShareName"],
        capacity_unit=raw["capacityUnit"],
        instance_count=raw["instanceCount"],
        scheduling_priority=raw.get("schedulingPriority", 0),
    )


@dataclass(frozen=True)
class Poison:
    """A request the ledger cannot record, and what the rejection must name, by backend."""

    rule: str
    request: dict[str, Any] = field(default_factory=dict)
    #: What the rejection names, by backend; a backend missing here stores the value (not a poison).
    problem: dict[str, str] = field(default_factory=dict)


POISONS = [
    Poison(
        "an instanceCount beyond the ledger's integer columns fails its task alone",
        request={"instance_count": 2**63},
        problem={"sqlite": "too large", "postgresql": "out of range"},
    ),
    Poison(
        "a capacityUnit longer than its column fails its task alone",
        request={"capacity_unit": "g" * 300},
        problem={"postgresql": "too long"},  # SQLite does not enforce VARCHAR lengths
    ),
]


@pytest.mark.parametrize("poison", POISONS, ids=[poison.rule for poison in POISONS])
def test_a_request_the_ledger_cannot_record_is_rejected_alone_and_the_others_are_granted(
    db: Database, poison: Poison, monkeypatch: pytest.MonkeyPatch
) -> None:
    if db.backend not in poison.problem:
        pytest.skip(f"{db.backend} stores this value: it poisons nothing there")
    monkeypatch.setattr(admission_module, "validate_job_request", validation_that_misses_a_bound)
    good_a = defer(db, "good-a", QUEUE_A)
    bad = defer(db, "bad", QUEUE_A, **poison.request)
    later_a = defer(db, "later-a", QUEUE_A)
    good_b = defer(db, "good-b", QUEUE_B)

    report = cycle(db, 1)

    assert {lease.job_id for lease in report.granted} == {good_a, later_a, good_b}
    assert list(report.rejected) == [bad]
    reason = report.rejected[bad]
    assert "could not be recorded" in reason
    assert poison.problem[db.backend] in reason
    assert event_of(db, "bad") == {"rejected": True, "job_id": bad, "reason": reason}
    assert bad not in ledger_job_ids(db)
    assert report.failed_queues == {}
    assert cycle(db, 2).rejected == {}  # rejected once: its task is no longer waiting


def test_a_retry_whose_request_the_ledger_cannot_record_is_rejected_alone_and_its_previous_try_kept(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admission_module, "validate_job_request", validation_that_misses_a_bound)
    first_try = defer(db, "train", QUEUE_A)
    cycle(db, 1)
    with db.session() as session, session.begin():  # its training job runs; its worker dies: up for retry
        record = {
            "backend": "sagemaker",
            "name": "train-a1",
            "lease_id": f"{first_try}#1",
            "state": "launched",
        }
        get_state_backend().set(
            TaskScope(DAG_ID, RUN_ID, "train"), TRAINING_JOB_KEY, json.dumps(record), session=session
        )
    set_task(db, "train", state=TaskInstanceState.UP_FOR_RETRY)
    cycle(db, 2)  # its capacity is held for the retry
    retry = redefer_as_retry(db, "train", instance_count=2**63)
    other = defer(db, "other", QUEUE_A)

    report = cycle(db, 3)

    assert list(report.rejected) == [retry]
    assert "could not be recorded" in report.rejected[retry]
    assert event_of(db, "train") == {"rejected": True, "job_id": retry, "reason": report.rejected[retry]}
    assert [lease.job_id for lease in report.granted] == [other]
    assert (report.failed_queues, report.finished, report.handed_over) == ({}, [], {})
    with db.session() as session:  # the previous try's job is as it was: its training job still runs
        previous = session.get(JobRow, first_try)
        assert previous is not None
        assert (previous.status, previous.held_instance_count) == ("SCHEDULED", 1)
    assert retry not in ledger_job_ids(db)


def set_task(db: Database, task_id: str, **values: Any) -> None:
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(TaskInstance.__table__)
            .where(TaskInstance.__table__.c.task_id == task_id)
            .values(**values)
        )


def redefer_as_retry(db: Database, task_id: str, **request: Any) -> str:
    """The task's next try (a new task instance id, try 2) defers for admission; its job id."""
    kwargs = request_kwargs(QUEUE_A, task_id, **request)
    with db.session() as session, session.begin():
        trigger = Trigger(ADMISSION_CLASSPATH, kwargs, created_date=START)
        session.add(trigger)
        session.flush()
        trigger_id = trigger.id
    set_task(
        db, task_id, id=uuid.uuid4(), try_number=2, state=TaskInstanceState.DEFERRED, trigger_id=trigger_id
    )
    return job_id_for(DAG_ID, RUN_ID, task_id, -1, 2)


def a_planner_that_fails_for(queue_name: str) -> Any:
    """Injected fault: the engine's planner raising for one job queue (a bug, which no input causes)."""
    plan_cycle = cycle_module.plan_cycle

    def planner(state: QueueState, now: float) -> CyclePlan:
        if state.queue.name == queue_name:
            raise RuntimeError(f"planner bug in {queue_name}")
        return plan_cycle(state, now)

    return planner


def test_a_queue_whose_part_of_the_cycle_fails_is_rolled_back_alone_and_reported(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_a = defer(db, "first-a", QUEUE_A)
    assert [lease.job_id for lease in cycle(db, 1).granted] == [first_a]
    waiting_a = defer(db, "waiting-a", QUEUE_A)
    waiting_b = defer(db, "waiting-b", QUEUE_B)
    monkeypatch.setattr(cycle_module, "plan_cycle", a_planner_that_fails_for(QUEUE_A))

    report = cycle(db, 2)

    assert [lease.job_id for lease in report.granted] == [waiting_b]
    assert list(report.failed_queues) == [QUEUE_A]
    assert "planner bug in queue-a" in report.failed_queues[QUEUE_A]
    # Nothing of queue-a's part was kept: its new request was recorded before the failure, then rolled back.
    assert waiting_a not in report.submitted
    assert waiting_a not in ledger_job_ids(db)
    assert event_of(db, "waiting-a") is None
    assert QUEUE_A not in report.states

    monkeypatch.undo()  # the bug is fixed: the next cycle grants queue-a's waiting job
    recovered = cycle(db, 3)
    assert recovered.failed_queues == {}
    assert [lease.job_id for lease in recovered.granted] == [waiting_a]


def test_a_queue_applied_under_looser_rules_waits_for_a_valid_quota_file_and_the_others_go_on(
    db: Database,
) -> None:
    """A ledger applied by an older release may hold what today's rules refuse (here a maxCapacity over
    100,000): that queue's part fails with the fix in its message, its jobs keep waiting (not rejected),
    the other queue is granted; the REST API answers 409 for it (tests/ui)."""
    waiting_a = defer(db, "waiting-a", QUEUE_A)
    waiting_b = defer(db, "waiting-b", QUEUE_B)
    with db.session() as session, session.begin():
        session.execute(
            sa.update(JobQueueRow)
            .where(JobQueueRow.job_queue_name == QUEUE_A)
            .values(capacity_limits=[{"capacityUnit": "gpu", "maxCapacity": 200_000}])
        )

    report = cycle(db, 1)

    assert [lease.job_id for lease in report.granted] == [waiting_b]
    assert "no longer validates" in report.failed_queues[QUEUE_A]
    assert "airflow quota apply" in report.failed_queues[QUEUE_A]
    assert event_of(db, "waiting-a") is None  # still waiting, not rejected
    assert waiting_a not in ledger_job_ids(db)

    with db.session() as session, session.begin():  # a valid file applied again: the queue goes on
        session.execute(
            sa.update(JobQueueRow)
            .where(JobQueueRow.job_queue_name == QUEUE_A)
            .values(capacity_limits=[{"capacityUnit": "gpu", "maxCapacity": 2}])
        )
    assert [lease.job_id for lease in cycle(db, 2).granted] == [waiting_a]
