"""``airflow quota snapshot`` and ``jobs list`` on job queues AWS Batch schedules: read from AWS, shown apart;
``jobs describe`` of one of their service jobs: read from AWS Batch (DescribeServiceJob); and ``jobs
update-priority`` on their service jobs: sent to AWS Batch (UpdateServiceJob).

The ledger holds nothing for such a queue, so both commands ask AWS Batch (``aws_batch/queue_reports.py``)
through the Airflow AWS connection ``aws_default``, and title each table "scheduled by AWS Batch". When AWS
Batch cannot be asked (no credentials, no network), the queue's document says why (``error``) and the
other queues are shown as usual. Their tables are ``cli/aws_tables.py``'s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from rich.markup import escape
from sqlalchemy.orm import Session

from airflow_quota.aws_batch.queue_reports import (
    SCHEDULED_BY_AWS_BATCH,
    batch_client,
    queue_snapshot_from_aws,
    service_job_report,
    service_jobs_from_aws,
)
from airflow_quota.aws_batch.service_job_priority import (
    ServiceJobError,
    change_priority,
    find_service_job,
    queue_name_of,
)
from airflow_quota.cli.aws_tables import SCHEDULED_BY
from airflow_quota.cli.common import (
    console,
    fail,
)


@contextmanager
def logs_to_stderr() -> Iterator[None]:
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
        with logs_to_stderr():
            return queue_snapshot_from_aws(batch_client(), job_queue_name, share_names)
    except Exception as error:  # whatever AWS or the connection said: shown, the other queues go on
        return _unreadable(job_queue_name, error)


def aws_queue_jobs(
    job_queue_name: str, *, status: str | None, quota_share_name: str | None, limit: int
) -> Any:
    """The queue's service jobs from AWS Batch (a list), or a document saying why they could not be read."""
    try:
        with logs_to_stderr():
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
        with logs_to_stderr():
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


def describe_service_job(reference: str, queues: list[str]) -> dict[str, Any]:
    """``jobs describe`` of a job the ledger does not hold: a service job of one of ``queues`` (the job queues
    AWS Batch schedules) by its id, ARN or job name, as DescribeServiceJob answers it
    (``service_job_report``); exits 1 saying why when AWS Batch has no such job or cannot be asked."""
    try:
        with logs_to_stderr():
            described = find_service_job(batch_client(), reference, queues)
    except ServiceJobError as error:
        fail(str(error))
    except (BotoCoreError, ClientError) as error:
        fail(
            f"no job {reference} is in the quota ledger, and AWS Batch, which schedules job queues "
            f"{', '.join(queues)}, could not be asked ({type(error).__name__}: {error}); check the Airflow "
            "connection aws_default"
        )
    if described is None:
        fail(
            f"no job {reference} is in the quota ledger, nor in the job queues AWS Batch schedules "
            f"({', '.join(queues)})"
        )
    return service_job_report(described)


def _unreadable(job_queue_name: str, error: Exception) -> dict[str, Any]:
    return {
        "jobQueueName": job_queue_name,
        "scheduledBy": SCHEDULED_BY_AWS_BATCH,
        "error": f"AWS Batch could not be asked ({type(error).__name__}: {error}); check the Airflow "
        "connection aws_default",
    }


def is_aws_document(queue: dict[str, Any]) -> bool:
    return queue.get("scheduledBy") == SCHEDULED_BY_AWS_BATCH
