"""The job queues as applied, and each one's snapshot (like AWS Batch's GetJobQueueSnapshot)."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import APIRouter
from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_quota.api import schemas
from airflow_quota.api.access import MAY_READ
from airflow_quota.api.aws_queue_reports import aws_snapshot
from airflow_quota.api.routes.timeline import SinceParam, UntilParam, Window, WindowParam, window_bounds
from airflow_quota.api.schemas import Name
from airflow_quota.api.usage_reports import queue_states, scheduled_by_aws_batch, unit_report
from airflow_quota.engine.model import QueueState
from airflow_quota.ledger.configuration import applied_config
from airflow_quota.ledger.models import JobQueueRow
from airflow_quota.ledger.views import LostWork, UnitUsage, lost_work, queue_usage, share_positions

#: How many RUNNABLE jobs the snapshot lists, in the queue and per share (AWS lists 100 in the queue).
FRONT_OF_QUEUE = 100
FRONT_OF_SHARE = 10

router = APIRouter()


@router.get(
    "/jobQueues",
    tags=["read"],
    summary="Job queues as applied",
    description="Each with `scheduler`: AIRFLOW (our allocator) or AWS_BATCH (AWS Batch schedules it).",
    dependencies=[MAY_READ],
)
def list_job_queues(session: SessionDep) -> schemas.JobQueueList:
    queues = []
    for row in session.scalars(select(JobQueueRow).order_by(JobQueueRow.job_queue_name)):
        document = applied_config(session, row.job_queue_name) or {}
        queues.append(
            schemas.JobQueue(
                jobQueueName=row.job_queue_name,
                capacityLimits=[schemas.CapacityLimit(**limit) for limit in row.capacity_limits],
                revision=row.revision,
                updatedAt=row.updated_at,
                quotaShareNames=[share["quotaShareName"] for share in document.get("quotaShares", [])],
                scheduler="AWS_BATCH" if row.scheduler == "AWS_BATCH" else "AIRFLOW",
            )
        )
    return schemas.JobQueueList(jobQueues=queues)


@router.get(
    "/jobQueues/{jobQueueName}/snapshot",
    tags=["read"],
    summary="Like AWS Batch's GetJobQueueSnapshot",
    description=(
        "The front of the queue and of each share, usage per share and unit, and each unit by owner. A job "
        "queue AWS Batch schedules: AWS Batch's own GetJobQueueSnapshot (the front of each share and the "
        "capacity in use; no unit laid out by owner), or `error` saying why AWS Batch could not be asked. "
        "`lostWork`: the work lost to the preemptions decided in a window, per unit and share; the window "
        "is the timeline's: `since`/`until`, or `window` (15m, 1h, 1d, all) back from `until` (default 1h "
        "back from now)."
    ),
    responses={404: {"model": schemas.ErrorDetail}, 422: {"model": schemas.ErrorDetail}},
    dependencies=[MAY_READ],
)
def job_queue_snapshot(
    session: SessionDep,
    jobQueueName: Name,
    since: SinceParam = None,
    until: UntilParam = None,
    window: WindowParam = None,
) -> schemas.JobQueueSnapshot:
    state = queue_states(session, jobQueueName)[0]
    lost_since, lost_until = window_bounds(since, until, window, Window.HOUR)
    if scheduled_by_aws_batch(session, jobQueueName):
        return aws_snapshot(jobQueueName, [share.name for share in state.queue.shares])
    now = datetime.now(UTC)
    positions = share_positions(state)
    waiting = sorted(
        (job for job in state.jobs.values() if job.job_id in positions),
        key=lambda job: (job.share_name, positions[job.job_id]),
    )
    per_share: dict[str, list[schemas.FrontJob]] = {share.name: [] for share in state.queue.shares}
    for job in waiting:
        per_share.setdefault(job.share_name, []).append(
            schemas.FrontJob(
                jobArn=job.job_id,
                quotaShareName=job.share_name,
                position=positions[job.job_id],
                schedulingPriority=job.priority,
                capacityUnit=job.unit,
                instanceCount=job.count,
                statusReason=job.status_reason,
            )
        )
    queue_front = sorted(
        (front for fronts in per_share.values() for front in fronts),
        key=lambda front: state.jobs[front.jobArn].submitted,
    )
    units = queue_usage(state)
    top = [
        schemas.ShareCapacityUtilization(
            quotaShareName=share.name,
            capacityUsage=[
                schemas.CapacityUsage(capacityUnit=entry.capacity_unit, quantity=entry.used)
                for unit in units
                for entry in unit.shares
                if entry.quota_share_name == share.name
            ],
        )
        for share in state.queue.shares
    ]
    total = [
        schemas.CapacityUsage(capacityUnit=unit.capacity_unit, quantity=sum(e.used for e in unit.shares))
        for unit in units
    ]
    return schemas.JobQueueSnapshot(
        jobQueueName=state.queue.name,
        scheduler="AIRFLOW",
        frontOfQueue=schemas.FrontOfQueue(jobs=queue_front[:FRONT_OF_QUEUE], lastUpdatedAt=now),
        frontOfQuotaShares=schemas.FrontOfQuotaShares(
            quotaShares={name: fronts[:FRONT_OF_SHARE] for name, fronts in per_share.items()},
            lastUpdatedAt=now,
        ),
        queueUtilization=schemas.QueueUtilization(
            quotaShareUtilization=schemas.QuotaShareUtilization(topCapacityUtilization=top),
            totalCapacityUsage=total,
            lastUpdatedAt=now,
        ),
        capacity=[unit_report(unit) for unit in units],
        lostWork=_lost_work_report(session, state, units, lost_since, lost_until),
    )


def _lost_work_report(
    session: Session,
    state: QueueState,
    units: list[UnitUsage],
    since: datetime | None,
    until: datetime,
) -> schemas.LostWork:
    """Per capacity unit of the queue, the work its preemptions in the window lost, and each share's: every
    share owning or using the unit (quota-file order), then any other share preempted on it."""
    found = lost_work(session, state.queue.name, since, until)
    share_order = {share.name: index for index, share in enumerate(state.queue.shares)}
    layout = {unit.capacity_unit: [entry.quota_share_name for entry in unit.shares] for unit in units}
    for unit_name, share_name in sorted(
        found, key=lambda key: (key[0], share_order.get(key[1], len(share_order)), key[1])
    ):
        names = layout.setdefault(unit_name, [])
        if share_name not in names:
            names.append(share_name)
    report = []
    for unit_name, share_names in layout.items():
        shares = [
            schemas.ShareLostWork(
                quotaShareName=name,
                lostUnitSeconds=(lost := found.get((unit_name, name), LostWork())).lost_unit_seconds,
                preemptions=lost.preemptions,
                unmeasured=lost.unmeasured,
            )
            for name in share_names
        ]
        report.append(
            schemas.UnitLostWork(
                capacityUnit=unit_name,
                lostUnitSeconds=round(sum(share.lostUnitSeconds for share in shares), 1),
                preemptions=sum(share.preemptions for share in shares),
                unmeasured=sum(share.unmeasured for share in shares),
                quotaShares=shares,
            )
        )
    return schemas.LostWork(since=since, until=until, units=report)
