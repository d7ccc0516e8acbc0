"""The usage responses: each quota share's limits and usage, and each capacity unit laid out by owner."""

from __future__ import annotations

from fastapi import HTTPException, status
from sqlalchemy.orm import Session

from airflow_quota.api import schemas
from airflow_quota.aws_batch.queue_reports import SCHEDULED_BY_AWS_BATCH
from airflow_quota.engine.model import QueueState
from airflow_quota.ledger.models import JobQueueRow
from airflow_quota.ledger.queue_state import job_queue_names, load_queue_state
from airflow_quota.ledger.views import ShareUnitUsage, UnitUsage, queue_usage


def queue_states(session: Session, job_queue_name: str | None) -> list[QueueState]:
    """Every applied job queue, or only ``job_queue_name`` (404 when not applied), as the engine sees it."""
    names = job_queue_names(session)
    if job_queue_name is not None:
        if job_queue_name not in names:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                f"job queue {job_queue_name} is not applied (applied: {', '.join(names) or 'none'})",
            )
        names = [job_queue_name]
    return [load_queue_state(session, name) for name in names]


def scheduled_by_aws_batch(session: Session, job_queue_name: str) -> bool:
    """Whether the applied quota file says ``scheduler: AWS_BATCH`` for the job queue."""
    row = session.get(JobQueueRow, job_queue_name)
    return row is not None and row.scheduler == SCHEDULED_BY_AWS_BATCH


def queue_share_reports(session: Session, state: QueueState) -> list[schemas.QuotaShare]:
    """The job queue's quota shares: from the ledger, or read from AWS Batch when it schedules the queue."""
    from airflow_quota.api.aws_queue_reports import aws_share_reports

    reports = share_reports(state)
    return aws_share_reports(state, reports) if scheduled_by_aws_batch(session, state.queue.name) else reports


def share_report(session: Session, job_queue_name: str, share_name: str) -> schemas.QuotaShare:
    """One quota share; 404 when its job queue or the share is not applied (or, on a queue AWS Batch
    schedules, AWS Batch has no such share)."""
    for share in queue_share_reports(session, queue_states(session, job_queue_name)[0]):
        if share.quotaShareName == share_name:
            return share
    raise HTTPException(
        status.HTTP_404_NOT_FOUND, f"job queue {job_queue_name} has no quota share {share_name}"
    )


def share_reports(state: QueueState) -> list[schemas.QuotaShare]:
    """Each quota share of the job queue our allocator schedules, in quota-file order, with its usage per
    capacity unit."""
    units = queue_usage(state)
    reports = []
    for share in state.queue.shares:
        usage = [
            _share_unit_report(entry)
            for unit in units
            for entry in unit.shares
            if entry.quota_share_name == share.name
        ]
        reports.append(
            schemas.QuotaShare(
                jobQueueName=state.queue.name,
                quotaShareName=share.name,
                capacityLimits=[
                    schemas.CapacityLimit(capacityUnit=unit, maxCapacity=count)
                    for unit, count in share.capacity_limits.items()
                ],
                resourceSharingConfiguration=schemas.ResourceSharingConfiguration(
                    strategy=share.strategy.value, borrowLimit=share.borrow_limit if share.borrows else None
                ),
                preemptionConfiguration=schemas.PreemptionConfiguration(
                    inSharePreemption="ENABLED" if share.in_share_preemption else "DISABLED"
                ),
                state=share.state.value,
                scheduler="AIRFLOW",
                capacityUsage=[
                    schemas.CapacityUsage(capacityUnit=entry.capacityUnit, quantity=entry.used)
                    for entry in usage
                    if entry.used
                ],
                usage=usage,
            )
        )
    return reports


def _lendings(amounts: dict[str | None, int] | dict[str, int]) -> list[schemas.Lending]:
    return [schemas.Lending(quotaShareName=name, units=units) for name, units in amounts.items() if units]


def _share_unit_report(entry: ShareUnitUsage) -> schemas.ShareUnitUsage:
    return schemas.ShareUnitUsage(
        quotaShareName=entry.quota_share_name,
        capacityUnit=entry.capacity_unit,
        limit=entry.limit,
        ceiling=entry.ceiling,
        used=entry.used,
        own=entry.own,
        borrowed=entry.borrowed,
        borrowedFrom=_lendings(entry.borrowed_from),
        lent=entry.lent,
        lentTo=_lendings(entry.lent_to),
        idle=entry.idle,
        stopping=entry.stopping,
        running=entry.running_jobs,
        runnable=entry.runnable_jobs,
    )


def unit_report(unit: UnitUsage) -> schemas.UnitUsage:
    """One capacity unit of the job queue, laid out by owner."""
    return schemas.UnitUsage(
        capacityUnit=unit.capacity_unit,
        capacity=unit.capacity,
        unowned=unit.unowned,
        unownedLentTo=_lendings(unit.unowned_lent_to),
        unownedIdle=unit.unowned_idle,
        overdraft=unit.overdraft,
        quotaShares=[_share_unit_report(entry) for entry in unit.shares],
        stopping=unit.stopping,
        free=unit.free,
    )
