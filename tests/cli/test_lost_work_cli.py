"""Lost work per preemption in the CLI (issue 37): ``airflow quota events`` (its message and details),
``jobs describe -o json`` (each preempted attempt's ``lostUnitSeconds``), ``history`` (the total on
stderr) and ``snapshot`` (the last hour's, per queue and share), on a ledger where a borrower that
checkpointed was preempted. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_quota.config_file import load_quota_file
from airflow_quota.engine.model import JobRequest, JobStatus
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.decisions import record_cycle
from airflow_quota.ledger.job_rows import to_engine_time
from airflow_quota.ledger.lifecycle import (
    TaskInstanceRef,
    record_checkpoint_report,
    record_status_change,
    record_stop_completed,
    record_submission,
)
from airflow_quota.ledger.queue_state import load_queue_state
from tests.cli.in_process import run_quota
from tests.cli.test_admin_cli import QUEUE, ok, quota_file, share
from tests.db.conftest import Database

pytestmark = pytest.mark.db


def test_events_jobs_and_history_show_the_gpu_seconds_a_preemption_lost(
    migrated: Database, tmp_path: Path
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    config = load_quota_file(
        quota_file(tmp_path / "q.yaml", share("lender", 2, "LEND"), share("borrower", 2, "LEND_AND_BORROW"))
    )
    with migrated.session() as session, session.begin():
        apply_quota_config(session, config, applied_by="test", source="q.yaml", now=start)

    def step(seconds: float, action: object) -> None:
        with migrated.session() as session, session.begin():
            state = load_queue_state(session, QUEUE)
            action(session, state, start + timedelta(seconds=seconds))  # type: ignore[operator]

    def submit(job_id: str, share_name: str, gpus: int):  # type: ignore[no-untyped-def]
        request = JobRequest(job_id, share_name, "gpu", gpus, 0)
        task = TaskInstanceRef("train", "run-1", job_id)
        return lambda session, state, now: record_submission(session, state, job_id, request, task, now)

    def cycle(session, state, now):  # type: ignore[no-untyped-def]
        record_cycle(session, state, plan_cycle(state, to_engine_time(now)), now)

    step(0, submit("b1", "borrower", 4))
    step(10, cycle)  # b1 granted 4 gpu (2 borrowed)
    step(11, lambda session, state, now: record_status_change(session, state, "b1", JobStatus.RUNNING, now))
    saved = start + timedelta(seconds=1000)
    step(1001, lambda session, state, now: record_checkpoint_report(session, state, "b1", saved, now))
    step(1200, submit("l1", "lender", 2))
    step(1210, cycle)  # l1 preempts b1: 4 gpu x 210 s since its checkpoint
    step(1250, lambda session, state, now: record_stop_completed(session, state, "b1", now))

    events, events_json, describe, history, snapshot, snapshot_json = (
        run_quota(command, migrated.engine)
        for command in (
            ["events", "--queue", QUEUE, "--wide"],
            ["events", "--queue", QUEUE, "--output", "json"],
            ["jobs", "describe", "b1", "--output", "json"],
            ["history", "--queue", QUEUE, "--since", start.isoformat(), "-o", str(tmp_path / "jobs.csv")],
            ["snapshot", "--queue", QUEUE, "--wide"],
            ["snapshot", "--queue", QUEUE, "--output", "json"],
        )
    )

    assert "it loses 840 GPU-seconds since its last checkpoint" in " ".join(ok(events).split())
    [preempted] = [event for event in json.loads(ok(events_json))["events"] if event["kind"] == "PREEMPTED"]
    assert (preempted["details"]["lostUnitSeconds"], preempted["details"]["lostSince"]) == (
        840.0,
        "checkpoint",
    )
    [attempt] = json.loads(ok(describe))["preemptionSummary"]["recentPreemptedAttempts"]
    assert attempt["lostUnitSeconds"] == 840.0
    assert ok(history) == ""
    assert (
        "Work lost to preemption: 840 GPU-seconds in 1 preemption, since each victim's last checkpoint"
        in (" ".join(history.stderr.split()))
    )
    assert (
        "Work lost to preemption in the last hour: 840 GPU-seconds in 1 preemption (by share of the "
        "preempted jobs: borrower 840)." in " ".join(ok(snapshot).split())
    )
    [queue] = json.loads(ok(snapshot_json))["jobQueues"]
    lost = queue["lostWork"]
    assert (lost["lostUnitSeconds"], lost["preemptions"], lost["unmeasured"]) == (840.0, 1, 0)
    assert lost["quotaShares"] == {"borrower": {"lostUnitSeconds": 840.0, "preemptions": 1, "unmeasured": 0}}
