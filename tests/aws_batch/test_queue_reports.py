"""What ``airflow quota snapshot`` and ``jobs list`` show of a job queue AWS Batch schedules, read from AWS
Batch (the emulator): the capacity in use per quota share, the front of each share, the queue's jobs."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_quota.aws_batch.queue_reports import queue_snapshot_from_aws, service_jobs_from_aws
from airflow_quota.cli.snapshot import snapshot_tables
from tests.aws_batch.conftest import UNIT, create_design, quota_file, share, submit
from tests.aws_batch.test_emulator import status, wait_for


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
    assert jobs["nlp-2"] in text


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
