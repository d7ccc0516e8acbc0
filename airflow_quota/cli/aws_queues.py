"""``airflow quota snapshot`` and ``jobs list`` on job queues AWS Batch schedules: read from AWS, shown apart.

The ledger holds nothing for such a queue, so both commands ask AWS Batch (``aws_batch/queue_reports.py``)
through the Airflow AWS connection ``aws_default``, and title each table "scheduled by AWS Batch". When AWS
Batch cannot be asked (no credentials, no network), the queue's document says why (``error``) and the
other queues are shown as usual.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import RenderableType
from rich.markup import escape

from airflow_quota.aws_batch.queue_reports import (
    SCHEDULED_BY_AWS_BATCH,
    batch_client,
    queue_snapshot_from_aws,
    service_jobs_from_aws,
)
from airflow_quota.cli.common import add_column, reasons_after, reasons_inline, table, table_time

SCHEDULED_BY = "scheduled by AWS Batch"


@contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """While AWS Batch is asked, what is written to stdout (the amazon provider logs its connection there)
    goes to stderr instead, so the command's stdout stays its tables or its one JSON document."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def aws_queue_snapshot(job_queue_name: str, share_names: list[str]) -> dict[str, Any]:
    """The queue's snapshot from AWS Batch (``share_names`` first), or a document saying why it could not
    be read."""
    try:
        with _logs_to_stderr():
            return queue_snapshot_from_aws(batch_client(), job_queue_name, share_names)
    except Exception as error:  # whatever AWS or the connection said: shown, the other queues go on
        return _unreadable(job_queue_name, error)


def aws_queue_jobs(
    job_queue_name: str, *, status: str | None, quota_share_name: str | None, limit: int
) -> Any:
    """The queue's service jobs from AWS Batch (a list), or a document saying why they could not be read."""
    try:
        with _logs_to_stderr():
            return service_jobs_from_aws(
                batch_client(), job_queue_name, status=status, quota_share_name=quota_share_name, limit=limit
            )
    except Exception as error:
        return _unreadable(job_queue_name, error)


def _unreadable(job_queue_name: str, error: Exception) -> dict[str, Any]:
    return {
        "jobQueueName": job_queue_name,
        "scheduledBy": SCHEDULED_BY_AWS_BATCH,
        "error": f"AWS Batch could not be asked ({type(error).__name__}: {error}); check the Airflow "
        "connection aws_default",
    }


def is_aws_document(queue: dict[str, Any]) -> bool:
    return queue.get("scheduledBy") == SCHEDULED_BY_AWS_BATCH


def aws_snapshot_tables(queue: dict[str, Any], *, width: int, wide: bool = False) -> list[RenderableType]:
    """A snapshot from AWS Batch (``queue_snapshot_from_aws``): the capacity in use per quota share, then
    the front of each share."""
    name = queue["jobQueueName"]
    if "error" in queue:
        return [f"Job queue {escape(name)} ({SCHEDULED_BY}): {escape(queue['error'])}"]
    usage = table(f"Job queue {name} ({SCHEDULED_BY}): capacity in use", caption="Read from AWS Batch.")
    for header in ("Quota share", "Capacity unit", "In use"):
        add_column(usage, header, number=header == "In use", wide=wide)
    for share in queue["quotaShares"]:
        for each in share["capacityUsage"]:
            usage.add_row(
                escape(share["quotaShareName"]), escape(each["capacityUnit"]), str(each["quantity"])
            )
    for each in queue["capacityUsage"]:
        usage.add_row("(all)", escape(each["capacityUnit"]), str(each["quantity"]))
    front = table(f"Job queue {name} ({SCHEDULED_BY}): front of each share", caption="Times in UTC.")
    for header in ("Quota share", "Position", "Job", "At this position since"):
        add_column(front, header, number=header == "Position", whole=header == "Job", wide=wide)
    waiting = [
        (share["quotaShareName"], job) for share in queue["quotaShares"] for job in share["frontOfQueue"]
    ]
    for share_name, job in waiting:
        front.add_row(
            escape(share_name),
            str(job["position"]),
            escape(job["jobId"]),
            table_time(job["earliestTimeAtPosition"], wide=wide),
        )
    return [usage, front if waiting else "No RUNNABLE jobs."]


def aws_jobs_tables(
    job_queue_name: str, jobs: Any, *, width: int, wide: bool = False
) -> list[RenderableType]:
    """A queue's service jobs from AWS Batch (``service_jobs_from_aws``), newest first."""
    if isinstance(jobs, dict):
        return [f"Job queue {escape(job_queue_name)} ({SCHEDULED_BY}): {escape(jobs['error'])}"]
    if not jobs:
        return [f"Job queue {escape(job_queue_name)} ({SCHEDULED_BY}): no service jobs match."]
    inline = reasons_inline(width, wide=wide)
    out = table(
        f"Service jobs of job queue {job_queue_name} ({SCHEDULED_BY})",
        caption="Read from AWS Batch, newest first. Times in UTC.",
    )
    headers = [
        "Job",
        "Name",
        "Quota share",
        "Status",
        "Capacity",
        "Created",
        *(["Status reason"] if inline else []),
    ]
    for header in headers:
        add_column(out, header, whole=header in ("Job", "Status"), wide=wide)
    for job in jobs:
        capacity = ", ".join(f"{each['capacityUnit']} x {each['quantity']}" for each in job["capacityUsage"])
        cells = [
            job["jobId"],
            job["jobName"] or "-",
            job["quotaShareName"] or "-",
            job["status"],
            capacity or "-",
            table_time(job["createdAt"], wide=wide),
            *([job["statusReason"]] if inline else []),
        ]
        out.add_row(*map(escape, cells))
    if inline:
        return [out]
    return [out, *reasons_after([(job["jobId"], job["statusReason"]) for job in jobs])]
