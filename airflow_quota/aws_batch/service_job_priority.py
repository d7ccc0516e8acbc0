"""A priority change or a termination of a job of a queue AWS Batch schedules: sent to AWS Batch, and
audited here.

The ledger holds no job of such a queue (AWS Batch admits, preempts and re-queues it), so
``airflow quota jobs update-priority`` and the REST API's ``POST /jobs/update-priority`` look a job they do
not find in the ledger up in AWS Batch (``find_service_job``: by service job id or ARN, or by job name among
the queue's unfinished jobs, else its finished ones) and change it there with UpdateServiceJob
(``change_priority``). The change is audited like one of ours (PRIORITY_CHANGED, old and new, with the
service job's ARN); AWS Batch applies it to its own order of the quota share. ``POST /jobs/terminate``
terminates such a job with TerminateServiceJob (``terminate_service_job``, audited TERMINATED). A finished
job is refused either way.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError
from sqlalchemy.orm import Session

from airflow_quota.aws_batch.queue_reports import SERVICE_JOB_STATUSES
from airflow_quota.aws_batch.service_jobs import FINAL_STATUSES
from airflow_quota.ledger.audit import add_audit_row
from airflow_quota.ledger.models import AuditKind

#: Statuses listed when a job is looked up by its name (an unfinished one is wanted).
_OPEN_STATUSES = [status for status in SERVICE_JOB_STATUSES if status not in FINAL_STATUSES]


class ServiceJobError(Exception):
    """The job cannot be changed; the message says why and what to do."""


class ServiceJobReferenceError(ServiceJobError):
    """What names the job cannot name a service job (an ARN of another resource type): bad input."""


#: The ARN of a service job: ``arn:<partition>:batch:<region>:<account>:service-job/<job id>``.
_SERVICE_JOB_ARN = re.compile(r"arn:[a-z-]+:batch:[a-z0-9-]+:\d{12}:service-job/(?P<job_id>[^/\s]+)")


def queue_name_of(job_queue: str) -> str:
    """A job queue's name from its ARN (``...:job-queue/<name>``) or name."""
    return job_queue.rsplit("/", 1)[-1]


def find_service_job(client: Any, reference: str, job_queue_names: Collection[str]) -> dict[str, Any] | None:
    """The DescribeServiceJob answer of the job ``reference`` names (a service job id, its ARN, or its job
    name: among the unfinished jobs of ``job_queue_names``, else among their finished ones), when it is a
    job of one of those queues; None when AWS Batch has none. Several jobs with that name (unfinished, or
    when none is, finished): ``ServiceJobError``. An ARN that is not a service job's:
    ``ServiceJobReferenceError``."""
    described = _describe(client, _job_id_of(reference))
    if described is None:
        named = _named(client, job_queue_names, reference, _OPEN_STATUSES)
        if len(named) > 1:
            raise ServiceJobError(
                f"several unfinished service jobs are named {reference} ({', '.join(named)}): "
                "give the service job id"
            )
        if not named:  # a finished job named so is the one meant (refused by a change: it has finished)
            named = _named(client, job_queue_names, reference, sorted(FINAL_STATUSES))
            if len(named) > 1:
                raise ServiceJobError(
                    f"no unfinished service job is named {reference}, and {len(named)} finished ones are "
                    f"({', '.join(named)}): give the service job id"
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


def terminate_service_job(
    session: Session, client: Any, described: dict[str, Any], reason: str, now: datetime
) -> dict[str, Any]:
    """TerminateServiceJob of the job ``described`` (a DescribeServiceJob answer) with ``reason``, audited
    (TERMINATED); returns the job's DescribeServiceJob answer after the call. AWS Batch stops its training
    job and fails it; the task that follows it then fails with its statusReason."""
    job_id, queue = str(described["jobId"]), queue_name_of(str(described["jobQueue"]))
    if described.get("status") in FINAL_STATUSES:
        raise ServiceJobError(
            f"service job {job_id} has already finished ({described['status']}): cannot terminate it"
        )
    client.terminate_service_job(jobId=job_id, reason=reason)
    add_audit_row(
        session,
        now,
        queue,
        AuditKind.TERMINATED,
        job_id=job_id,
        quota_share_name=described.get("quotaShareName"),
        message=reason,
        details={"status": described.get("status"), "serviceJobArn": described.get("jobArn")},
    )
    after = _describe(client, job_id)
    return after if after is not None else described


def _job_id_of(reference: str) -> str:
    """The service job id a reference gives: the id in a service job's ARN, else the reference itself
    (an id or a job name); ``ServiceJobReferenceError`` for any other ARN."""
    if not reference.startswith("arn:"):
        return reference
    matched = _SERVICE_JOB_ARN.fullmatch(reference)
    if matched is None:
        raise ServiceJobReferenceError(
            f"jobId {reference} is not the ARN of an AWS Batch service job: give the service job's ARN "
            "(arn:aws:batch:REGION:ACCOUNT_ID:service-job/ID), its id, or its job name"
        )
    return matched["job_id"]


def _named(
    client: Any, job_queue_names: Collection[str], job_name: str, statuses: Collection[str]
) -> list[str]:
    """The ids, sorted, of the service jobs named ``job_name`` in ``statuses`` in the queues."""
    return sorted(
        {job_id for name in job_queue_names for job_id in _named_in(client, name, job_name, statuses)}
    )


def _named_in(client: Any, job_queue_name: str, job_name: str, statuses: Collection[str]) -> list[str]:
    """The ids of the queue's service jobs named ``job_name`` in ``statuses`` (none when AWS has no such
    queue): one ListServiceJobs filtered by ``JOB_NAME`` alone, every page (AWS ignores ``jobStatus``
    beside that filter, and matches it case-insensitively: both are checked here)."""
    from airflow_quota.hooks.batch_service_job import service_jobs_named

    try:
        return [str(job["jobId"]) for job in service_jobs_named(client, job_queue_name, job_name, statuses)]
    except ClientError as error:
        if _not_found(error):
            return []
        raise


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
