"""Recently finished and lost work, as the GPU Quotas page reads them, in process on SQLite and PostgreSQL:
finished jobs by when they finished (a long training submitted first and finished last comes first: issue
36), and the work a queue's preemptions lost over a window, per capacity unit and share, per preemption on
the timeline (issue 37); in the ledger's reads and through the REST API's snapshot and timeline (the quota
app under FastAPI's test client, as tests/db/test_page_reads.py runs it; its jobs, which read Airflow's
tables too, on a real api-server: tests/ui/test_api_limits.py). Each read walks its own index: PostgreSQL's
plan over a long history says so."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa

from airflow_quota.engine.model import Preemption, PreemptionRule
from airflow_quota.ledger.audit import add_audit_row
from airflow_quota.ledger.job_rows import FINAL_STATUSES
from airflow_quota.ledger.lifecycle import record_checkpoint_report, record_finish, record_stop_completed
from airflow_quota.ledger.models import AuditKind, AuditRow, JobRow
from airflow_quota.ledger.views import (
    LostWork,
    finished_job_page,
    finished_jobs_query,
    job_page,
    lost_work,
    lost_work_query,
)
from tests.db.test_page_reads import api as api
from tests.db.test_store import QUEUE, START, THREE_SHARES, Ledger, run
from tests.db.test_timeline import ledger as ledger

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.db


def finish(ledger: Ledger, job_id: str, *, succeeded: bool = True) -> None:
    ledger.event(lambda session, state, now: record_finish(session, state, job_id, now, succeeded=succeeded))


def long_training_finishing_last(ledger: Ledger) -> list[str]:
    """A training submitted before 51 short jobs (17 of them FAILED) and finished after them all; the
    short ones' ids, in the order they finished."""
    ledger.apply(THREE_SHARES)
    ledger.submit("long", "lender", 1)
    ledger.cycle()
    run(ledger, "long")
    short = []
    for batch in range(17):
        names = [f"short-{batch:02}-{index}" for index in range(3)]
        for name in names:
            ledger.submit(name, "borrower", 1)
        ledger.cycle()  # borrower's 2 GPUs and the one the lender leaves idle
        for index, name in enumerate(names):
            finish(ledger, name, succeeded=index != 1)
        short += names
    finish(ledger, "long")
    return short


def test_finished_jobs_come_by_when_they_finished_a_long_training_first(ledger: Ledger) -> None:
    """First by finish time (every page of 10 in finish order, each job once), where the newest 50
    finished by submission, what the page read before, leave it out."""
    short = long_training_finishing_last(ledger)

    with ledger.database.session() as session:
        everything = finished_job_page(session, limit=1000)
        by_submission = job_page(session, statuses=FINAL_STATUSES, limit=50)
    finish_times = {
        row.job_id: row.at for row in ledger.audit(AuditKind.SUCCEEDED, AuditKind.FAILED) if row.job_id
    }
    order = [row.job_id for row in everything.rows]
    assert order == ["long", *reversed(short)] and everything.total == 52
    # A finished job's last change is its finish: the moment of its SUCCEEDED or FAILED row.
    assert all(row.updated_at == finish_times[row.job_id] for row in everything.rows)
    assert "long" not in {row.job_id for row in by_submission.rows}
    with ledger.database.session() as session:
        pages = [finished_job_page(session, limit=10, offset=offset).rows for offset in range(0, 60, 10)]
        failed = finished_job_page(session, statuses=["FAILED"], limit=3)
        borrowed = finished_job_page(session, job_queue_name=QUEUE, quota_share_name="borrower", limit=2)
        lender = finished_job_page(session, job_queue_name=QUEUE, quota_share_name="lender", limit=2)
    assert [row.job_id for page in pages for row in page] == order
    assert [row.job_id for row in failed.rows] == ["short-16-1", "short-15-1", "short-14-1"]
    assert failed.total == 17
    assert [row.job_id for row in borrowed.rows] == ["short-16-2", "short-16-1"] and borrowed.total == 51
    assert [row.job_id for row in lender.rows] == ["long"] and lender.total == 1


def finished_rows(count: int, start: datetime) -> Iterator[dict[str, Any]]:
    """Rows of finished jobs as the store writes them, one finished a second."""
    for index in range(count):
        at = start + timedelta(seconds=index)
        yield {
            "job_id": f"old-{index}",
            "job_queue_name": QUEUE,
            "quota_share_name": ("lender", "borrower", "urgent")[index % 3],
            "job_name": f"old-{index}",
            "capacity_unit": "gpu",
            "instance_count": 1,
            "scheduling_priority": 0,
            "status": "FAILED" if index % 10 == 0 else "SUCCEEDED",
            "status_reason": "",
            "submitted_at": at,
            "submit_seq": index,
            "awaiting_victims": [],
            "preempted_attempt_count": 0,
            "recent_preempted_attempts": [],
            "attempt": 1,
            "held_instance_count": 0,
            "borrowed_instance_count": 0,
            "dag_id": "train",
            "run_id": "run-1",
            "task_id": f"old-{index}",
            "map_index": -1,
            "try_number": 1,
            "created_at": at,
            "updated_at": at,
        }


