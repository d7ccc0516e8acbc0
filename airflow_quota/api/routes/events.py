"""The audit log: every decision and event, a page at a time."""

from __future__ import annotations

from typing import Annotated

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import APIRouter, Query

from airflow_quota.api import schemas
from airflow_quota.api.access import MAY_READ
from airflow_quota.api.routes.params import Offset, QueueFilter, ShareFilter, Since
from airflow_quota.ledger.views import DEFAULT_EVENTS, MAX_PAGE, audit_page

router = APIRouter()


@router.get(
    "/events",
    tags=["read"],
    summary="The audit log, a page at a time, oldest first",
    description=(
        f"The newest `limit` events that match (default {DEFAULT_EVENTS}, at most {MAX_PAGE}) after skipping "
        "the `offset` newest, oldest first."
    ),
    dependencies=[MAY_READ],
)
def list_events(
    session: SessionDep,
    jobQueueName: QueueFilter = None,
    quotaShareName: ShareFilter = None,
    since: Since = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="The newest N")] = DEFAULT_EVENTS,
    offset: Offset = 0,
) -> schemas.AuditEventList:
    rows = audit_page(
        session,
        job_queue_name=jobQueueName,
        quota_share_name=quotaShareName,
        since=since,
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
