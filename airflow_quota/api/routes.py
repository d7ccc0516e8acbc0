"""The REST API over the quota ledger, served by the Airflow api-server under ``/quota/api``.

Every route needs a user of Airflow's auth manager (a ``Bearer`` JWT from ``POST /auth/token``, or the UI's
session cookie): none gives 401. Quota shares are Airflow pools with lending, so the auth manager's pool
permissions decide: reading needs read access to pools (every role, viewers included), writing needs edit
access to pools (``Op`` and ``Admin``), else 403. Writes go through the same code as the CLI: a share
update is validated like a quota file and applied with ``apply_quota_config`` (a new revision, audited);
priority changes and terminations use the store's ``record_*`` helpers (audited). A refused write changes
nothing and says why (4xx).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import PoolDetails
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, HTTPException, Query, status
from pydantic import AfterValidator
from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from airflow_quota.api import schemas
from airflow_quota.api.schemas import JobId, Name
from airflow_quota.engine.config import QuotaConfigError, parse_quota_config
from airflow_quota.engine.model import JobStatus, QueueState
from airflow_quota.ledger.configuration import applied_config, apply_quota_config
from airflow_quota.ledger.errors import ConfigApplyError
from airflow_quota.ledger.job_rows import FINAL_STATUSES
from airflow_quota.ledger.lifecycle import record_priority_change, record_termination
from airflow_quota.ledger.models import JobQueueRow, JobRow
from airflow_quota.ledger.queue_state import job_queue_names, load_queue_state
from airflow_quota.ledger.views import (
    DEFAULT_EVENTS,
    DEFAULT_JOBS,
    MAX_OFFSET,
    MAX_PAGE,
    PreemptionNote,
    ShareUnitUsage,
    UnitUsage,
    audit_page,
    job_page,
    latest_preemptions,
    queue_usage,
    runnable_positions,
    share_positions,
    utc_time,
)
from airflow_quota.protocol import TRAINING_JOB_KEY

#: How many RUNNABLE jobs the snapshot lists, in the queue and per share (AWS lists 100 in the queue).
FRONT_OF_QUEUE = 100
FRONT_OF_SHARE = 10
STATUSES = [status.value for status in JobStatus]

#: Query parameters shared by the reading endpoints.
QueueFilter = Annotated[Name | None, Query(description="Only this job queue")]
ShareFilter = Annotated[Name | None, Query(description="Only this quota share")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Skip the newest N first (the next page)")]
Since = Annotated[
    datetime | None,
    Query(description="Only events at or after this ISO-8601 time (UTC when no zone)"),
    AfterValidator(lambda at: at if at is None else utc_time(at)),
]

Method = Literal["GET", "PUT"]


def _pool_access(method: Method) -> Callable[[BaseUser], BaseUser]:
    def check(user: GetUserDep) -> BaseUser:
        if not get_auth_manager().is_authorized_pool(method=method, user=user, details=PoolDetails()):
            action = "read" if method == "GET" else "change"
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"Forbidden: {action} access to pools is needed to {action} GPU quotas",
            )
        return user

    return check


Reader = Annotated[BaseUser, Depends(_pool_access("GET"))]
Writer = Annotated[BaseUser, Depends(_pool_access("PUT"))]

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": schemas.ErrorDetail, "description": "No credentials, or they expired"},
    403: {"model": schemas.ErrorDetail, "description": "The user lacks the permission"},
}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    404: {"model": schemas.ErrorDetail, "description": "No such job queue, share or job"},
    409: {"model": schemas.ErrorDetail, "description": "Not possible in the job's state; nothing changed"},
    422: {"model": schemas.ErrorDetail, "description": "Invalid input; nothing changed"},
}

router = APIRouter(responses=ERRORS)


# --- reading ------------------------------------------------------------------------------------------


@router.get("/jobQueues", tags=["read"], summary="Job queues as applied")
def list_job_queues(session: SessionDep, _: Reader) -> schemas.JobQueueList:
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
            )
        )
    return schemas.JobQueueList(jobQueues=queues)


@router.get(
    "/quotaShares",
    tags=["read"],
    summary="Quota shares with their limits and usage",
    description="Per capacity unit: own, borrowed (from whom), lent (to whom) and idle units; job counts.",
)
def list_quota_shares(
    session: SessionDep, _: Reader, jobQueueName: QueueFilter = None
) -> schemas.QuotaShareList:
    shares = [share for state in _states(session, jobQueueName) for share in _share_reports(session, state)]
    return schemas.QuotaShareList(quotaShares=shares)


@router.get(
    "/quotaShares/{jobQueueName}/{quotaShareName}",
    tags=["read"],
    summary="One quota share",
    responses={404: {"model": schemas.ErrorDetail}},
)
def get_quota_share(
    session: SessionDep,
    _: Reader,
    jobQueueName: Name,
    quotaShareName: Name,
) -> schemas.QuotaShare:
    return _share_report(session, jobQueueName, quotaShareName)


@router.get(
    "/jobs",
    tags=["read"],
    summary="Jobs, a page at a time, in submission order",
    description=(
        f"The newest `limit` jobs that match (default {DEFAULT_JOBS}, at most {MAX_PAGE}) after skipping the "
        "`offset` newest, in submission order; `total` counts every match (null when over 10,000). "
        "Filtered, ordered and cut by the database, on indexes."
    ),
)
def list_jobs(
    session: SessionDep,
    _: Reader,
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
    return schemas.JobList(
        jobs=_job_reports(session, page.rows), total=page.total, limit=limit, offset=offset
    )


@router.get(
    "/jobs/{jobId:path}",
    tags=["read"],
    summary="One job",
    description="The job id is dag_id/run_id/task_id/map_index/try_number (its slashes need no escaping).",
    responses={404: {"model": schemas.ErrorDetail}},
)
def get_job(session: SessionDep, _: Reader, jobId: JobId) -> schemas.Job:
    return _job_reports(session, [_job_row(session, jobId)])[0]


@router.get(
    "/events",
    tags=["read"],
    summary="The audit log, a page at a time, oldest first",
    description=(
        f"The newest `limit` events that match (default {DEFAULT_EVENTS}, at most {MAX_PAGE}) after skipping "
        "the `offset` newest, oldest first."
    ),
)
def list_events(
    session: SessionDep,
    _: Reader,
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


@router.get(
    "/jobQueues/{jobQueueName}/snapshot",
    tags=["read"],
    summary="Like AWS Batch's GetJobQueueSnapshot",
    description="The front of the queue and of each share, usage per share and unit, and each unit by owner.",
    responses={404: {"model": schemas.ErrorDetail}},
)
def job_queue_snapshot(session: SessionDep, _: Reader, jobQueueName: Name) -> schemas.JobQueueSnapshot:
    state = _states(session, jobQueueName)[0]
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
        capacity=[_unit_report(unit) for unit in units],
    )


# --- writing ------------------------------------------------------------------------------------------


@router.patch(
    "/quotaShares/{jobQueueName}/{quotaShareName}",
    tags=["write"],
    summary="Change a quota share",
    description=(
        "The fields given replace the applied ones. The whole configuration is then validated like a quota "
        "file (`airflow quota validate`) and applied like `airflow quota apply`: a new revision of the job "
        "queue, one CONFIG_CHANGED audit row, applied by the caller, source `REST API`. Invalid: 422 listing "
        "every problem, nothing changed."
    ),
    responses=WRITE_ERRORS,
)
def update_quota_share(
    session: SessionDep,
    user: Writer,
    jobQueueName: Name,
    quotaShareName: Name,
    update: schemas.QuotaShareUpdate,
) -> schemas.QuotaShareUpdateResult:
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
        quotaShare=_share_report(session, jobQueueName, quotaShareName),
    )


@router.post(
    "/jobs/update-priority",
    tags=["write"],
    summary="Change a job's schedulingPriority",
    description="Audited (PRIORITY_CHANGED, old and new). The allocator applies it from its next cycle.",
    responses=WRITE_ERRORS,
)
def update_job_priority(session: SessionDep, _: Writer, body: schemas.PriorityUpdate) -> schemas.Job:
    row = _unfinished_job(session, body.jobId, "change its priority")
    state = load_queue_state(session, row.job_queue_name)
    record_priority_change(session, state, row.job_id, body.schedulingPriority, datetime.now(UTC))
    session.flush()
    return _job_reports(session, [row])[0]


@router.post(
    "/jobs/terminate",
    tags=["write"],
    summary="Terminate a job",
    description=(
        "A waiting job is FAILED now; a granted one is stopped first (the allocator stops its task) and is "
        "FAILED once stopped. Audited (TERMINATED, with the reason)."
    ),
    responses=WRITE_ERRORS,
)
def terminate_job(session: SessionDep, _: Writer, body: schemas.Termination) -> schemas.Job:
    reason = body.reason.strip()
    if not reason:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, "reason must say why the job is terminated")
    row = _unfinished_job(session, body.jobId, "terminate it")
    state = load_queue_state(session, row.job_queue_name)
    record_termination(session, state, row.job_id, datetime.now(UTC), reason)
    session.flush()
    return _job_reports(session, [row])[0]


# --- helpers ------------------------------------------------------------------------------------------


def _user_name(user: BaseUser) -> str:
    return f"{user.get_name()} (REST API)"


def _states(session: Session, job_queue_name: str | None) -> list[QueueState]:
    names = job_queue_names(session)
    if job_queue_name is not None:
        if job_queue_name not in names:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                f"job queue {job_queue_name} is not applied (applied: {', '.join(names) or 'none'})",
            )
        names = [job_queue_name]
    return [load_queue_state(session, name) for name in names]


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


def _share_report(session: Session, job_queue_name: str, share_name: str) -> schemas.QuotaShare:
    for share in _share_reports(session, _states(session, job_queue_name)[0]):
        if share.quotaShareName == share_name:
            return share
    raise HTTPException(
        status.HTTP_404_NOT_FOUND, f"job queue {job_queue_name} has no quota share {share_name}"
    )


def _share_reports(session: Session, state: QueueState) -> list[schemas.QuotaShare]:
    units = queue_usage(state)
    reports = []
    for share in state.queue.shares:
        reports.append(
            schemas.QuotaShare(
                jobQueueName=state.queue.name,
                quotaShareName=share.name,
                strategy=share.strategy.value,
                borrowLimit=share.borrow_limit if share.borrows else None,
                inSharePreemption="ENABLED" if share.in_share_preemption else "DISABLED",
                state=share.state.value,
                capacityLimits=[
                    schemas.CapacityLimit(capacityUnit=unit, maxCapacity=count)
                    for unit, count in share.capacity_limits.items()
                ],
                usage=[
                    _share_unit_report(entry)
                    for unit in units
                    for entry in unit.shares
                    if entry.quota_share_name == share.name
                ],
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


def _unit_report(unit: UnitUsage) -> schemas.UnitUsage:
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


def _job_reports(session: Session, rows: list[JobRow]) -> list[schemas.Job]:
    waiting_queues = {row.job_queue_name for row in rows if row.status == JobStatus.RUNNABLE.value}
    positions = runnable_positions(session, waiting_queues)
    preemptions = latest_preemptions(
        session, [row.job_id for row in rows if row.preempted_attempt_count or row.preempted_by is not None]
    )
    training_jobs = _training_jobs(session, rows)
    return [
        _job_report(
            row, positions.get(row.job_id), preemptions.get(row.job_id), training_jobs.get(row.job_id)
        )
        for row in rows
    ]


def _job_report(
    row: JobRow,
    position: int | None,
    preemption: PreemptionNote | None,
    training_job: schemas.TrainingJob | None,
) -> schemas.Job:
    return schemas.Job(
        jobId=row.job_id,
        jobName=row.job_name,
        jobQueueName=row.job_queue_name,
        quotaShareName=row.quota_share_name,
        status=row.status,
        statusReason=row.status_reason,
        schedulingPriority=row.scheduling_priority,
        capacityUnit=row.capacity_unit,
        instanceCount=row.instance_count,
        position=position,
        submittedAt=row.submitted_at,
        startedAt=row.started_at,
        attempt=row.attempt,
        preemptionRetriesBeforeTermination=row.preemption_retries_before_termination,
        lease=schemas.Lease(
            capacityUnit=row.held_capacity_unit,
            instanceCount=row.held_instance_count,
            borrowed=row.borrowed_instance_count,
            devices=row.held_devices,
        ),
        preemptionSummary=schemas.PreemptionSummary(
            preemptedAttemptCount=row.preempted_attempt_count,
            recentPreemptedAttempts=[
                schemas.PreemptedAttempt(**attempt) for attempt in row.recent_preempted_attempts
            ],
            beingPreemptedBy=row.preempted_by if row.stop_cause == "PREEMPTED" else None,
            lastPreemptedAt=None if preemption is None else preemption.at,
            lastPreemptedBy=None if preemption is None else preemption.preempted_by,
            lastPreemptionRule=None if preemption is None else preemption.rule,
        ),
        taskInstance=schemas.TaskInstanceLink(
            dagId=row.dag_id,
            runId=row.run_id,
            taskId=row.task_id,
            mapIndex=row.map_index,
            tryNumber=row.try_number,
            path=task_instance_path(row.dag_id, row.run_id, row.task_id, row.map_index),
        ),
        trainingJob=training_job,
    )


def task_instance_path(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """The task instance's page in the Airflow 3 UI, relative to the UI's base URL."""
    path = f"dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id, safe='')}"
    return path if map_index < 0 else f"{path}/mapped/{map_index}"


def sagemaker_console_url(name: str, region: str | None) -> str:
    """The SageMaker training job's page in the AWS console."""
    if region:
        return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/jobs/{quote(name)}"
    return f"https://console.aws.amazon.com/sagemaker/home#/jobs/{quote(name)}"


