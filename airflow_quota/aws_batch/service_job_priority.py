"""A priority change on a job of a queue AWS Batch schedules: sent to AWS Batch, and audited here.

The ledger holds no job of such a queue (AWS Batch admits, preempts and re-queues it), so
``airflow quota jobs update-priority`` and the REST API's ``POST /jobs/update-priority`` look a job they do
not find in the ledger up in AWS Batch (``find_service_job``: by service job id or ARN, or by job name among
the queue's unfinished jobs) and change it there with UpdateServiceJob (``change_priority``). The change is
audited like one of ours (PRIORITY_CHANGED, old and new, with the service job's ARN); AWS Batch applies it to
its own order of the quota share.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError
from sqlalchemy.orm import Session

from airflow_quota.aws_batch.queue_reports import SERVICE_JOB_STATUSES
from airflow_quota.ledger.audit import add_audit_row
from airflow_quota.ledger.models import AuditKind

#: Service-job statuses after which a change means nothing.
FINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED"})
#: Statuses listed when a job is looked up by its name (an unfinished one is wanted).
_OPEN_STATUSES = [status for status in SERVICE_JOB_STATUSES if status not in FINAL_STATUSES]


class ServiceJobError(Exception):
    """The job cannot be changed; the message says why and what to do."""


def queue_name_of(job_queue: str) -> str:
    """A job queue's name from its ARN (``...:job-queue/<name>``) or name."""
    return job_queue.rsplit("/", 1)[-1]


def find_service_job(client: Any, reference: str, job_queue_names: Collection[str]) -> dict[str, Any] | None:
    """The DescribeServiceJob answer of the job ``reference`` names (a service job id, its ARN, or its job
    name among the unfinished jobs of ``job_queue_names``), when it is a job of one of those queues; None
    when AWS Batch has none. Several unfinished jobs with that name: ``ServiceJobError``."""
    described = _describe(client, reference.rsplit("/", 1)[-1] if reference.startswith("arn:") else reference)
    if described is None:
        named = [job_id for name in job_queue_names for job_id in _unfinished_named(client, name, reference)]
        if len(set(named)) > 1:
            raise ServiceJobError(
                f"several unfinished service jobs are named {reference} ({', '.join(sorted(set(named)))}): "
                "give the service job id"
            )
        described = _describe(client, named[0]) if named else None
    if described is None or queue_name_of(str(described.get("jobQueue", ""))) not in job_queue_names:
        return None
    return described


def change_priority(
    session: Session, client: Any, described: dict[str, Any], priority: int, now: datetime
) -> dict[str, Any]:
    """UpdateServiceJob of the job ``described`` (a DescribeServiceJob answer) to ``priority``, audited
    (PRIORITY_CHANGED); returns the job's DescribeServiceJob answer after the change."""
    job_id, queue = str(described["jobId"]), queue_name_of(str(described["jobQueue"]))
    if described.get("status") in FINAL_STATUSES:
        raise ServiceJobError(
            f"service job {job_id} has already finished ({described['status']}): cannot change its priority"
        )
    old = described.get("schedulingPriority")
    client.update_service_job(jobId=job_id, schedulingPriority=priority)
    add_audit_row(
        session,
        now,
        queue,
        AuditKind.PRIORITY_CHANGED,
        job_id=job_id,
        quota_share_name=described.get("quotaShareName"),
        message=f"service job {job_id} schedulingPriority {old} -> {priority} (sent to AWS Batch)",
        details={"old": old, "new": priority, "serviceJobArn": described.get("jobArn")},
    )
    after = _describe(client, job_id)
    return after if after is not None else described


def _unfinished_named(client: Any, job_queue_name: str, job_name: str) -> list[str]:
    """The ids of the queue's unfinished service jobs named ``job_name`` (none when AWS has no such queue)."""
    found = []
    for status in _OPEN_STATUSES:
        try:
            answer = client.list_service_jobs(
                jobQueue=job_queue_name,
                jobStatus=status,
                filters=[{"name": "JOB_NAME", "values": [job_name]}],
            )
        except ClientError as error:
            if _not_found(error):
                return []
            raise
        found += [
            str(job["jobId"])
            for job in answer.get("jobSummaryList", [])
            if job.get("jobName") == job_name and job.get("status") == status
        ]
    return found


def _describe(client: Any, job_id: str) -> dict[str, Any] | None:
    try:
        answer = dict(client.describe_service_job(jobId=job_id))
    except ClientError as error:
        if _not_found(error):
            return None
        raise
    answer.pop("ResponseMetadata", None)
    return answer


def _not_found(error: ClientError) -> bool:
    """AWS Batch's answer for a job or queue it does not have (a ClientException, as for a bad request)."""
    return error.response.get("Error", {}).get("Code") in ("ClientException", "ResourceNotFoundException")