def plan_of(ledger: Ledger, query: sa.Select[Any]) -> str:
    engine = ledger.database.engine
    sql = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as connection:
        return "\n".join(connection.execute(sa.text("EXPLAIN " + sql)).scalars())


def test_over_a_long_history_each_read_walks_its_own_index(ledger: Ledger) -> None:
    """20,000 finished jobs and as many audit rows, 200 of them preemptions: a page by finish time takes
    the latest of each status from (status, last change); the lost work, the window's PREEMPTED rows from
    (queue, kind, time). PostgreSQL's plans say so (SQLite, the embedded default, has no statistics)."""
    ledger.apply(THREE_SHARES)
    start = START - timedelta(days=1)
    jobs = list(finished_rows(20_000, start))
    audit = [
        {
            "at": job["updated_at"],
            "job_queue_name": QUEUE,
            "kind": AuditKind.PREEMPTED.value if index % 100 == 0 else job["status"],
            "quota_share_name": job["quota_share_name"],
            "job_id": job["job_id"],
            "message": "m",
            "details": {"capacityUnit": "gpu", "lostUnitSeconds": 60.0} if index % 100 == 0 else None,
        }
        for index, job in enumerate(jobs)
    ]
    engine = ledger.database.engine
    with engine.begin() as connection:
        connection.execute(sa.insert(JobRow), jobs)
        connection.execute(sa.insert(AuditRow), audit)
        connection.execute(sa.text("ANALYZE"))
    end = start + timedelta(seconds=20_000)

    with ledger.database.session() as session:
        latest = finished_job_page(session, limit=10)
        lost = lost_work(session, QUEUE, end - timedelta(hours=1), end)
    assert [row.job_id for row in latest.rows] == [f"old-{index}" for index in range(19_999, 19_989, -1)]
    # The last hour: jobs 16,400 to 19,999, of which every 100th was preempted, by share.
    assert lost == {
        ("gpu", "lender"): LostWork(720.0, 12, 0),
        ("gpu", "borrower"): LostWork(720.0, 12, 0),
        ("gpu", "urgent"): LostWork(720.0, 12, 0),
    }
    if engine.dialect.name != "postgresql":
        return
    pages = plan_of(ledger, finished_jobs_query(None, None, list(FINAL_STATUSES), 10, 0))
    assert pages.count("quota_job_status_updated_idx") == 2, pages  # one scan per status, merged
    assert "Seq Scan" not in pages, pages
    window = plan_of(ledger, lost_work_query(QUEUE, end - timedelta(hours=1), end))
    assert "quota_audit_log_queue_kind_idx" in window and "Seq Scan" not in window, window


def checkpoint(ledger: Ledger, job_id: str, at: datetime) -> None:
    ledger.event(lambda session, state, now: record_checkpoint_report(session, state, job_id, at, now))


