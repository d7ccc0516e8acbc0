"""Job queues AWS Batch schedules, as the REST API and the page show them: read from AWS Batch.

The ledger holds no job of such a queue (``scheduler: AWS_BATCH`` in the quota file), so its shares, its
snapshot and its jobs are AWS Batch's: ListQuotaShares (the shares as AWS has them), GetJobQueueSnapshot (the
capacity in use per share, the front of each share) and ListServiceJobs, through the Airflow AWS connection
``aws_default`` (``aws_batch/queue_reports.py``, as ``airflow quota snapshot`` and ``jobs list`` read them).
Every answer says ``scheduler: AWS_BATCH``. When AWS Batch cannot be asked, the answer says why (``error``)
and shows what the ledger knows (the applied shares); the other queues are answered as usual.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from airflow_quota.api import schemas
from airflow_quota.aws_batch.queue_reports import (
    SCHEDULED_BY_AWS_BATCH,
    batch_client,
    queue_snapshot_from_aws,
    service_jobs_from_aws,
)
from airflow_quota.aws_batch.service_job_priority import queue_name_of
from airflow_quota.engine.model import QueueState

#: A page waits at most this long for AWS Batch (a few seconds, two tries), then shows why it could not.
CLIENT_CONFIG: dict[str, Any] = {"connect_timeout": 5, "read_timeout": 15, "retries": {"max_attempts": 2}}
#: Service-job statuses of unfinished and finished jobs (``finished`` of the jobs route).
OPEN_STATUSES = ("SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING")
FINISHED_STATUSES = ("SUCCEEDED", "FAILED")


def aws_client() -> Any:
    """A Batch client of the ``aws_default`` connection that gives up within seconds."""
    from botocore.config import Config

    return batch_client(config=Config(**CLIENT_CONFIG))


def unreadable(error: Exception) -> str:
    """Why AWS Batch gave no answer, and what to check."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return (
            f"AWS Batch refused ({details.get('Code')}: {details.get('Message')}): is the job queue there "
            "('airflow quota apply -f FILE --to-aws' creates it), and may the Airflow connection aws_default "
            "read it?"
        )
    return (
        f"AWS Batch could not be asked ({type(error).__name__}: {error}); check the Airflow connection "
        "aws_default"
    )


def aws_share_reports(state: QueueState, applied: list[schemas.QuotaShare]) -> list[schemas.QuotaShare]:
    """The quota shares of a queue AWS Batch schedules: as AWS Batch has them (ListQuotaShares), with the
    capacity each uses now (GetJobQueueSnapshot); the applied ones first, in quota-file order, then any
    other AWS has. When AWS Batch cannot be asked: the ``applied`` shares, with ``error``."""
    name = state.queue.name
    order = [share.name for share in state.queue.shares]
    try:
        client = aws_client()
        listed = [
            share
            for page in client.get_paginator("list_quota_shares").paginate(jobQueue=name)
            for share in page.get("quotaShares", [])
        ]
        snapshot = queue_snapshot_from_aws(client, name, order)
    except Exception as error:  # whatever AWS or the connection said: shown, the other queues go on
        message = unreadable(error)
        return [
            share.model_copy(update={"scheduler": SCHEDULED_BY_AWS_BATCH, "usage": [], "error": message})
            for share in applied
        ]
    usage = {share["quotaShareName"]: share["capacityUsage"] for share in snapshot["quotaShares"]}
    position = {share_name: index for index, share_name in enumerate(order)}
    listed.sort(key=lambda share: position.get(share["quotaShareName"], len(order)))
    return [_share_report(name, share, usage.get(share["quotaShareName"], [])) for share in listed]


def _share_report(
    job_queue_name: str, share: dict[str, Any], usage: list[dict[str, Any]]
) -> schemas.QuotaShare:
    sharing = share.get("resourceSharingConfiguration") or {}
    return schemas.QuotaShare(
        jobQueueName=job_queue_name,
        quotaShareName=share["quotaShareName"],
        capacityLimits=[
            schemas.CapacityLimit(capacityUnit=limit["capacityUnit"], maxCapacity=limit["maxCapacity"])
            for limit in share.get("capacityLimits", [])
        ],
        resourceSharingConfiguration=schemas.ResourceSharingConfiguration(
            strategy=sharing.get("strategy", ""), borrowLimit=sharing.get("borrowLimit")
        ),
        preemptionConfiguration=schemas.PreemptionConfiguration(
            inSharePreemption=(share.get("preemptionConfiguration") or {}).get("inSharePreemption", "")
        ),
        state=share.get("state", ""),
        scheduler=SCHEDULED_BY_AWS_BATCH,
        capacityUsage=[schemas.CapacityUsage(**each) for each in usage],
        usage=[],
    )


