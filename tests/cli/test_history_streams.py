"""``airflow quota history`` streams: the trace is written a batch of jobs at a time (``HistoryStream``),
each batch's audit rows read by its job ids, so memory stays bounded however long the history
(``benchmarks/history_export.py`` measures 200,000 jobs). The jobs come out as the whole history's replay
would give them, also when a retry in a later batch took over the capacity of a try in an earlier one.

The ledger's two tables alone, on SQLite, with a batch of 4 jobs instead of 2,000.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from airflow_quota.cli.history import summary
from airflow_quota.ledger import history
from airflow_quota.ledger.history import HistoryStream, export_history
from airflow_quota.ledger.models import AuditRow, JobRow
from airflow_quota.sim.trace import write_trace

START = datetime(2026, 3, 1, tzinfo=UTC)
QUEUE = "gpu-training"


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def job_values(index: int, *, try_number: int = 1, status: str = "SUCCEEDED") -> dict[str, Any]:
    submitted = at(10 * index + try_number - 1)
    return {
        "job_id": f"dag/run/task_{index}/-1/{try_number}",
        "job_queue_name": QUEUE,
        "quota_share_name": "team-a",
        "job_name": f"task_{index}",
        "capacity_unit": "gpu",
        "instance_count": 1,
        "scheduling_priority": 5,
        "preemption_retries_before_termination": None,
        "status": status,
        "status_reason": "",
        "submitted_at": submitted,
        "submit_seq": 2 * index + try_number,
        "started_at": None,
        "start_seq": None,
        "stop_cause": None,
        "preempted_by": None,
        "preemption_rule": None,
        "awaiting_victims": [],
        "preempted_attempt_count": 0,
        "recent_preempted_attempts": [],
        "attempt": 1,
        "held_capacity_unit": None,
        "held_instance_count": 0,
        "borrowed_instance_count": 0,
        "borrowed_from": None,
        "held_devices": None,
        "stop_signalled_at": None,
        "task_ended_seen_at": None,
        "training_job": None,
        "dag_id": "dag",
        "run_id": "run",
        "task_id": f"task_{index}",
        "map_index": -1,
        "try_number": try_number,
        "ti_id": None,
        "created_at": submitted,
        "updated_at": submitted,
    }


def audit(
    seconds: float, kind: str, job_id: str, related: str | None = None, **details: Any
) -> dict[str, Any]:
    return {
        "at": at(seconds),
        "job_queue_name": QUEUE,
        "kind": kind,
        "quota_share_name": "team-a",
        "job_id": job_id,
        "related_job_id": related,
        "rule": None,
        "message": f"{job_id} {kind.lower()}",
        "details": details or None,
    }


#: Jobs 0..9, 10 s apart, each held 5 s; job 1 preempted (a 2 s stop) and granted again; job 2's priority
#: changed; job 3 never granted (left out); job 4's try 1 hands its capacity over to its try 2 (submitted
#: last, in a later batch) at 95 s.
JOBS = 10


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    JobRow.metadata.create_all(engine, tables=[JobRow.__table__, AuditRow.__table__])  # type: ignore[list-item]
    jobs = [job_values(index) for index in range(JOBS)]
    jobs[3]["status"] = "FAILED"
    handed = job_values(4, try_number=2)
    handed["submitted_at"] = handed["created_at"] = handed["updated_at"] = at(90)
    jobs.append(handed)
    rows = []
    for index in range(JOBS):
        job_id = jobs[index]["job_id"]
        rows.append(audit(10 * index, "SUBMITTED", job_id))
        if index == 3:
            rows.append(audit(10 * index + 1, "FAILED", job_id))
            continue
        rows.append(audit(10 * index + 1, "GRANTED", job_id))
        if index == 1:
            rows += [
                audit(12, "PREEMPTED", job_id),
                audit(14, "REQUEUED", job_id),
                audit(15, "GRANTED", job_id),
            ]
        if index == 2:
            rows.append(audit(22, "PRIORITY_CHANGED", job_id, old=1, new=9))
        if index != 4:
            rows.append(audit(10 * index + 6, "SUCCEEDED", job_id))
    rows += [
        audit(90, "SUBMITTED", handed["job_id"]),
        audit(95, "HANDED_OVER", handed["job_id"], related=jobs[4]["job_id"]),
        audit(99, "SUCCEEDED", handed["job_id"]),
    ]
    with engine.begin() as connection:
        connection.execute(sa.insert(JobRow), jobs)
        connection.execute(sa.insert(AuditRow), sorted(rows, key=lambda row: row["at"]))
    yield engine
    engine.dispose()


def audit_queries(engine: sa.Engine) -> list[str]:
    """The statements that read the audit log, as they run."""
    seen: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def record(*args: Any) -> None:
        if "FROM quota_audit_log" in args[2]:
            seen.append(args[2])

    return seen


def test_the_trace_is_written_a_batch_of_jobs_at_a_time(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history, "BATCH", 4)
    seen = audit_queries(engine)
    with Session(engine) as session:
        stream = iter(HistoryStream(session, since=START))
        first = next(stream)
        # The handovers of the exported jobs (read first, they are few), then the first batch's audit rows.
        assert (first.job_name, len(seen)) == ("dag_run_task_0_-1_1", 2)
        rest = list(stream)
    # 11 jobs: three batches, one query each.
    assert len(seen) == 4
    assert len(rest) == JOBS - 1  # one left out


def test_streaming_gives_the_whole_historys_trace(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    with Session(engine) as session:
        whole = export_history(session, since=START)  # one batch: every row together
    monkeypatch.setattr(history, "BATCH", 4)
    with Session(engine) as session:
        stream = HistoryStream(session, since=START)
        out = io.StringIO()
        write_trace(stream, out)
    expected = io.StringIO()
    write_trace(whole.jobs, expected)
    assert out.getvalue() == expected.getvalue()
    durations = {job.job_name: job.duration for job in whole.jobs}
    assert durations["dag_run_task_1_-1_1"] == 3 + 1  # held 11 to 14 (its stop included), 15 to 16
    assert durations["dag_run_task_4_-1_1"] == 95 - 41  # until its retry took over, two batches later
    assert durations["dag_run_task_4_-1_2"] == 99 - 95
    assert [job.scheduling_priority for job in whole.jobs if job.job_name == "dag_run_task_2_-1_1"] == [1]
    assert (stream.exported, stream.left_out, stream.stop_seconds) == (JOBS, 1, [2.0])
    assert summary(stream, "jobs.csv") == summary(whole, "jobs.csv")
