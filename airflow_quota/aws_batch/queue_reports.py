"""Job queues AWS Batch schedules, as ``airflow quota snapshot`` and ``jobs list`` show them: read from AWS.

The ledger holds nothing for a job queue whose quota file says ``scheduler: AWS_BATCH`` (the allocator hands
its tasks to AWS Batch), so these commands ask AWS Batch, through the amazon provider's Batch hook and an
Airflow AWS connection: GetJobQueueSnapshot for the capacity in use and the front of each quota share,
ListServiceJobs for the queue's jobs, DescribeServiceJob for one job (``airflow quota jobs describe``). Every
document made here says ``"scheduledBy": "AWS_BATCH"``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_quota.ledger.aws_job_fields import PREEMPTED_ATTEMPT_FIELDS
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
    """A boto3 Batch client of the Airflow AWS connection ``aws_conn_id`` (``BatchServiceJobHook``), with
    ``config`` (a botocore ``Config`` or its dict: timeouts, retries) when given."""
    from airflow_quota.hooks.batch_service_job import BatchServiceJobHook

    return BatchServiceJobHook(aws_conn_id=aws_conn_id, config=config).conn


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


#: DescribeServiceJob's times (epoch milliseconds), given as ISO 8601 (UTC) like every time of the CLI's JSON.
_TIMES = ("createdAt", "scheduledAt", "startedAt", "stoppedAt")


def service_job_report(described: dict[str, Any]) -> dict[str, Any]:
    """A DescribeServiceJob answer as ``airflow quota jobs describe -o json`` prints it: AWS Batch's document,
    with the fields the ledger's job JSON has (``cli.jobs.job_report``) in its names and shapes first:
    ``jobQueue`` the queue's name (``jobQueueArn`` as AWS gave it), ``submittedAt`` (AWS's ``createdAt``),
    ``capacityUnit`` and ``instanceCount`` (the training job request's ``ResourceConfig``), times as ISO 8601,
    ``capacityUsage`` with whole quantities, ``preemptionSummary`` with every field of the ledger's (a
    preempted attempt's ``attempt`` is its place in ``attempts``, 1 first; ``lastPreemptedAt`` the latest
    one's ``stoppedAt``; who preempted it is in its ``statusReason``, AWS Batch names no job: ``preemptedBy``
    and ``rule`` are null). Each of ``attempts`` gets its ``attempt`` number; ``trainingJobArn`` is the latest
    attempt's. Marked ``"scheduledBy": "AWS_BATCH"``."""
    answer = {key: value for key, value in described.items() if key != "ResponseMetadata"}
    attempts = [
        {"attempt": number, **_attempt_times(attempt)}
        for number, attempt in enumerate(answer.get("attempts") or [], start=1)
    ]
    number_of = {_resource_arn(attempt): attempt["attempt"] for attempt in attempts}
    summary = answer.get("preemptionSummary") or {}
    preempted = [
        {
            **dict.fromkeys(PREEMPTED_ATTEMPT_FIELDS),
            **_attempt_times(attempt),
            "attempt": number_of.get(_resource_arn(attempt)),
        }
        for attempt in summary.get("recentPreemptedAttempts") or []
    ]
    queue = str(answer.get("jobQueue") or "")
    unit, count = _requested_capacity(answer.get("serviceRequestPayload"))
    report: dict[str, Any] = {
        "jobId": answer["jobId"],
        "jobName": answer.get("jobName"),
        "jobQueue": queue.rsplit("/", 1)[-1],
        "quotaShareName": answer.get("quotaShareName"),
        "status": answer.get("status"),
        "statusReason": answer.get("statusReason") or "",
        "schedulingPriority": answer.get("schedulingPriority"),
        "capacityUnit": unit,
        "instanceCount": count,
        "submittedAt": _iso(answer.get("createdAt")),
        "scheduledAt": _iso(answer.get("scheduledAt")),
        "startedAt": _iso(answer.get("startedAt")),
        "stoppedAt": _iso(answer.get("stoppedAt")),
        "capacityUsage": _usage(answer.get("capacityUsage")),
        "preemptionSummary": {
            "preemptedAttemptCount": summary.get("preemptedAttemptCount", 0),
            "recentPreemptedAttempts": preempted,
            "beingPreemptedBy": None,
            "lastPreemptedAt": max((a["stoppedAt"] for a in preempted if a["stoppedAt"]), default=None),
            "lastPreemptedBy": None,
            "lastPreemptionRule": None,
        },
        "jobArn": answer.get("jobArn"),
        "jobQueueArn": queue,
        "createdAt": _iso(answer.get("createdAt")),
        "attempts": attempts,
        "trainingJobArn": _resource_arn(answer.get("latestAttempt") or {}),
    }
    return {
        **report,
        **{key: value for key, value in answer.items() if key not in report and key not in _TIMES},
        "scheduledBy": SCHEDULED_BY_AWS_BATCH,
    }


def _attempt_times(attempt: dict[str, Any]) -> dict[str, Any]:
    return attempt | {
        "startedAt": _iso(attempt.get("startedAt")),
        "stoppedAt": _iso(attempt.get("stoppedAt")),
    }


def _resource_arn(attempt: dict[str, Any]) -> str | None:
    """The training job ARN an attempt ran (its ``serviceResourceId``), when it has one."""
    value = (attempt.get("serviceResourceId") or {}).get("value")
    return None if value is None else str(value)


def _requested_capacity(payload: Any) -> tuple[str | None, int | None]:
    """The instance type and count the service job asks for: its CreateTrainingJob request's
    ``ResourceConfig`` (none when the payload says otherwise)."""
    try:
        resources = json.loads(payload)["ResourceConfig"]
        count = resources.get("InstanceCount")
        return resources.get("InstanceType"), None if count is None else int(count)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None, None


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