def test_lost_work_sums_each_shares_preemptions_of_the_window(ledger: Ledger) -> None:
    """A borrower preempted for its lender (4 units, a checkpoint 3 s in), then an urgent job preempted
    inside its share (2 units, never checkpointed), and a preemption recorded before lost work was
    measured: per share, the sums of their audit rows' lostUnitSeconds over the window asked."""
    ledger.apply(THREE_SHARES)
    ledger.submit("b1", "borrower", 4)
    ledger.cycle()
    run(ledger, "b1")
    checkpoint(ledger, "b1", ledger.now + timedelta(seconds=3))
    ledger.submit("l1", "lender", 2)
    assert ledger.cycle().decisions == (Preemption("l1", ("b1",), PreemptionRule.RECLAIM, "gpu"),)
    first = ledger.now
    ledger.event(lambda session, state, now: record_stop_completed(session, state, "b1", now))
    ledger.submit("u-low", "urgent", 2, priority=1)
    ledger.cycle()
    run(ledger, "u-low")
    ledger.submit("u-high", "urgent", 2, priority=9)
    plan = ledger.cycle()
    assert plan.decisions[0] == Preemption("u-high", ("u-low",), PreemptionRule.IN_SHARE_PRIORITY, "gpu")
    second = ledger.now
    with ledger.database.session() as session, session.begin():  # as a release before lost work wrote it
        add_audit_row(
            session, second, QUEUE, AuditKind.PREEMPTED, quota_share_name="urgent", job_id="u-old",
            message="u-old preempted", details={"capacityUnit": "gpu", "instanceCount": 2},
        )  # fmt: skip
    rows = {row.job_id: row for row in ledger.audit(AuditKind.PREEMPTED)}
    b1, u_low = (rows[job].details["lostUnitSeconds"] for job in ("b1", "u-low"))  # type: ignore[index]
    assert b1 > 0 and u_low > 0 and b1 != u_low

    with ledger.database.session() as session:
        everything = lost_work(session, QUEUE, None, second)
        after_first = lost_work(session, QUEUE, first + timedelta(microseconds=1), second)
        up_to_first = lost_work(session, QUEUE, first - timedelta(hours=1), first)
        other_queue = lost_work(session, "other", None, second)
    assert everything == {
        ("gpu", "borrower"): LostWork(b1, 1, 0),
        ("gpu", "urgent"): LostWork(u_low, 2, 1),  # u-old's counts, without a figure
    }
    assert after_first == {("gpu", "urgent"): LostWork(u_low, 2, 1)}
    assert up_to_first == {("gpu", "borrower"): LostWork(b1, 1, 0)}
    assert other_queue == {}


def test_the_snapshot_and_the_timeline_say_what_the_preemptions_lost(ledger: Ledger, api: TestClient) -> None:
    """The snapshot's lostWork over the timeline's windows, per share and for the queue, and each
    preemption's stop phase on the timeline, as the audit log's PREEMPTED rows say."""
    ledger.apply(THREE_SHARES)
    ledger.submit("b1", "borrower", 4)
    ledger.cycle()
    run(ledger, "b1")
    checkpoint(ledger, "b1", ledger.now + timedelta(seconds=3))
    ledger.submit("l1", "lender", 2)
    ledger.cycle()
    first = ledger.now
    ledger.event(lambda session, state, now: record_stop_completed(session, state, "b1", now))
    ledger.submit("u-low", "urgent", 2, priority=1)
    ledger.cycle()
    run(ledger, "u-low")
    ledger.submit("u-high", "urgent", 2, priority=9)
    ledger.cycle()
    rows = {row.job_id: row.details or {} for row in ledger.audit(AuditKind.PREEMPTED)}
    b1, u_low = rows["b1"]["lostUnitSeconds"], rows["u-low"]["lostUnitSeconds"]

    def lost(**params: str) -> dict[str, Any]:
        response = api.get(f"/api/jobQueues/{QUEUE}/snapshot", params=params)
        assert response.status_code == 200, response.text
        document: dict[str, Any] = response.json()["lostWork"]
        return document

    everything = lost(window="all")
    assert everything["since"] is None
    assert everything["units"] == [
        {
            "capacityUnit": "gpu",
            "lostUnitSeconds": round(b1 + u_low, 1),
            "preemptions": 2,
            "unmeasured": 0,
            "quotaShares": [  # quota-file order, every share of the unit
                {"quotaShareName": "lender", "lostUnitSeconds": 0.0, "preemptions": 0, "unmeasured": 0},
                {"quotaShareName": "borrower", "lostUnitSeconds": b1, "preemptions": 1, "unmeasured": 0},
                {"quotaShareName": "urgent", "lostUnitSeconds": u_low, "preemptions": 1, "unmeasured": 0},
            ],
        }
    ]
    since_first = lost(since=(first + timedelta(seconds=1)).isoformat(), until=ledger.now.isoformat())
    assert [share["preemptions"] for share in since_first["units"][0]["quotaShares"]] == [0, 0, 1]
    assert since_first["units"][0]["lostUnitSeconds"] == u_low
    # By default the last hour up to now: this March history lost nothing in it.
    assert lost()["units"][0]["preemptions"] == 0
    response = api.get(f"/api/jobQueues/{QUEUE}/snapshot", params={"window": "2h"})
    assert response.status_code == 422 and "15m" in response.text

    timeline = api.get(f"/api/jobQueues/{QUEUE}/timeline", params={"window": "all"}).json()
    bars = timeline["units"][0]["bars"]
    stops = {
        (bar["jobId"], bar["lostUnitSeconds"], bar["lostSince"]) for bar in bars if bar["phase"] == "STOPPING"
    }
    assert stops == {("b1", b1, "checkpoint"), ("u-low", u_low, "start")}
    assert {bar["lostUnitSeconds"] for bar in bars if bar["phase"] == "RUNNING"} == {None}