def aws_snapshot(job_queue_name: str, share_names: list[str]) -> schemas.JobQueueSnapshot:
    """GetJobQueueSnapshot of a queue AWS Batch schedules, in the snapshot route's shape (``capacity`` is
    empty: AWS gives the capacity in use per share, not who lends to whom)."""
    now = datetime.now(UTC)
    try:
        snapshot = queue_snapshot_from_aws(aws_client(), job_queue_name, share_names)
    except Exception as error:
        return _empty_snapshot(job_queue_name, now, unreadable(error))
    fronts = {
        share["quotaShareName"]: [
            schemas.FrontJob(
                jobArn=job["jobArn"],
                quotaShareName=share["quotaShareName"],
                position=job["position"],
                schedulingPriority=None,
                capacityUnit=None,
                instanceCount=None,
                statusReason=None,
                earliestTimeAtPosition=job["earliestTimeAtPosition"],
            )
            for job in share["frontOfQueue"]
        ]
        for share in snapshot["quotaShares"]
    }
    updated = snapshot["lastUpdatedAt"] or now
    queue_front = sorted(
        (job for jobs in fronts.values() for job in jobs),
        key=lambda job: job.earliestTimeAtPosition or now,
    )
    return schemas.JobQueueSnapshot(
        jobQueueName=job_queue_name,
        scheduler=SCHEDULED_BY_AWS_BATCH,
        frontOfQueue=schemas.FrontOfQueue(jobs=queue_front, lastUpdatedAt=updated),
        frontOfQuotaShares=schemas.FrontOfQuotaShares(quotaShares=fronts, lastUpdatedAt=updated),
        queueUtilization=schemas.QueueUtilization(
            quotaShareUtilization=schemas.QuotaShareUtilization(
                topCapacityUtilization=[
                    schemas.ShareCapacityUtilization(
                        quotaShareName=share["quotaShareName"],
                        capacityUsage=[schemas.CapacityUsage(**each) for each in share["capacityUsage"]],
                    )
                    for share in snapshot["quotaShares"]
                ]
            ),
            totalCapacityUsage=[schemas.CapacityUsage(**each) for each in snapshot["capacityUsage"]],
            lastUpdatedAt=updated,
        ),
        capacity=[],
    )


def _empty_snapshot(job_queue_name: str, now: datetime, error: str) -> schemas.JobQueueSnapshot:
    return schemas.JobQueueSnapshot(
        jobQueueName=job_queue_name,
        scheduler=SCHEDULED_BY_AWS_BATCH,
        error=error,
        frontOfQueue=schemas.FrontOfQueue(jobs=[], lastUpdatedAt=now),
        frontOfQuotaShares=schemas.FrontOfQuotaShares(quotaShares={}, lastUpdatedAt=now),
        queueUtilization=schemas.QueueUtilization(
            quotaShareUtilization=schemas.QuotaShareUtilization(topCapacityUtilization=[]),
            totalCapacityUsage=[],
            lastUpdatedAt=now,
        ),
        capacity=[],
    )


def aws_service_jobs(
    job_queue_name: str,
    *,
    statuses: tuple[str, ...],
    quota_share_name: str | None,
    limit: int,
    region_name: str | None = None,
) -> schemas.ServiceJobList:
    """The queue's service jobs of ``statuses`` (ListServiceJobs), newest first, at most ``limit``."""
    try:
        client = aws_client()
        jobs = [
            job
            for status in statuses
            for job in service_jobs_from_aws(
                client, job_queue_name, status=status, quota_share_name=quota_share_name, limit=limit
            )
        ]
    except Exception as error:
        return schemas.ServiceJobList(jobQueueName=job_queue_name, jobs=[], error=unreadable(error))
    jobs.sort(key=lambda job: job["createdAt"] or "", reverse=True)
    region = region_name or client.meta.region_name
    return schemas.ServiceJobList(
        jobQueueName=job_queue_name, jobs=[_listed_job(job, region) for job in jobs[:limit]]
    )


