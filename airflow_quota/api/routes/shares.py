"""Quota shares: their limits and usage, and an administrator's change to one (applied like a quota file)."""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, HTTPException, status

from airflow_quota.api import schemas
from airflow_quota.api.access import MAY_CHANGE, MAY_READ
from airflow_quota.api.routes.params import QueueFilter
from airflow_quota.api.routes.strict_json import StrictJsonRoute
from airflow_quota.api.schemas import Name
from airflow_quota.api.usage_reports import (
    queue_share_reports,
    queue_states,
    scheduled_by_aws_batch,
    share_report,
)
from airflow_quota.engine.config import QuotaConfigError, parse_quota_config
from airflow_quota.ledger.configuration import applied_config, apply_quota_config
from airflow_quota.ledger.errors import ConfigApplyError
from airflow_quota.ledger.queue_state import job_queue_names

router = APIRouter(route_class=StrictJsonRoute)


@router.get(
    "/quotaShares",
    tags=["read"],
    summary="Quota shares with their limits and usage",
    description=(
        "In AWS Batch's DescribeQuotaShare nesting. Per capacity unit: own, borrowed (from whom), lent (to "
        "whom) and idle units; job counts. A job queue AWS Batch schedules (`scheduler: AWS_BATCH`): its "
        "shares as AWS Batch has them (ListQuotaShares) and the capacity each uses (GetJobQueueSnapshot)."
    ),
    dependencies=[MAY_READ],
)
def list_quota_shares(session: SessionDep, jobQueueName: QueueFilter = None) -> schemas.QuotaShareList:
    shares = [
        share
        for state in queue_states(session, jobQueueName)
        for share in queue_share_reports(session, state)
    ]
    return schemas.QuotaShareList(quotaShares=shares)


@router.get(
    "/quotaShares/{jobQueueName}/{quotaShareName}",
    tags=["read"],
    summary="One quota share",
    responses={404: {"model": schemas.ErrorDetail}},
    dependencies=[MAY_READ],
)
def get_quota_share(session: SessionDep, jobQueueName: Name, quotaShareName: Name) -> schemas.QuotaShare:
    return share_report(session, jobQueueName, quotaShareName)


@router.patch(
    "/quotaShares/{jobQueueName}/{quotaShareName}",
    tags=["write"],
    summary="Change a quota share",
    description=(
        "The fields given replace the applied ones. The whole configuration is then validated like a quota "
        "file (`airflow quota validate`) and applied like `airflow quota apply`: a new revision of the job "
        "queue, one CONFIG_CHANGED audit row, applied by the caller, source `REST API`. Invalid: 422 listing "
        "every problem, nothing changed. A job queue AWS Batch schedules: 409 (change the quota file and "
        "`airflow quota apply --to-aws`)."
    ),
    responses=schemas.WRITE_ERRORS,
    dependencies=[MAY_CHANGE],
)
def update_quota_share(
    session: SessionDep,
    user: GetUserDep,
    jobQueueName: Name,
    quotaShareName: Name,
    update: schemas.QuotaShareUpdate,
) -> schemas.QuotaShareUpdateResult:
    if scheduled_by_aws_batch(session, jobQueueName):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"job queue {jobQueueName} is scheduled by AWS Batch: change its quota share in the quota file "
            "and run 'airflow quota apply -f FILE --to-aws' (and 'airflow quota apply -f FILE')",
        )
    documents = [applied_config(session, name) for name in job_queue_names(session)]
    queues = [document for document in documents if document is not None]
    where = _find_share(queues, jobQueueName, quotaShareName)
    queue_index, share_index = where
    share_document = queues[queue_index]["quotaShares"][share_index]
    changes = update.model_dump(exclude_unset=True)
    if not changes:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY,
            "nothing to change: give at least one of capacityLimits, resourceSharingConfiguration, "
            "preemptionConfiguration, state",
        )
    share_document.update(changes)
    source = f"REST API (PATCH quotaShares/{jobQueueName}/{quotaShareName})"
    try:
        config = parse_quota_config({"jobQueues": queues}, source)
    except QuotaConfigError as error:
        prefix = f"jobQueues[{queue_index}].quotaShares[{share_index}]."
        problems = [
            {"path": issue.path.removeprefix(prefix), "message": issue.message} for issue in error.issues
        ]
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY,
            {
                "message": f"quota share {quotaShareName} was not changed: {len(problems)} problem(s)",
                "errors": problems,
            },
        ) from error
    try:
        applied = apply_quota_config(session, config, applied_by=_user_name(user), source=source)
    except ConfigApplyError as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from error
    session.flush()
    return schemas.QuotaShareUpdateResult(
        changes=[
            schemas.ConfigChangeResult(
                jobQueueName=change.job_queue_name,
                quotaShareName=change.quota_share_name,
                revision=change.revision,
                old=change.old,
                new=change.new,
            )
            for change in applied
        ],
        quotaShare=share_report(session, jobQueueName, quotaShareName),
    )


def _user_name(user: BaseUser) -> str:
    return f"{user.get_name()} (REST API)"


def _find_share(queues: list[dict[str, Any]], job_queue_name: str, share_name: str) -> tuple[int, int]:
    for queue_index, queue in enumerate(queues):
        if queue["jobQueueName"] != job_queue_name:
            continue
        for share_index, share in enumerate(queue["quotaShares"]):
            if share["quotaShareName"] == share_name:
                return queue_index, share_index
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"job queue {job_queue_name} has no quota share {share_name}"
        )
    raise HTTPException(status.HTTP_404_NOT_FOUND, f"job queue {job_queue_name} is not applied")
