"""Jobs: a page of them, one job, and an administrator's changes to one (its priority, terminating it)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy.orm import Session

from airflow_quota.api import schemas
from airflow_quota.api.access import MAY_CHANGE, MAY_READ
from airflow_quota.api.aws_queue_reports import (
    FINISHED_STATUSES,
    OPEN_STATUSES,
    aws_client,
    aws_service_jobs,
    described_job,
    service_jobs_of_task_instance,
    unreadable,
)
from airflow_quota.api.job_reports import job_reports
from airflow_quota.api.routes.params import Offset, QueueFilter, ShareFilter, TaskIdPart
from airflow_quota.api.routes.strict_json import StrictJsonRoute
from airflow_quota.api.schemas import JobId, Name
from airflow_quota.api.usage_reports import queue_states, scheduled_by_aws_batch
from airflow_quota.aws_batch.queue_reports import aws_scheduled_queues
from airflow_quota.aws_batch.service_job_priority import (
    ServiceJobError,
    ServiceJobReferenceError,
    change_priority,
    find_service_job,
    terminate_service_job,
)
from airflow_quota.engine.model import JobStatus
from airflow_quota.ledger.job_rows import FINAL_STATUSES
from airflow_quota.ledger.lifecycle import record_priority_change, record_termination
from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.queue_state import load_queue_state
from airflow_quota.ledger.views import DEFAULT_JOBS, MAX_PAGE, finished_job_page, job_page

STATUSES = [status.value for status in JobStatus]

router = APIRouter(route_class=StrictJsonRoute)


class JobOrder(StrEnum):
    """How a page of jobs is chosen and ordered."""

    #: The newest by submission, shown in submission order (oldest first).
    SUBMITTED_AT = "submittedAt"
    #: Finished jobs alone, by when they finished, latest first.
    STOPPED_AT = "stoppedAt"


@router.get(
    "/jobs",
    tags=["read"],
    summary="Jobs, a page at a time, in submission order (or finished jobs by finish time)",
    description=(
        f"The newest `limit` jobs that match (default {DEFAULT_JOBS}, at most {MAX_PAGE}) after skipping the "
        "`offset` newest, in submission order; `total` counts every match (null when over 10,000). "
        "`orderBy=stoppedAt`: finished jobs alone (SUCCEEDED, FAILED), the `limit` that finished latest "
        "after the `offset` latest, latest first. Filtered, ordered and cut by the database, on indexes."
    ),
    responses={422: {"model": schemas.ErrorDetail}},
    dependencies=[MAY_READ],
)
def list_jobs(
    session: SessionDep,
    jobQueueName: QueueFilter = None,
    quotaShareName: ShareFilter = None,
    status_: Annotated[
        str | None,
        Query(alias="status", max_length=20, description=f"Only this status: {', '.join(STATUSES)}"),
    ] = None,
    finished: Annotated[
        bool | None, Query(description="true: only SUCCEEDED and FAILED jobs; false: only the others")
    ] = None,
    limit: Annotated[
        int, Query(ge=1, le=MAX_PAGE, description="The newest N (by submission, or by finish with orderBy)")
    ] = DEFAULT_JOBS,
    offset: Offset = 0,
    orderBy: Annotated[
        JobOrder,
        Query(
            description="submittedAt (default): the newest by submission, oldest first; stoppedAt: finished "
            "jobs alone, by when they finished, latest first"
        ),
    ] = JobOrder.SUBMITTED_AT,
) -> schemas.JobList:
    statuses = set(STATUSES)
    if status_ is not None:
        if status_.upper() not in STATUSES:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_ENTITY,
                f"status {status_!r} is not a job status (one of {', '.join(STATUSES)})",
            )
        statuses = {status_.upper()}
    if finished is not None:
        statuses = {wanted for wanted in statuses if (wanted in FINAL_STATUSES) == finished}
    if orderBy is JobOrder.STOPPED_AT:
        if finished is False or (status_ is not None and status_.upper() not in FINAL_STATUSES):
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_ENTITY,
                "orderBy=stoppedAt lists finished jobs (SUCCEEDED, FAILED), by when they finished: leave out "
                "finished=false and any other status",
            )
        finished_page = finished_job_page(
            session,
            job_queue_name=jobQueueName,
            quota_share_name=quotaShareName,
            statuses=statuses & set(FINAL_STATUSES),
            limit=limit,
            offset=offset,
        )
        return schemas.JobList(
            jobs=job_reports(session, finished_page.rows),
            total=finished_page.total,
            limit=limit,
            offset=offset,
        )
    page = job_page(
        session,
        job_queue_name=jobQueueName,
        quota_share_name=quotaShareName,
        statuses=None if statuses == set(STATUSES) else statuses,
        limit=limit,
        offset=offset,
    )
    return schemas.JobList(jobs=job_reports(session, page.rows), total=page.total, limit=limit, offset=offset)


@router.get(
    "/jobs/{jobId:path}",
    tags=["read"],
    summary="One job",
    description=(
        "The job id is dag_id/run_id/task_id/map_index/try_number (its slashes need no escaping). A job of a "
        "queue AWS Batch schedules (its service job id, ARN or job name) is read from AWS Batch "
        "(DescribeServiceJob): its ServiceJob, with its schedulingPriority and preemptionSummary."
    ),
    responses={
        404: {"model": schemas.ErrorDetail},
        502: {"model": schemas.ErrorDetail, "description": "AWS Batch refused, or could not be asked"},
    },
    dependencies=[MAY_READ],
)
def get_job(session: SessionDep, jobId: JobId) -> schemas.Job | schemas.ServiceJob:
    aws_queues = aws_scheduled_queues(session)
    if aws_queues and session.get(JobRow, jobId) is None:
        client, described = _service_job(jobId, aws_queues)
        return described_job(described, client.meta.region_name)
    return job_reports(session, [_job_row(session, jobId)])[0]


@router.post(
    "/jobs/update-priority",
    tags=["write"],
    summary="Change a job's schedulingPriority",
    description=(
        "Audited (PRIORITY_CHANGED, old and new). The allocator applies it from its next cycle. A job of a "
        "queue AWS Batch schedules (`jobId` its service job id, ARN or job name) is changed in AWS Batch "
        "(UpdateServiceJob): the answer is then its ServiceJob, read back from AWS Batch."
    ),
    responses={
        **schemas.WRITE_ERRORS,
        502: {"model": schemas.ErrorDetail, "description": "AWS Batch refused"},
    },
    dependencies=[MAY_CHANGE],
)
def update_job_priority(
    session: SessionDep, body: schemas.PriorityUpdate
) -> schemas.Job | schemas.ServiceJob:
    aws_queues = aws_scheduled_queues(session)
    if aws_queues and session.get(JobRow, body.jobId) is None:
        priority, now = body.schedulingPriority, datetime.now(UTC)
        return _change_service_job(
            session,
            body.jobId,
            aws_queues,
            lambda client, described: change_priority(session, client, described, priority, now),
        )
    row = _unfinished_job(session, body.jobId, "change its priority")
    state = load_queue_state(session, row.job_queue_name)
    record_priority_change(session, state, row.job_id, body.schedulingPriority, datetime.now(UTC))
    session.flush()
    return job_reports(session, [row])[0]


@router.post(
    "/jobs/terminate",
    tags=["write"],
    summary="Terminate a job",
    description=(
        "A waiting job is FAILED now; a granted one is stopped first (the allocator stops its task) and is "
        "FAILED once stopped. Audited (TERMINATED, with the reason). A job of a queue AWS Batch schedules "
        "(`jobId` its service job id, ARN or job name) is terminated by AWS Batch (TerminateServiceJob): "
        "the answer is then its ServiceJob, read back from AWS Batch."
    ),
    responses={
        **schemas.WRITE_ERRORS,
        502: {"model": schemas.ErrorDetail, "description": "AWS Batch refused"},
    },
    dependencies=[MAY_CHANGE],
)
def terminate_job(session: SessionDep, body: schemas.Termination) -> schemas.Job | schemas.ServiceJob:
    reason = body.reason.strip()
    if not reason:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "reason must say why the job is terminated")
    aws_queues = aws_scheduled_queues(session)
    if aws_queues and session.get(JobRow, body.jobId) is None:
        now = datetime.now(UTC)
        return _change_service_job(
            session,
            body.jobId,
            aws_queues,
            lambda client, described: terminate_service_job(session, client, described, reason, now),
        )
    row = _unfinished_job(session, body.jobId, "terminate it")
    state = load_queue_state(session, row.job_queue_name)
    record_termination(session, state, row.job_id, datetime.now(UTC), reason)
    session.flush()
    return job_reports(session, [row])[0]


def _change_service_job(
    session: Session,
    reference: str,
    aws_queues: list[str],
    change: Callable[[Any, dict[str, Any]], dict[str, Any]],
) -> schemas.ServiceJob:
    """The job is not in the ledger: a service job of a queue AWS Batch schedules, changed there by
    ``change`` (given the client and its DescribeServiceJob answer; it answers the job after). A refusal
    of ours is a 409, AWS Batch's (or no answer) a 502: nothing was changed."""
    client, described = _service_job(reference, aws_queues)
    try:
        after = change(client, described)
    except ServiceJobError as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from error
    except Exception as error:  # AWS Batch refused, or could not be asked: nothing was changed
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, unreadable(error)) from error
    session.flush()
    return described_job(after, client.meta.region_name)


