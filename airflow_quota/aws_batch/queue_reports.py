"""Job queues AWS Batch schedules, as ``airflow quota snapshot`` and ``jobs list`` show them: read from AWS.

The ledger holds nothing for a job queue whose quota file says ``scheduler: AWS_BATCH`` (the allocator hands
its tasks to AWS Batch), so these commands ask AWS Batch, through the amazon provider's Batch hook and an
Airflow AWS connection: GetJobQueueSnapshot for the capacity in use and the front of each quota share,
ListServiceJobs for the queue's jobs. Every document made here says ``"scheduledBy": "AWS_BATCH"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_quota.ledger.models import JobQueueRow

SCHEDULED_BY_AWS_BATCH: Final = "AWS_BATCH"
#: ListServiceJobs lists one status at a time (RUNNING when none is given); a listing of every job asks each.
SERVICE_JOB_STATUSES: Final = (
    "SUBMITTED",
    "PENDING",
    "RUNNABLE",
    "SCHEDULED",
    "STARTING",
    "RUNNING",
    "SUCCEEDED",
    "FAILED",
)


def aws_scheduled_queues(session: Session, job_queue_name: str | None = None) -> list[str]:
    """The applied job queues AWS Batch schedules (only ``job_queue_name``, when given), by name."""
    query = select(JobQueueRow.job_queue_name).where(JobQueueRow.scheduler == SCHEDULED_BY_AWS_BATCH)
    if job_queue_name is not None:
        query = query.where(JobQueueRow.job_queue_name == job_queue_name)
    return list(session.scalars(query.order_by(JobQueueRow.job_queue_name)))


def batch_client(aws_conn_id: str | None = "aws_default", config: Any = None) -> Any:
    """A boto3 Batch client of the Airflow AWS connection ``aws_conn_id`` (the provider's Batch hook), with
    ``config`` (a botocore ``Config``: timeouts, retries) when given."""
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

    return BatchClientHook(aws_conn_id=aws_conn_id, config=config).conn


def queue_snapshot_from_aws(
    client: Any, job_queue_name: str, share_names: Sequence[str] = ()
) -> dict[str, Any]:
    """GetJobQueueSnapshot of ``job_queue_name``: the capacity in use in all and per quota share, and the
    front of each quota share (its first RUNNABLE jobs, in AWS Batch's order). AWS lists only the shares
    that use or wait for capacity; ``share_names`` (the applied ones) come first, whatever they do."""
    answer = client.get_job_queue_snapshot(jobQueue=job_queue_name)
    utilization = answer.get("queueUtilization") or {}
    usage = {
        share["quotaShareName"]: _usage(share.get("capacityUsage"))
        for share in (utilization.get("quotaShareUtilization") or {}).get("topCapacityUtilization", [])
    }
    fronts = (answer.get("frontOfQuotaShares") or {}).get("quotaShares") or {}
    names = list(dict.fromkeys([*share_names, *usage, *fronts]))
    return {
        "jobQueueName": job_queue_name,
        "scheduledBy": SCHEDULED_BY_AWS_BATCH,
        "capacityUsage": _usage(utilization.get("totalCapacityUsage")),
        "quotaShares": [
            {
                "quotaShareName": name,
                "capacityUsage": usage.get(name, []),
                "frontOfQueue": [
                    {
                        "position": position,
                        "jobId": _job_id(job["jobArn"]),
                        "jobArn": job["jobArn"],
                        "earliestTimeAtPosition": _iso(job.get("earliestTimeAtPosition")),
                    }
                    for position, job in enumerate(fronts.get(name, []), start=1)
                ],
            }
            for name in names
        ],
        "lastUpdatedAt": _iso(utilization.get("lastUpdatedAt")),
    }


def service_jobs_from_aws(
    client: Any,
    job_queue_name: str,
    *,
    status: str | None = None,
    quota_share_name: str | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """The queue's service jobs (of ``status``, or every status), newest first, at most ``limit``."""
    jobs: list[dict[str, Any]] = []
    for each_status in [status] if status else SERVICE_JOB_STATUSES:
        request: dict[str, Any] = {"jobQueue": job_queue_name, "jobStatus": each_status}
        if quota_share_name is not None:  # AWS reads jobStatus beside this filter
            request["filters"] = [{"name": "QUOTA_SHARE_NAME", "values": [quota_share_name]}]
        for page in client.get_paginator("list_service_jobs").paginate(
            **request, PaginationConfig={"MaxItems": limit}
        ):
            jobs += page.get("jobSummaryList", [])
    jobs.sort(key=lambda job: job.get("createdAt") or 0, reverse=True)
    return [_job_report(job, job_queue_name) for job in jobs[:limit]]


def _job_report(job: dict[str, Any], job_queue_name: str) -> dict[str, Any]:
    return {
        "jobId": job["jobId"],
        "jobArn": job.get("jobArn"),
        "jobName": job.get("jobName"),
        "jobQueue": job_queue_name,
        "quotaShareName": job.get("quotaShareName"),
        "status": job.get("status"),
        "statusReason": job.get("statusReason") or "",
        "capacityUsage": _usage(job.get("capacityUsage")),
        "createdAt": _iso(job.get("createdAt")),
        "scheduledAt": _iso(job.get("scheduledAt")),
        "startedAt": _iso(job.get("startedAt")),
        "stoppedAt": _iso(job.get("stoppedAt")),
        "isTerminated": job.get("isTerminated"),
        "trainingJobArn": ((job.get("latestAttempt") or {}).get("serviceResourceId") or {}).get("value"),
        "scheduledBy": SCHEDULED_BY_AWS_BATCH,
    }


def _usage(capacity_usage: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """AWS's ``capacityUsage`` with whole quantities as ints (AWS sends doubles)."""
    return [
        {
            "capacityUnit": each["capacityUnit"],
            "quantity": int(each["quantity"]) if float(each["quantity"]).is_integer() else each["quantity"],
        }
        for each in capacity_usage or []
    ]


def _job_id(job_arn: str) -> str:
    return job_arn.rsplit("/", 1)[-1]


def _iso(epoch_ms: int | None) -> str | None:
    """AWS Batch's epoch milliseconds as ISO 8601 (UTC); None for none (or 0: not yet)."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat() if epoch_ms else None
