"""The ledger's admin commands (``airflow quota apply|shares|jobs|snapshot|events``) against an Airflow
metadata DB made by ``airflow db migrate``, on SQLite and on PostgreSQL. The commands run through Airflow's
own CLI parser in this process (``tests/cli/in_process.py``), as Airflow's CLI tests run theirs; one test runs
the real ``airflow`` process on the same database. Jobs are recorded through the store and the real planner,
as the allocator records them.
"""

from __future__ import annotations

import getpass
import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from airflow_quota.engine.model import JobRequest, JobStatus
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.ledger.decisions import record_cycle
from airflow_quota.ledger.job_rows import to_engine_time
from airflow_quota.ledger.lifecycle import (
    TaskInstanceRef,
    record_finish,
    record_status_change,
    record_submission,
)
from airflow_quota.ledger.models import AuditRow, JobQueueRow, JobRow, ledger_metadata
from airflow_quota.ledger.queue_state import load_queue_state
from tests.cli.in_process import run_quota
from tests.db.conftest import Database

pytestmark = pytest.mark.db

QUEUE = "gpu-training"


def share(name: str, gpus: int, strategy: str) -> dict[str, Any]:
    return {
        "quotaShareName": name,
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": gpus}],
        "resourceSharingConfiguration": {"strategy": strategy},
    }


def quota_file(path: Path, *shares: dict[str, Any]) -> str:
    document = {
        "jobQueues": [
            {
                "jobQueueName": QUEUE,
                "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 4}],
                "quotaShares": list(shares),
            }
        ]
    }
    path.write_text(yaml.safe_dump(document))
    return str(path)


