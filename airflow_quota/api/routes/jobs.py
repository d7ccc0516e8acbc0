"""Jobs: a page of them, one job, and an administrator's changes to one (its priority, terminating it)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy.orm import Session

from airflow_quota.api import schemas
from airflow_quota.api.access import MAY_CHANGE, MAY_READ
from airflow_quota.api.job_reports import job_reports
from airflow_quota.api.routes.params import Offset, QueueFilter, ShareFilter
from airflow_quota.api.schemas import JobId
from airflow_quota.engine.model import JobStatus
from airflow_quota.ledger.job_rows import FINAL_STATUSES
from airflow_quota.ledger.lifecycle import record_priority_change, record_termination
from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.queue_state import load_queue_state
from airflow_quota.ledger.views import DEFAULT_JOBS, MAX_PAGE, job_page

STATUSES = [status.value for status in JobStatus]

router = APIRouter()


@router.get(
    "/jobs",
    tags=["read"],
    summary="Jobs, a page at a time, in submission order",
    description=(
        f"The newest `limit` jobs that match (default {DEFAULT_JOBS}, at most {MAX_PAGE}) after skipping the "
        "`offset` newest, in submission order; `total` counts every match (null when over 10,000). "
        "Filtered, ordered and cut by the database, on indexes."
    ),
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
        int, Query(ge=1, le=MAX_PAGE, description="The newest N (by submission)")
    ] = DEFAULT_JOBS,
    offset: Offset = 0,
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
    description="The job id is dag_id/run_id/task_id/map_index/try_number (its slashes need no escaping).",
    responses={404: {"model": schemas.ErrorDetail}},
    dependencies=[MAY_READ],
)
def get_job(session: SessionDep, jobId: JobId) -> schemas.Job:
    return job_reports(session, [_job_row(session, jobId)])[0]


@router.post(
    "/jobs/update-priority",
    tags=["write"],
    summary="Change a job's schedulingPriority",
    description="Audited (PRIORITY_CHANGED, old and new). The allocator applies it from its next cycle.",
    responses=schemas.WRITE_ERRORS,
    dependencies=[MAY_CHANGE],
)
def update_job_priority(session: SessionDep, body: schemas.PriorityUpdate) -> schemas.Job:
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
        "FAILED once stopped. Audited (TERMINATED, with the reason)."
    ),
    responses=schemas.WRITE_ERRORS,
    dependencies=[MAY_CHANGE],
)
def terminate_job(session: SessionDep, body: schemas.Termination) -> schemas.Job:
    reason = body.reason.strip()
    if not reason:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "reason must say why the job is terminated")
    row = _unfinished_job(session, body.jobId, "terminate it")
    state = load_queue_state(session, row.job_queue_name)
    record_termination(session, state, row.job_id, datetime.now(UTC), reason)
    session.flush()
    return job_reports(session, [row])[0]


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