@router.get(
    "/taskInstances/serviceJobs",
    tags=["read"],
    summary="One task instance's AWS Batch service jobs (queues AWS Batch schedules)",
    description=(
        "The service jobs the operator submitted for the task instance (every try shares one, named by the "
        "task key) in the job queues AWS Batch schedules, from ListServiceJobs and DescribeServiceJob, "
        "newest first; `errors` names each queue AWS Batch could not answer for. Empty when no queue is AWS "
        "Batch's."
    ),
    dependencies=[MAY_READ],
)
def task_instance_service_jobs(
    session: SessionDep,
    dagId: TaskIdPart,
    runId: TaskIdPart,
    taskId: TaskIdPart,
    mapIndex: Annotated[int, Query(ge=-1, le=2**31 - 1)] = -1,
) -> schemas.TaskInstanceServiceJobs:
    aws_queues = aws_scheduled_queues(session)
    if not aws_queues:
        return schemas.TaskInstanceServiceJobs(jobs=[], errors=[])
    return service_jobs_of_task_instance(aws_queues, dagId, runId, taskId, mapIndex)


def _service_job(reference: str, aws_queues: list[str]) -> tuple[Any, dict[str, Any]]:
    """A Batch client and the DescribeServiceJob answer of the job ``reference`` names in the queues AWS
    Batch schedules; 404 when there is none, 409 when its name is ambiguous, 422 when it is an ARN of
    another resource type, 502 when AWS cannot answer."""
    try:
        client = aws_client()
        described = find_service_job(client, reference, aws_queues)
    except ServiceJobReferenceError as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, str(error)) from error
    except ServiceJobError as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from error
    except Exception as error:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, unreadable(error)) from error
    if described is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no job {reference} is in the quota ledger, nor in the job queues AWS Batch schedules "
            f"({', '.join(aws_queues)})",
        )
    return client, described


