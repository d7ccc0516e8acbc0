"""The audit log: every decision and event, a page at a time."""

from __future__ import annotations

from typing import Annotated

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import APIRouter, Query
from pydantic import AfterValidator, StringConstraints

from airflow_quota.api import schemas
from airflow_quota.api.access import MAY_READ
from airflow_quota.api.routes.params import Offset, QueueFilter, ShareFilter, Since
from airflow_quota.api.schemas import JobId, without_nul
from airflow_quota.ledger.models import ID_LENGTH, AuditKind
from airflow_quota.ledger.views import DEFAULT_EVENTS, MAX_PAGE, audit_page

router = APIRouter()

#: A DAG id or run id, as the ledger's job columns hold it.
IdPart = Annotated[str, StringConstraints(max_length=ID_LENGTH), AfterValidator(without_nul)]


@router.get(
    "/events",
    tags=["read"],
    summary="The audit log, a page at a time, oldest first",
    description=(
        f"The newest `limit` events that match (default {DEFAULT_EVENTS}, at most {MAX_PAGE}) after skipping "
        "the `offset` newest, oldest first. Filters (all that are given): the job queue, the quota share, "
        "`jobId` (the job's events and those naming it as the other job, such as its preemptions of "
        "others), `dagId` and `runId` (the events of that DAG's or DAG run's jobs), `kind` (repeat it for "
        "several), `since`."
    ),
    dependencies=[MAY_READ],
)
def list_events(
    session: SessionDep,
    jobQueueName: QueueFilter = None,
    quotaShareName: ShareFilter = None,
    since: Since = None,
    jobId: Annotated[
        JobId | None, Query(description="Only this job's events, and those naming it as the other job")
    ] = None,
    dagId: Annotated[IdPart | None, Query(description="Only the events of this DAG's jobs")] = None,
    runId: Annotated[
        IdPart | None, Query(description="Only the events of this DAG run's jobs (with dagId: of that DAG)")
    ] = None,
    kind: Annotated[
        list[AuditKind] | None, Query(description="Only events of this kind (repeat for any of several)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="The newest N")] = DEFAULT_EVENTS,
    offset: Offset = 0,
) -> schemas.AuditEventList:
    rows = audit_page(
        session,
        job_queue_name=jobQueueName,
        quota_share_name=quotaShareName,
        since=since,
        job_id=jobId,
        dag_id=dagId,
        run_id=runId,
        kinds=None if not kind else [each.value for each in kind],
        limit=limit,
        offset=offset,
    )
    return schemas.AuditEventList(
        events=[
            schemas.AuditEvent(
                id=row.id,
                at=row.at,
                jobQueueName=row.job_queue_name,
                kind=row.kind,
                quotaShareName=row.quota_share_name,
                jobId=row.job_id,
                relatedJobId=row.related_job_id,
                rule=row.rule,
                message=row.message,
                details=row.details,
            )
            for row in rows
        ]
    )
