"""Timelines: a job queue's capacity over a window (who held which unit when, who waited), and one task
instance's own story (its waits, grants, preemptions and resumes). Built by ``ledger/timeline.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import APIRouter, HTTPException, Query, status
from pydantic import AfterValidator
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from airflow_quota.api import schemas
from airflow_quota.api.access import MAY_READ
from airflow_quota.api.job_reports import task_instance_path
from airflow_quota.api.routes.params import TaskIdPart
from airflow_quota.api.schemas import Name
from airflow_quota.ledger import timeline as ledger_timeline
from airflow_quota.ledger.configuration import applied_config
from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.queue_state import job_queue_names
from airflow_quota.ledger.timeline import QueueTimeline, TaskInstanceKey, queue_timeline
from airflow_quota.ledger.views import utc_time

router = APIRouter()


class Window(StrEnum):
    """How far back a timeline reaches from ``until``."""

    MINUTES_15 = "15m"
    HOUR = "1h"
    DAY = "1d"
    ALL = "all"


LENGTHS = {
    Window.MINUTES_15: timedelta(minutes=15),
    Window.HOUR: timedelta(hours=1),
    Window.DAY: timedelta(days=1),
}

Time = Annotated[datetime | None, AfterValidator(lambda at: at if at is None else utc_time(at))]
SinceParam = Annotated[
    Time, Query(description="The window's start, ISO-8601 (UTC when no zone); not with `window`")
]
UntilParam = Annotated[Time, Query(description="The window's end, ISO-8601 (UTC when no zone); default now")]
WindowParam = Annotated[
    Window | None,
    Query(description="The window's length before `until`: 15m, 1h, 1d, or all (since the first job)"),
]


def window_bounds(
    since: datetime | None, until: datetime | None, window: Window | None, default: Window
) -> tuple[datetime | None, datetime]:
    """The window asked for: ``since`` (None: from the first job) and ``until``; 422 saying what to change."""
    end = until or datetime.now(UTC)
    if since is not None and window is not None:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY,
            "give since or window, not both (window counts back from until)",
        )
    if since is not None:
        if since > end:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_ENTITY,
                f"since ({since.isoformat()}) is after until ({end.isoformat()}): give an earlier since",
            )
        return since, end
    chosen = window or default
    if chosen is Window.ALL:
        return None, end
    try:
        return end - LENGTHS[chosen], end
    except OverflowError:  # the window would start before 0001-01-01
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY,
            f"until ({end.isoformat()}) is less than the window ({chosen.value}) after the earliest time "
            "there is (0001-01-01T00:00:00): give a later until, a shorter window, or window=all",
        ) from None


@router.get(
    "/jobQueues/{jobQueueName}/timeline",
    tags=["read"],
    summary="A job queue's capacity over time: who held which unit, who waited",
    description=(
        "Per capacity unit, one row per unit of capacity, each bar a job's hold of it in one phase (RUNNING, "
        "or STOPPING after a preemption, with its preemptor), borrowed units marked; and each job's waiting "
        "periods. From the audit log. The window: `since`/`until`, or `window` (15m, 1h, 1d, all) back "
        "from `until` (default 1h back from now)."
    ),
    responses={404: {"model": schemas.ErrorDetail}, 422: {"model": schemas.ErrorDetail}},
    dependencies=[MAY_READ],
)
def job_queue_timeline(
    session: SessionDep,
    jobQueueName: Name,
    since: SinceParam = None,
    until: UntilParam = None,
    window: WindowParam = None,
) -> schemas.JobQueueTimeline:
    names = job_queue_names(session)
    if jobQueueName not in names:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"job queue {jobQueueName} is not applied (applied: {', '.join(names) or 'none'})",
        )
    start, end = window_bounds(since, until, window, Window.HOUR)
    return _report(session, queue_timeline(session, jobQueueName, start, end))


@router.get(
    "/taskInstances/timeline",
    tags=["read"],
    summary="One task instance's jobs over time: waits, grants, preemptions, resumes",
    description=(
        "The timeline of the jobs of every try of the task instance, per job queue they used (usually one). "
        "Default window: from its first submission."
    ),
    responses={404: {"model": schemas.ErrorDetail}, 422: {"model": schemas.ErrorDetail}},
    dependencies=[MAY_READ],
)
def task_instance_timeline(
    session: SessionDep,
    dagId: TaskIdPart,
    runId: TaskIdPart,
    taskId: TaskIdPart,
    mapIndex: Annotated[int, Query(ge=-1, le=2**31 - 1)] = -1,
    since: SinceParam = None,
    until: UntilParam = None,
    window: WindowParam = None,
) -> schemas.TaskInstanceTimeline:
    key = TaskInstanceKey(dagId, runId, taskId, mapIndex)
    queues = sorted(
        set(
            session.scalars(
                select(JobRow.job_queue_name).where(
                    JobRow.dag_id == dagId,
                    JobRow.run_id == runId,
                    JobRow.task_id == taskId,
                    JobRow.map_index == mapIndex,
                )
            )
        )
    )
    if not queues:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"task instance {dagId}/{runId}/{taskId}/{mapIndex} has no job in the quota ledger",
        )
    start, end = window_bounds(since, until, window, Window.ALL)
    if since is None and window is None:  # all of it: from the task instance's first submission
        start = session.scalar(
            select(func.min(JobRow.submitted_at)).where(
                JobRow.dag_id == dagId,
                JobRow.run_id == runId,
                JobRow.task_id == taskId,
                JobRow.map_index == mapIndex,
            )
        )
    timelines = [queue_timeline(session, queue, start, end, task_instance=key) for queue in queues]
    return schemas.TaskInstanceTimeline(timelines=[_report(session, timeline) for timeline in timelines])


def _report(session: Session, timeline: QueueTimeline) -> schemas.JobQueueTimeline:
    document = applied_config(session, timeline.job_queue_name) or {}
    return schemas.JobQueueTimeline(
        jobQueueName=timeline.job_queue_name,
        since=timeline.since,
        until=timeline.until,
        firstSubmittedAt=timeline.first_submitted_at,
        quotaShareNames=[share["quotaShareName"] for share in document.get("quotaShares", [])],
        units=[
            schemas.TimelineUnit(
                capacityUnit=unit.capacity_unit,
                capacity=unit.capacity,
                rows=unit.rows,
                devices=unit.devices,
                bars=[
                    schemas.TimelineBar(
                        jobId=bar.job_id,
                        quotaShareName=bar.quota_share_name,
                        schedulingPriority=bar.scheduling_priority,
                        capacityUnit=bar.capacity_unit,
                        row=bar.row,
                        borrowed=bar.borrowed,
                        attempt=bar.attempt,
                        phase=bar.phase.value,
                        startedAt=bar.start,
                        endedAt=bar.end,
                        endedBy=bar.ended_by,
                        preemptedBy=bar.preempted_by,
                        rule=bar.rule,
                        reason=bar.reason,
                        device=bar.device,
                        lostUnitSeconds=bar.lost_unit_seconds,
                        lostSince=bar.lost_since,
                    )
                    for bar in unit.bars
                ],
            )
            for unit in timeline.units
        ],
        jobs=[
            schemas.TimelineJob(
                jobId=job.row.job_id,
                jobName=job.row.job_name,
                quotaShareName=job.row.quota_share_name,
                schedulingPriority=job.row.scheduling_priority,
                capacityUnit=job.row.capacity_unit,
                instanceCount=job.row.instance_count,
                status=job.row.status,
                statusReason=job.row.status_reason,
                taskInstance=schemas.TaskInstanceLink(
                    dagId=job.row.dag_id,
                    runId=job.row.run_id,
                    taskId=job.row.task_id,
                    mapIndex=job.row.map_index,
                    tryNumber=job.row.try_number,
                    path=task_instance_path(
                        job.row.dag_id, job.row.run_id, job.row.task_id, job.row.map_index
                    ),
                ),
                waits=[
                    schemas.TimelineWait(startedAt=wait.start, endedAt=wait.end, reason=wait.reason)
                    for wait in job.waits
                ],
            )
            for job in timeline.jobs
        ],
        truncated=timeline.truncated,
        jobLimit=ledger_timeline.MAX_TIMELINE_JOBS,
    )
