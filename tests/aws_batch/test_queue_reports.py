"""What ``airflow quota snapshot``, ``jobs list`` and ``jobs describe`` show of a job queue AWS Batch
schedules, read from AWS Batch (the emulator): the capacity in use per quota share, the front of each share,
the queue's jobs, one service job with its attempts and preemptions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_quota.aws_batch.queue_reports import queue_snapshot_from_aws, service_jobs_from_aws
from airflow_quota.cli.snapshot import snapshot_tables
from tests.aws_batch.conftest import UNIT, create_design, quota_file, share, submit
from tests.aws_batch.test_emulator import status, wait_for
from tests.aws_batch.test_priority_on_aws_queues import applied_aws_queue
from tests.aws_batch.test_priority_on_aws_queues import aws_queue as aws_queue
from tests.cli.in_process import run_quota
from tests.cli.test_cli_widths import WIDTHS, header_is_readable
from tests.db.conftest import Database
from tests.db.conftest import database as database
from tests.db.conftest import migrated as migrated
from tests.sagemaker.moto_process import emulator_connection


@pytest.fixture
def busy_queue(batch: Any, unique: str) -> tuple[str, dict[str, str]]:
    """A queue of 2 instances: research runs on both (one borrowed from nlp), then nlp's two jobs wait."""
    name = f"gpu-{unique}"
    create_design(
        batch,
        quota_file(
            name, 2, share("research", "LEND_AND_BORROW", 1, borrow_limit=-1), share("nlp", "RESERVE", 1)
        ),
    )
    jobs = {"research": submit(batch, name, "research-train", "research", 1, duration_s="120")}
    wait_for("research's job to run", lambda: status(batch, jobs["research"]) == "RUNNING")
    jobs["nlp-1"] = submit(batch, name, "nlp-1", "nlp", 1, duration_s="120")
    wait_for("nlp's first job to run", lambda: status(batch, jobs["nlp-1"]) == "RUNNING")
    jobs["nlp-2"] = submit(batch, name, "nlp-2", "nlp", 1, duration_s="120")
    wait_for("nlp's second job to wait", lambda: status(batch, jobs["nlp-2"]) == "RUNNABLE")
    return name, jobs


def test_the_snapshot_shows_aws_batchs_usage_and_front_of_each_share(
    batch: Any, busy_queue: tuple[str, dict[str, str]]
) -> None:
    name, jobs = busy_queue

    snapshot = queue_snapshot_from_aws(batch, name, ["idle", "nlp", "research"])

    assert (snapshot["jobQueueName"], snapshot["scheduledBy"]) == (name, "AWS_BATCH")
    assert snapshot["capacityUsage"] == [{"capacityUnit": UNIT, "quantity": 2}]
    assert [each["quotaShareName"] for each in snapshot["quotaShares"]] == ["idle", "nlp", "research"]
    shares = {each["quotaShareName"]: each for each in snapshot["quotaShares"]}
    assert (shares["idle"]["capacityUsage"], shares["idle"]["frontOfQueue"]) == ([], [])
    assert shares["research"]["capacityUsage"] == [{"capacityUnit": UNIT, "quantity": 1}]
    assert shares["nlp"]["capacityUsage"] == [{"capacityUnit": UNIT, "quantity": 1}]
    assert [(job["position"], job["jobId"]) for job in shares["nlp"]["frontOfQueue"]] == [(1, jobs["nlp-2"])]
    assert shares["nlp"]["frontOfQueue"][0]["earliestTimeAtPosition"] is not None
    text = rendered(snapshot_tables(snapshot, width=160))
    assert f"Job queue {name} (scheduled by AWS Batch)" in text
    assert jobs["nlp-2"][:8] in text  # by its label: the service job id's first 8 characters


@pytest.mark.parametrize(
    ("status_filter", "share_filter", "expected"),
    [
        (None, None, ["nlp-2", "nlp-1", "research"]),
        ("RUNNING", None, ["nlp-1", "research"]),
        ("RUNNABLE", None, ["nlp-2"]),
        (None, "nlp", ["nlp-2", "nlp-1"]),
    ],
    ids=["every-status", "running", "runnable", "one-share"],
)
def test_jobs_list_reads_the_queues_service_jobs_newest_first(
    batch: Any,
    busy_queue: tuple[str, dict[str, str]],
    status_filter: str | None,
    share_filter: str | None,
    expected: list[str],
) -> None:
    name, jobs = busy_queue

    listed = service_jobs_from_aws(batch, name, status=status_filter, quota_share_name=share_filter)

    assert [job["jobId"] for job in listed] == [jobs[key] for key in expected]
    assert {job["scheduledBy"] for job in listed} == {"AWS_BATCH"}
    running = [job for job in listed if job["status"] == "RUNNING"]
    assert all(job["trainingJobArn"] and job["startedAt"] for job in running)
    assert service_jobs_from_aws(batch, name, limit=1)[0]["jobId"] == jobs["nlp-2"]