def run_all(database: Database, *commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Run ``airflow quota COMMAND...`` for each command on the database, one after another."""
    return [run_quota(command, database.engine) for command in commands]


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}: {result.stdout}{result.stderr}"
    return result.stdout


def ledger_rows(database: Database) -> dict[str, list[str]]:
    with database.engine.connect() as connection:
        return {
            table.name: sorted(map(repr, connection.execute(sa.select(table)).all()))
            for table in ledger_metadata.sorted_tables
        }


def revision(database: Database) -> int | None:
    with database.session() as session:
        row = session.get(JobQueueRow, QUEUE)
        return None if row is None else row.revision


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    folder = tmp_path_factory.mktemp("quota-files")
    bad = folder / "bad.yaml"
    bad.write_text("jobQueues:\n  - jobQueueName: gpu-training\n    quotaShares: nope\n")
    yield {
        "first": quota_file(
            folder / "first.yaml", share("lender", 2, "LEND"), share("borrower", 2, "RESERVE")
        ),
        "second": quota_file(
            folder / "second.yaml", share("lender", 2, "LEND"), share("borrower", 1, "LEND_AND_BORROW")
        ),
        "without-lender": quota_file(folder / "without-lender.yaml", share("borrower", 1, "LEND_AND_BORROW")),
        "bad": str(bad),
        # Validated, then crashed apply with a traceback before the bound (beyond the ledger's integers).
        "too-large": quota_file(
            folder / "too-large.yaml",
            share("lender", 2, "LEND"),
            share("borrower", 2, "LEND_AND_BORROW")
            | {"resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 10**20}},
        ),
    }


def test_apply_shows_the_diff_writes_revisions_and_refuses_bad_files(
    migrated: Database, files: dict[str, str]
) -> None:
    empty = ledger_rows(migrated)
    bad, too_large, dry = run_all(
        migrated,
        ["apply", "-f", files["bad"]],
        ["apply", "-f", files["too-large"]],
        ["apply", "-f", files["first"], "--dry-run"],
    )
    assert bad.returncode == 1
    assert f"{files['bad']} is invalid" in bad.stdout
    assert too_large.returncode == 1
    assert "borrowLimit is 100000000000000000000: it must be a whole number from 0 to 10000000" in " ".join(
        too_large.stdout.split()
    )
    assert "Traceback" not in too_large.stderr
    assert "added: quota share lender" in ok(dry)
    assert "Dry run" in dry.stdout
    assert ledger_rows(migrated) == empty

    (first,) = run_all(migrated, ["apply", "-f", files["first"]])
    assert "added: job queue gpu-training" in ok(first)
    assert "capacityLimits.gpu: 2" in first.stdout
    assert "revision 1" in first.stdout
    assert revision(migrated) == 1
    applied_once = ledger_rows(migrated)

    bad, dry = run_all(migrated, ["apply", "-f", files["bad"]], ["apply", "-f", files["second"], "--dry-run"])
    assert bad.returncode == 1
    assert "changed: quota share borrower" in ok(dry)
    assert ledger_rows(migrated) == applied_once  # revision and audit unchanged

    (second,) = run_all(migrated, ["apply", "-f", files["second"]])
    out = ok(second)
    assert "changed: quota share borrower (job queue gpu-training)" in out
    assert "capacityLimits.gpu: 2 -> 1" in out
    assert "resourceSharingConfiguration.strategy: RESERVE -> LEND_AND_BORROW" in out
    assert "lender" not in out  # unchanged
    assert revision(migrated) == 2
    with migrated.session() as session:
        audit = session.scalars(sa.select(AuditRow).order_by(AuditRow.id)).all()
        assert [row.details["revision"] for row in audit if row.details] == [1, 1, 1, 2]
        assert {row.details["appliedBy"] for row in audit if row.details} == {getpass.getuser()}
        assert (audit[-1].details or {}).get("source") == files["second"]


def test_jobs_shares_snapshot_and_events_read_the_ledger(migrated: Database, files: dict[str, str]) -> None:
    start = datetime.now(UTC) - timedelta(minutes=5)
    for index, (job_id, gpus, priority) in enumerate((("big-1", 2, 9), ("big-2", 2, 0), ("small", 1, 5))):
        with migrated.session() as session, session.begin():
            state = load_queue_state(session, QUEUE)
            request = JobRequest(job_id, "lender", "gpu", gpus, priority)
            task = TaskInstanceRef("train", "run-1", job_id)
            record_submission(session, state, job_id, request, task, start + timedelta(seconds=index))
    now = start + timedelta(seconds=10)
    with migrated.session() as session, session.begin():
        before = load_queue_state(session, QUEUE)
        plan = plan_cycle(before, to_engine_time(now))
        record_cycle(session, before, plan, now)
    with migrated.session() as session, session.begin():
        state = load_queue_state(session, QUEUE)
        record_status_change(session, state, "big-1", JobStatus.RUNNING, now + timedelta(seconds=1))
    before_refusal = ledger_rows(migrated)

    jobs, describe, snapshot, shares, shares_table, share_json, jobs_table, events, refused = run_all(
        migrated,
        ["jobs", "list", "--output", "json"],
        ["jobs", "describe", "small", "--output", "json"],
        ["snapshot", "--output", "json"],
        ["shares", "list", "--queue", QUEUE, "--output", "json"],
        ["shares", "describe", "lender"],
        ["shares", "describe", "lender", "--output", "json"],
        ["jobs", "list", "--status", "runnable"],
        ["events", "--queue", QUEUE, "--output", "json"],
        ["apply", "-f", files["without-lender"]],
    )
    by_id = {job["jobId"]: job for job in json.loads(ok(jobs))["jobs"]}
    assert {job_id: (job["status"], job["position"]) for job_id, job in by_id.items()} == {
        "big-1": ("RUNNING", None),
        "small": ("RUNNABLE", 1),  # priority 5 goes first
        "big-2": ("RUNNABLE", 2),
    }
    # AWS Batch's fields, as the REST API's Job names them: granted at `now`, holding 2 gpu.
    big_1 = by_id["big-1"]
    assert (big_1["scheduledAt"], big_1["startedAt"], big_1["stoppedAt"]) == (
        now.isoformat(),
        now.isoformat(),
        None,
    )
    assert big_1["capacityUsage"] == [{"capacityUnit": "gpu", "quantity": 2}]
    assert (by_id["small"]["scheduledAt"], by_id["small"]["capacityUsage"]) == (None, [])
    small = json.loads(ok(describe))
    assert small["schedulingPriority"] == 5
    assert small["statusReason"]
    assert small["preemptionSummary"] == {
        "preemptedAttemptCount": 0,
        "recentPreemptedAttempts": [],
        "beingPreemptedBy": None,
        "lastPreemptedAt": None,
        "lastPreemptedBy": None,
        "lastPreemptionRule": None,
    }
    assert "preemptedAttemptCount" not in small and "recentPreemptedAttempts" not in small
    front = {
        share["quotaShareName"]: share for share in json.loads(ok(snapshot))["jobQueues"][0]["quotaShares"]
    }
    assert [(job["position"], job["jobId"]) for job in front["lender"]["frontOfQueue"]] == [
        (1, "small"),
        (2, "big-2"),
    ]
    assert front["lender"]["units"]["gpu"] == {
        "limit": 2,
        "ceiling": 2,
        "own": 2,
        "borrowed": 0,
        "lent": 0,
        "idle": 0,
        "RUNNING": 1,
        "RUNNABLE": 2,
    }
    shares_json = json.loads(ok(shares))["quotaShares"]
    assert [(s["quotaShareName"], s["resourceSharingConfiguration"]["strategy"]) for s in shares_json] == [
        ("lender", "LEND"),
        ("borrower", "LEND_AND_BORROW"),
    ]
    for text in ("lender", "LEND", "DISABLED", "Own", "Borrowed", "Lent", "Idle"):
        assert text in ok(shares_table)
    lender = json.loads(ok(share_json))  # DescribeQuotaShare's nesting, with the usage beside it
    assert {key: value for key, value in lender.items() if key != "units"} == {
        "quotaShareName": "lender",
        "jobQueueName": QUEUE,
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
        "resourceSharingConfiguration": {"strategy": "LEND"},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
        "state": "ENABLED",
    }
    assert lender["units"]["gpu"]["RUNNABLE"] == 2
    assert "small" in ok(jobs_table)
    assert "big-1" not in jobs_table.stdout
    kinds = [event["kind"] for event in json.loads(ok(events))["events"]]
    assert kinds[-4:] == ["SUBMITTED", "SUBMITTED", "SUBMITTED", "GRANTED"]
    assert refused.returncode == 1
    assert "quota share lender of job queue gpu-training is missing" in refused.stderr
    assert ledger_rows(migrated) == before_refusal
    assert revision(migrated) == 2

    changed, out_of_range, terminated = run_all(
        migrated,
        ["jobs", "update-priority", "big-2", "9000"],
        ["jobs", "update-priority", "big-2", "10000"],
        ["jobs", "terminate", "small", "--reason", "not needed any more"],
    )
    assert "schedulingPriority 0 -> 9000" in ok(changed)
    assert out_of_range.returncode == 1
    assert "from 0 to 9999" in out_of_range.stderr
    assert "FAILED now" in ok(terminated)

    jobs, events = run_all(
        migrated, ["jobs", "list", "--output", "json"], ["events", "--limit", "3", "--output", "json"]
    )
    by_id = {job["jobId"]: job for job in json.loads(ok(jobs))["jobs"]}
    assert (by_id["small"]["status"], by_id["small"]["statusReason"]) == ("FAILED", "not needed any more")
    assert (by_id["big-2"]["schedulingPriority"], by_id["big-2"]["position"]) == (9000, 1)
    latest = json.loads(ok(events))["events"]
    assert sorted(event["kind"] for event in latest) == ["FAILED", "PRIORITY_CHANGED", "TERMINATED"]
    priority = next(event for event in latest if event["kind"] == "PRIORITY_CHANGED")
    assert priority["details"] == {"old": 0, "new": 9000}

    finished_at = now + timedelta(seconds=30)
    with migrated.session() as session, session.begin():
        state = load_queue_state(session, QUEUE)
        record_finish(session, state, "big-1", finished_at, succeeded=True)
    (finished,) = run_all(migrated, ["jobs", "describe", "big-1", "--output", "json"])
    big_1 = json.loads(ok(finished))
    assert big_1["status"] == "SUCCEEDED"
    assert (big_1["scheduledAt"], big_1["startedAt"], big_1["stoppedAt"]) == (
        now.isoformat(),
        now.isoformat(),
        finished_at.isoformat(),
    )
    assert big_1["capacityUsage"] == []  # it holds nothing once finished


#: Case name -> (command, the start of its one-line error).
BAD_INPUTS = {
    "a time before year 1 in UTC": (
        ["events", "--since", "0001-01-01T00:00:00+14:00"],
        "error: --since 0001-01-01T00:00:00+14:00 is outside the years 1 to 9999 once in UTC: give a time "
        "from 0001-01-02 to 9999-12-30",
    ),
    "a time after year 9999 in UTC": (["events", "--since", "9999-12-31T23:59:59-14:00"], "error: --since"),
    "an events page past 64 bits": (
        ["events", "--limit", "1" + "0" * 30],
        "error: --limit must be a whole number from 1 to 1000",
    ),
    "an empty jobs page": (
        ["jobs", "list", "--limit", "0"],
        "error: --limit must be a whole number from 1 to 1000",
    ),
    "a jobs page too big": (["jobs", "list", "--limit", "1001"], "error: --limit must be a whole number"),
    **{
        f"a priority written {written!r}": (
            ["jobs", "update-priority", "big-2", written],
            "error: schedulingPriority is ",
        )
        for written in ('"5"', "true", "+5", " 5", "5_0", "5.0", "\u0665", "10000", "9" * 5000)
    },
    **{
        f"an allocation interval of {written}": (
            ["allocator", "--once", "--interval", written],
            f"error: --interval must be a positive number of seconds, not '{written}' (at most 3600)",
        )
        for written in ("nan", "inf", "1e300", "0")
    },
    "a 5,000-character reason": (
        ["jobs", "terminate", "big-2", "--reason", "x" * 5000],
        "error: --reason is 5000 characters: say why in at most 1000",
    ),
}


def test_bad_input_is_a_one_line_error_naming_the_flag_and_changes_nothing(migrated: Database) -> None:
    before = ledger_rows(migrated)
    results = run_all(migrated, *(command for command, _ in BAD_INPUTS.values()))
    wrong = [
        f"{case}: exit {result.returncode}: {result.stderr[-500:]}"
        for (case, (_, error)), result in zip(BAD_INPUTS.items(), results, strict=True)
        if result.returncode != 1 or not result.stderr.startswith(error) or result.stderr.count("\n") != 1
    ]
    priorities = [result.stderr for result in results if "schedulingPriority" in result.stderr]
    assert len(priorities) == 9
    assert all(
        error.endswith(": it must be a whole number from 0 to 9999 (higher runs first)\n")
        for error in priorities
    )
    assert wrong == []
    assert ledger_rows(migrated) == before


def test_jobs_list_shows_the_newest_page(migrated: Database) -> None:
    with migrated.session() as session:
        submitted = list(session.scalars(sa.select(JobRow.job_id).order_by(JobRow.submitted_at)))
    assert len(submitted) > 2
    as_json, as_table = run_all(
        migrated, ["jobs", "list", "--limit", "2", "--output", "json"], ["jobs", "list", "--limit", "2"]
    )
    page = json.loads(ok(as_json))
    assert ([job["jobId"] for job in page["jobs"]], page["total"]) == (submitted[-2:], len(submitted))
    assert f"The newest 2 of {len(submitted)} (--limit for more)." in ok(as_table)


@pytest.mark.airflow
def test_the_airflow_process_runs_a_ledger_command(migrated: Database) -> None:
    """The ``airflow`` command a user types finds the quota group and the database it is configured with."""
    with migrated.session() as session:
        submitted = sorted(session.scalars(sa.select(JobRow.job_id)))
    result = migrated.airflow("quota", "jobs", "list", "--output", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(job["jobId"] for job in json.loads(result.stdout)["jobs"]) == submitted
