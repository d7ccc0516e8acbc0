"""What-if on real history: a ledger history made by real allocation cycles, exported as a trace
(``ledger/history.py``) and replayed by the simulator with the same quota file, gives the same order of
grants and the same preemptions. On SQLite and PostgreSQL.

The history (two teams on 4 GPUs; team-a lends its 2, team-b owns 2 and borrows):
  t=0    b-own (team-b, 2 GPUs) and, at 0.5, b-borrow (team-b, 2 GPUs) arrive; cycle 1 grants both,
         b-borrow on team-a's idle GPUs.
  t=2    a-job (team-a) arrives; cycle 3 preempts b-borrow (RECLAIM); it stops and re-defers at 4; cycle 5
         requeues it and grants a-job: a 2 s stop.
  t=6,7  b-low (priority 1) and b-high (priority 9) arrive and wait: the queue is full.
  t=20   b-own ends: b-high goes first (priority). t=30 a-job ends: b-low borrows team-a's GPUs.
  t=40   b-high ends: b-borrow (priority 0) resumes on team-b's own. t=50 b-low and b-borrow end.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from airflow.utils.state import TaskInstanceState

from airflow_quota.engine.config import parse_quota_config
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.history import HistoryError, export_history, job_name_for
from airflow_quota.ledger.lifecycle import record_termination
from airflow_quota.ledger.models import AuditKind, AuditRow
from airflow_quota.ledger.queue_state import load_queue_state
from airflow_quota.sim.scenario import Settings
from airflow_quota.sim.trace import run_trace, write_trace
from tests.db.conftest import Database
from tests.db.test_allocator_cycle import DAG_ID, QUEUE, RUN_ID, START, db, defer
from tests.db.test_allocator_lifecycle import at, cycle, redefer_for_admission, set_ti

pytestmark = pytest.mark.db
__all__ = ["db"]  # the fixture this module borrows

QUOTA_FILE: dict[str, Any] = {
    "jobQueues": [
        {
            "jobQueueName": QUEUE,
            "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 4}],
            "quotaShares": [
                {
                    "quotaShareName": "team-a",
                    "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
                    "resourceSharingConfiguration": {"strategy": "LEND"},
                },
                {
                    "quotaShareName": "team-b",
                    "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
                    "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": -1},
                },
            ],
        },
        {
            "jobQueueName": "cpu-queue",
            "capacityLimits": [{"capacityUnit": "cpu", "maxCapacity": 1}],
            "quotaShares": [
                {
                    "quotaShareName": "etl",
                    "capacityLimits": [{"capacityUnit": "cpu", "maxCapacity": 1}],
                    "resourceSharingConfiguration": {"strategy": "RESERVE"},
                }
            ],
        },
    ]
}


def job_id(task_id: str) -> str:
    return f"{DAG_ID}/{RUN_ID}/{task_id}/-1/1"


def name(task_id: str) -> str:
    return job_name_for(job_id(task_id))


def build_history(db: Database) -> None:
    """The history in the module docstring, made by real allocation cycles on ``db``'s ledger."""
    with db.session() as session, session.begin():
        apply_quota_config(
            session, parse_quota_config(QUOTA_FILE, "quotas.yaml"), applied_by="test", source="q", now=START
        )
    defer(db, "b-own", gpus=2, quota_share_name="team-b", deferred_at=at(0))
    defer(db, "b-borrow", gpus=2, quota_share_name="team-b", deferred_at=at(0.5))
    defer(db, "etl", job_queue="cpu-queue", quota_share_name="etl", capacity_unit="cpu", deferred_at=at(0.7))
    cycle(db, 1)
    set_ti(db, "b-borrow", state=TaskInstanceState.RUNNING)
    defer(db, "a-job", gpus=2, quota_share_name="team-a", deferred_at=at(2))
    cycle(db, 3)
    redefer_for_admission(db, "b-borrow", job_id("b-borrow"), seconds=4, share="team-b")
    cycle(db, 5)
    defer(db, "b-low", gpus=2, priority=1, quota_share_name="team-b", deferred_at=at(6))
    defer(db, "b-high", gpus=2, priority=9, quota_share_name="team-b", deferred_at=at(7))
    cycle(db, 8)
    for seconds, ended in (
        (20, ["b-own", "etl"]),
        (30, ["a-job"]),
        (40, ["b-high"]),
        (50, ["b-low", "b-borrow"]),
    ):
        for task_id in ended:
            set_ti(db, task_id, state=TaskInstanceState.SUCCESS)
        cycle(db, seconds)


@pytest.fixture
def history(db: Database) -> Iterator[Database]:
    build_history(db)
    yield db


def audit(db: Database, kind: AuditKind) -> list[AuditRow]:
    with db.session() as session:
        query = sa.select(AuditRow).where(AuditRow.kind == kind.value, AuditRow.job_queue_name == QUEUE)
        return list(session.scalars(query.order_by(AuditRow.id)))