@router.get(
    "/jobQueues/{jobQueueName}/serviceJobs",
    tags=["read"],
    summary="A job queue AWS Batch schedules: its service jobs, read from AWS Batch",
    description=(
        "ListServiceJobs of the queue, newest first, at most `limit`: unfinished ones by default "
        "(`finished=true`: SUCCEEDED and FAILED ones). `error` says why AWS Batch could not be asked. A "
        "queue our allocator schedules has its jobs at `/jobs`: 409."
    ),
    responses={404: {"model": schemas.ErrorDetail}, 409: {"model": schemas.ErrorDetail}},
    dependencies=[MAY_READ],
)
def list_service_jobs(
    session: SessionDep,
    jobQueueName: Name,
    quotaShareName: ShareFilter = None,
    finished: Annotated[bool, Query(description="true: only SUCCEEDED and FAILED jobs")] = False,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="The newest N")] = DEFAULT_JOBS,
) -> schemas.ServiceJobList:
    queue_states(session, jobQueueName)  # 404 when not applied
    if not scheduled_by_aws_batch(session, jobQueueName):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"job queue {jobQueueName} is scheduled by our allocator: its jobs are at /jobs?jobQueueName=...",
        )
    return aws_service_jobs(
        jobQueueName,
        statuses=FINISHED_STATUSES if finished else OPEN_STATUSES,
        quota_share_name=quotaShareName,
        limit=limit,
    )


def _job_row(session: Session, job_id: str) -> JobRow:
    row = session.get(JobRow, job_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id} is in the quota ledger")
    return row


def _unfinished_job(session: Session, job_id: str, action: str) -> JobRow:
    row = _job_row(session, job_id)
    if row.status in FINAL_STATUSES:
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"job {job_id} has already finished ({row.status}): cannot {action}"
        )
    return row