def rendered(renderables: list[Any]) -> str:
    from rich.console import Console

    console = Console(width=160, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    for each in renderables:
        console.print(each)
    return console.export_text()


@pytest.fixture
def preempting_queue(batch: Any, unique: str, migrated: Database) -> str:
    """A queue of one instance AWS Batch schedules (research, in-share preemption on), in the emulator and
    applied in the ledger (which holds no job)."""
    research = share("research", "RESERVE", 1, inSharePreemption="ENABLED")
    return applied_aws_queue(batch, migrated, f"gpu-{unique}", research)


@pytest.mark.db
def test_jobs_describe_reads_a_service_job_the_ledger_does_not_hold_from_aws_batch(
    batch: Any, preempting_queue: str, migrated: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job of a queue AWS Batch schedules is described as DescribeServiceJob answers it, by id or job
    name: preempted by a higher-priority job of its share, re-queued."""
    aws_queue = preempting_queue
    low = submit(batch, aws_queue, "low-trial", "research", 1, duration_s="120")
    wait_for("the low-priority job to run", lambda: status(batch, low) == "RUNNING")
    submit(batch, aws_queue, "urgent", "research", 1, duration_s="120", schedulingPriority=90)
    wait_for("the low-priority job to be preempted", lambda: status(batch, low) == "RUNNABLE")
    described = batch.describe_service_job(jobId=low)
    first_arn = described["attempts"][0]["serviceResourceId"]["value"]

    shown = run_quota(["jobs", "describe", low, "-o", "json"], migrated.engine)

    assert shown.returncode == 0, shown.stderr
    job = json_document(shown.stdout)
    assert (job["jobId"], job["jobName"], job["jobQueue"], job["quotaShareName"]) == (
        low,
        "low-trial",
        aws_queue,
        "research",
    )
    assert (job["status"], job["schedulingPriority"], job["scheduledBy"]) == ("RUNNABLE", 0, "AWS_BATCH")
    assert job["jobQueueArn"] == described["jobQueue"] and job["jobArn"] == described["jobArn"]
    assert job["submittedAt"] == job["createdAt"] and job["submittedAt"].endswith("+00:00")
    assert (job["capacityUnit"], job["instanceCount"]) == (UNIT, 1)
    summary = job["preemptionSummary"]
    # The ledger's job JSON's preemptionSummary: the same fields, in the same order.
    assert list(summary) == [
        "preemptedAttemptCount",
        "recentPreemptedAttempts",
        "beingPreemptedBy",
        "lastPreemptedAt",
        "lastPreemptedBy",
        "lastPreemptionRule",
    ]
    (preempted,) = summary["recentPreemptedAttempts"]
    assert summary["preemptedAttemptCount"] == 1 and preempted["attempt"] == 1
    assert preempted["serviceResourceId"] == {"name": "TrainingJobArn", "value": first_arn}
    assert preempted["startedAt"] < preempted["stoppedAt"] == summary["lastPreemptedAt"]
    assert job["attempts"][0]["attempt"] == 1 and job["attempts"][0]["startedAt"] == preempted["startedAt"]
    by_name = run_quota(["jobs", "describe", "low-trial", "-o", "json"], migrated.engine).stdout
    assert json_document(by_name) == job

    for width in WIDTHS:
        monkeypatch.setenv("COLUMNS", str(width))
        table = run_quota(["jobs", "describe", low], migrated.engine)
        assert table.returncode == 0, table.stderr
        lines = [line for line in table.stdout.splitlines() if "[info     ]" not in line]  # the log line
        assert max(map(len, lines)) <= width, table.stdout
        # below 120 columns the status reasons follow each table, as in the ledger's tables
        reasons = "Status reason" if width >= 120 else "Status reasons"
        for header in ("Attempt", "Training job", "Started at", "Stopped at", reasons):
            assert header_is_readable(header, lines), f"{header} at {width}:\n{table.stdout}"
        assert f"{aws_queue} (scheduled by AWS Batch)" in table.stdout
        assert f"Recent preempted attempts of service job {low[:8]}" in table.stdout
        assert first_arn.rsplit("/", 1)[-1] in table.stdout  # the training job, by its name
        if width < 120:  # who preempted it, whole after the table
            assert f"Attempt 1: {preempted['statusReason']}" in table.stdout


@pytest.mark.db
def test_jobs_describe_of_no_job_names_both_places_and_says_when_aws_batch_cannot_be_asked(
    batch: Any, aws_queue: str, migrated: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = run_quota(["jobs", "describe", "nobody"], migrated.engine)

    assert unknown.returncode == 1
    assert (
        f"no job nobody is in the quota ledger, nor in the job queues AWS Batch schedules ({aws_queue})"
        in unknown.stderr
    )
    for name, value in emulator_connection("http://127.0.0.1:9").items():  # nothing listens there
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    unreachable = run_quota(["jobs", "describe", "nobody"], migrated.engine)
    assert unreachable.returncode == 1
    assert "no job nobody is in the quota ledger, and AWS Batch" in unreachable.stderr
    assert "could not be asked" in unreachable.stderr


def json_document(stdout: str) -> Any:
    """The command's JSON document: in this process, the provider's connection log line comes before it on
    stdout (the ``airflow`` process sends it to stderr: ``cli.aws_queues.logs_to_stderr``)."""
    return json.loads(stdout[stdout.index("\n{") + 1 :] if not stdout.startswith("{") else stdout)