def _training_jobs(session: Session, rows: list[JobRow]) -> dict[str, schemas.TrainingJob]:
    """Each job's training job: what the ledger has for its current attempt (the allocator copies it from the
    task's report), else the task's own record in its ``task_state_store`` (``protocol.TRAINING_JOB_KEY``)
    when that record is of this job; the record also gives the AWS region of the console link.
    """
    records = _task_records(session, rows)
    found: dict[str, schemas.TrainingJob] = {}
    for row in rows:
        record = records.get(row.job_id)
        known = row.training_job or record
        if not known or not known.get("name"):
            continue
        backend, name = str(known.get("backend") or ""), str(known["name"])
        region = record.get("region_name") if record and record.get("name") == name else None
        found[row.job_id] = schemas.TrainingJob(
            backend=backend,
            name=name,
            state=str(known.get("state") or ""),
            consoleUrl=sagemaker_console_url(name, region) if backend == "sagemaker" else None,
        )
    return found


def _task_records(session: Session, rows: list[JobRow]) -> dict[str, dict[str, Any]]:
    """The ``TrainingJobRecord`` each job's task keeps in its ``task_state_store``, when it is of that job."""
    from airflow.models.task_state_store import TaskStateStoreModel

    if not rows:
        return {}
    by_task = {(row.dag_id, row.run_id, row.task_id, row.map_index): row.job_id for row in rows}
    task = (
        TaskStateStoreModel.dag_id,
        TaskStateStoreModel.run_id,
        TaskStateStoreModel.task_id,
        TaskStateStoreModel.map_index,
    )
    found: dict[str, dict[str, Any]] = {}
    for dag_id, run_id, task_id, map_index, value in session.execute(
        select(*task, TaskStateStoreModel.value).where(
            TaskStateStoreModel.key == TRAINING_JOB_KEY, tuple_(*task).in_(list(by_task))
        )
    ):
        job_id = by_task.get((dag_id, run_id, task_id, map_index))
        try:
            record = json.loads(value)
            if isinstance(record, str):  # the task stored the JSON document as a string
                record = json.loads(record)
        except ValueError:
            continue
        # Retries share the store: the record is this job's only when its lease is one of this job's.
        if job_id and isinstance(record, dict) and str(record.get("lease_id", "")).startswith(f"{job_id}#"):
            found[job_id] = record
    return found