def test_the_export_has_each_job_as_submitted_and_the_time_it_held_capacity(history: Database) -> None:
    with history.session() as session:
        trace = export_history(session, since=START, job_queue_name=QUEUE)

    assert trace.origin == START
    rows = [
        (
            job.job_name,
            job.submit_time,
            job.quota_share_name,
            job.scheduling_priority,
            job.instance_count,
            job.duration,
        )
        for job in trace.jobs
    ]
    assert rows == [
        (name("b-own"), 0, "team-b", 0, 2, 19),  # granted at 1, ended at 20
        (name("b-borrow"), 0.5, "team-b", 0, 2, 14),  # 1 to 5 (stopped from 3) and 40 to 50
        (name("a-job"), 2, "team-a", 0, 2, 25),
        (name("b-low"), 6, "team-b", 1, 2, 20),
        (name("b-high"), 7, "team-b", 9, 2, 20),
    ]
    assert trace.job_ids[name("b-borrow")] == job_id("b-borrow")
    assert trace.stop_seconds == [2]


def test_the_exported_history_replays_with_the_same_grants_and_preemptions(
    history: Database, tmp_path: Path
) -> None:
    with history.session() as session:
        trace = export_history(session, since=START - timedelta(hours=1), job_queue_name=QUEUE)
    csv_path, quotas = tmp_path / "jobs.csv", tmp_path / "quotas.yaml"
    with csv_path.open("w", encoding="utf-8", newline="") as handle:
        write_trace(trace.jobs, handle)
    quotas.write_text(yaml.safe_dump(QUOTA_FILE))

    replay = run_trace(
        csv_path, quotas, queue_name=QUEUE, settings=Settings(stop_seconds=trace.stop_seconds[0])
    )

    result = replay.runs[0].result
    real_grants = [row.job_id for row in audit(history, AuditKind.GRANTED)]
    assert [trace.job_ids[hold.job_name] for hold in result.holds] == real_grants
    assert real_grants == [
        job_id(task) for task in ("b-own", "b-borrow", "a-job", "b-high", "b-low", "b-borrow")
    ]
    real_preemptions = [
        (row.job_id, row.related_job_id, row.rule) for row in audit(history, AuditKind.PREEMPTED)
    ]
    replayed = [
        (trace.job_ids[hold.job_name], trace.job_ids[hold.preempted_by], hold.rule)
        for hold in result.holds
        if hold.preempted_by is not None
    ]
    assert replayed == real_preemptions == [(job_id("b-borrow"), job_id("a-job"), "RECLAIM")]
    assert {job.status for job in result.jobs.values()} == {"SUCCEEDED"}


@pytest.mark.parametrize(
    ("window", "queue", "expected"),
    [
        pytest.param((0, None), QUEUE, ["b-own", "b-borrow", "a-job", "b-low", "b-high"], id="whole history"),
        pytest.param((0.5, 6), QUEUE, ["b-borrow", "a-job"], id="since is inclusive, until exclusive"),
        pytest.param((0.6, 1), "cpu-queue", ["etl"], id="another queue"),
        pytest.param((60, None), QUEUE, [], id="nothing submitted since"),
    ],
)
def test_the_window_and_queue_choose_the_jobs(
    history: Database, window: tuple[float, float | None], queue: str, expected: list[str]
) -> None:
    since, until = window
    with history.session() as session:
        trace = export_history(
            session, since=at(since), until=None if until is None else at(until), job_queue_name=queue
        )

    assert [job.job_name for job in trace.jobs] == [name(task_id) for task_id in expected]
    assert trace.jobs[0].submit_time == 0 if expected else trace.origin is None


def test_jobs_of_several_queues_need_a_queue_named(history: Database) -> None:
    with history.session() as session, pytest.raises(HistoryError, match=r"gpu-training.*give --queue NAME"):
        export_history(session, since=START)


def test_a_job_that_ended_without_a_grant_is_left_out_and_counted(history: Database) -> None:
    # 3 GPUs: more than team-a may ever hold (it lends, never borrows); it waits until terminated.
    defer(history, "never", gpus=3, quota_share_name="team-a", deferred_at=at(51))
    cycle(history, 52)
    with history.session() as session, session.begin():
        state = load_queue_state(session, QUEUE)
        assert state.jobs[job_id("never")].status == "RUNNABLE"
        record_termination(session, state, job_id("never"), at(53), "not needed")

    with history.session() as session:
        trace = export_history(session, since=at(51), job_queue_name=QUEUE)

    assert (trace.jobs, trace.left_out) == ([], 1)


@pytest.mark.parametrize(
    ("given", "taken", "expected"),
    [
        pytest.param("train/run-1/b-own/-1/1", (), "train_run-1_b-own_-1_1", id="slashes become underscores"),
        pytest.param(
            "d/manual__2026-03-01T12:00:00+00:00/t/-1/2",
            (),
            "d_manual__2026-03-01T12_00_00_00_00_t_-1_2",
            id="a run id's time",
        ),
        pytest.param("a/b", ("a_b",), "a_b-2", id="a name already taken gets a suffix"),
        pytest.param("a/b", ("a_b", "a_b-2"), "a_b-3", id="the next free suffix"),
    ],
)
def test_job_ids_become_valid_unique_trace_names(given: str, taken: tuple[str, ...], expected: str) -> None:
    assert job_name_for(given, taken=taken) == expected


def test_a_long_job_id_keeps_its_start_and_a_digest_within_the_name_length() -> None:
    long_name = job_name_for("d/" + "r" * 300 + "/t/-1/1")
    other = job_name_for("d/" + "r" * 300 + "/u/-1/1")

    assert len(long_name) == 128 and long_name.startswith("d_rrr")
    assert long_name != other