def _listed_job(job: dict[str, Any], region: str | None) -> schemas.ServiceJob:
    arn = job["trainingJobArn"]
    return schemas.ServiceJob(
        jobId=job["jobId"],
        jobArn=job.get("jobArn") or "",
        jobName=job["jobName"],
        jobQueueName=job["jobQueue"],
        quotaShareName=job["quotaShareName"],
        status=job["status"],
        statusReason=job["statusReason"],
        schedulingPriority=None,
        capacityUsage=[schemas.CapacityUsage(**each) for each in job["capacityUsage"]],
        createdAt=job["createdAt"],
        scheduledAt=job["scheduledAt"],
        startedAt=job["startedAt"],
        stoppedAt=job["stoppedAt"],
        isTerminated=job["isTerminated"],
        latestAttempt={"serviceResourceId": {"name": "TrainingJobArn", "value": arn}} if arn else None,
        preemptionSummary=None,
        trainingJob=training_job(arn, region, finished=job["status"] in FINISHED_STATUSES),
    )


def service_jobs_of_task_instance(
    job_queue_names: list[str], dag_id: str, run_id: str, task_id: str, map_index: int
) -> schemas.TaskInstanceServiceJobs:
    """The service jobs the operator submitted for a task instance (named by its task key, the same for
    every try) in the queues AWS Batch schedules, each as DescribeServiceJob answers it, newest first."""
    from airflow_quota.backends.sagemaker import TaskIdentity
    from airflow_quota.hooks.batch_service_job import service_jobs_named

    job_name = TaskIdentity(dag_id, run_id, task_id, map_index, 1).task_key
    found: list[dict[str, Any]] = []
    errors: list[str] = []
    try:
        client = aws_client()
    except Exception as error:
        return schemas.TaskInstanceServiceJobs(jobs=[], errors=[unreadable(error)])
    for name in job_queue_names:
        try:
            found += [
                dict(client.describe_service_job(jobId=job["jobId"]))
                for job in service_jobs_named(client, name, job_name)  # every page
            ]
        except Exception as error:
            errors.append(f"job queue {name}: {unreadable(error)}")
    found.sort(key=lambda job: job.get("createdAt") or 0, reverse=True)
    region = client.meta.region_name
    return schemas.TaskInstanceServiceJobs(jobs=[described_job(job, region) for job in found], errors=errors)


def described_job(described: dict[str, Any], region: str | None) -> schemas.ServiceJob:
    """A DescribeServiceJob answer in the REST API's words (times as ISO 8601)."""
    arn = ((described.get("latestAttempt") or {}).get("serviceResourceId") or {}).get("value")
    summary = described.get("preemptionSummary")
    return schemas.ServiceJob(
        jobId=described["jobId"],
        jobArn=described.get("jobArn") or "",
        jobName=described.get("jobName"),
        jobQueueName=queue_name_of(str(described.get("jobQueue", ""))),
        quotaShareName=described.get("quotaShareName"),
        status=described.get("status", ""),
        statusReason=described.get("statusReason") or "",
        schedulingPriority=described.get("schedulingPriority"),
        capacityUsage=[
            schemas.CapacityUsage(
                capacityUnit=each["capacityUnit"],
                quantity=int(each["quantity"]) if float(each["quantity"]).is_integer() else each["quantity"],
            )
            for each in described.get("capacityUsage") or []
        ],
        createdAt=_time(described.get("createdAt")),
        scheduledAt=_time(described.get("scheduledAt")),
        startedAt=_time(described.get("startedAt")),
        stoppedAt=_time(described.get("stoppedAt")),
        isTerminated=described.get("isTerminated"),
        latestAttempt=described.get("latestAttempt"),
        preemptionSummary=None
        if summary is None
        else {
            "preemptedAttemptCount": summary.get("preemptedAttemptCount", 0),
            "recentPreemptedAttempts": [
                {
                    **attempt,
                    "startedAt": _iso(attempt.get("startedAt")),
                    "stoppedAt": _iso(attempt.get("stoppedAt")),
                }
                for attempt in summary.get("recentPreemptedAttempts", [])
            ],
        },
        trainingJob=training_job(arn, region, finished=described.get("status") in FINISHED_STATUSES),
    )


def training_job(arn: str | None, region: str | None, *, finished: bool) -> schemas.TrainingJob | None:
    """The SageMaker training job an attempt ran (``arn:...:training-job/<name>``), with its console link."""
    from airflow_quota.api.job_reports import sagemaker_console_url

    if not arn:
        return None
    name = arn.rsplit("/", 1)[-1]
    arn_region = arn.split(":")[3] if arn.count(":") >= 5 else None
    return schemas.TrainingJob(
        backend="sagemaker",
        name=name,
        state="ended" if finished else "launched",
        consoleUrl=sagemaker_console_url(name, arn_region or region),
        arn=arn,
    )


def _time(epoch_ms: Any) -> datetime | None:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC) if epoch_ms else None


def _iso(epoch_ms: Any) -> str | None:
    at = _time(epoch_ms)
    return None if at is None else at.isoformat()
