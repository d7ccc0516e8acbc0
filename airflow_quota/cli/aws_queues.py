"""``airflow quota snapshot`` and ``jobs list`` on job queues AWS Batch schedules: read from AWS, shown apart;
and ``jobs update-priority`` on their service jobs: sent to AWS Batch (UpdateServiceJob).

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
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import RenderableType
from rich.markup import escape
from sqlalchemy.orm import Session

from airflow_quota.aws_batch.queue_reports import (
    SCHEDULED_BY_AWS_BATCH,
    batch_client,
    queue_snapshot_from_aws,
    service_jobs_from_aws,
)
from airflow_quota.aws_batch.service_job_priority import (
    ServiceJobError,
    change_priority,
    find_service_job,
    queue_name_of,
)
from airflow_quota.cli.common import (
    add_column,
    console,
    fail,
    reasons_after,
    reasons_inline,
    table,
    table_time,
)

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


def change_service_job_priority(session: Session, reference: str, priority: int, queues: list[str]) -> None:
    """``jobs update-priority`` on a job the ledger does not hold: a service job of one of ``queues`` (the
    job queues AWS Batch schedules), changed in AWS Batch (UpdateServiceJob) and audited; exits 1 saying
    why when there is no such job, it has finished, or AWS Batch refuses."""
    try:
        with _logs_to_stderr():
            client = batch_client()
            described = find_service_job(client, reference, queues)
            if described is None:
                fail(
                    f"no job {reference} is in the quota ledger, nor in the job queues AWS Batch schedules "
                    f"({', '.join(queues)})"
                )
            after = change_priority(session, client, described, priority, datetime.now(UTC))
    except ServiceJobError as error:
        fail(str(error))
    except (BotoCoreError, ClientError) as error:
        fail(f"AWS Batch refused or could not be asked ({type(error).__name__}: {error}): nothing changed")
    console().print(
        f"Service job {escape(str(after['jobId']))} ({escape(str(after.get('jobName')))}, job queue "
        f"{escape(queue_name_of(str(after['jobQueue'])))}, {SCHEDULED_BY}): schedulingPriority "
        f"{described.get('schedulingPriority')} -> {after.get('schedulingPriority')} (sent to AWS Batch with "
        "UpdateServiceJob; audited).",
        soft_wrap=True,
    )


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
