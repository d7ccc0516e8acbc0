"""Apply a quota configuration to the ledger: its job queues and quota shares, their revisions and history.

Each job queue that changes gets the next revision, a history row with its whole configuration (AWS-shaped,
as the quota file writes it) and one CONFIG_CHANGED audit row per queue or share changed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from airflow_quota.engine.config import JobQueueWithShares, QuotaConfig
from airflow_quota.ledger.audit import add_audit_row
from airflow_quota.ledger.errors import ConfigApplyError
from airflow_quota.ledger.generation import bump_generation
from airflow_quota.ledger.job_rows import FINAL_STATUSES
from airflow_quota.ledger.models import AuditKind, ConfigRevisionRow, JobQueueRow, JobRow, QuotaShareRow

#: How many job ids an error message names before it says "and N more".
_JOBS_NAMED = 5


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One applied change: a job queue's own fields (``quota_share_name`` None) or one quota share.

    ``old`` is None for something added, ``new`` None for something removed; both are AWS-shaped.
    """

    job_queue_name: str
    quota_share_name: str | None
    revision: int
    old: dict[str, Any] | None
    new: dict[str, Any] | None

    @property
    def description(self) -> str:
        what = (
            f"job queue {self.job_queue_name}"
            if self.quota_share_name is None
            else f"quota share {self.quota_share_name} of job queue {self.job_queue_name}"
        )
        verb = "added" if self.old is None else "removed" if self.new is None else "changed"
        return f"{what} {verb} (revision {self.revision})"


def apply_quota_config(
    session: Session,
    config: QuotaConfig,
    *,
    applied_by: str,
    source: str,
    now: datetime | None = None,
) -> list[ConfigChange]:
    """Make the ledger's job queues and shares those of ``config`` (the whole quota file).

    Each job queue that changes gets the next revision, a history row with its whole configuration and
    one CONFIG_CHANGED audit row per queue or share changed, with old and new. Queues and shares missing
    from ``config`` are removed, unless they still have jobs that have not finished: then nothing at all
    is written and ``ConfigApplyError`` says which jobs. A reordering of shares alone is not a change.
    """
    now = now or datetime.now(UTC)
    # Every queue row locked up front in name order (PostgreSQL; SQLite locks the whole file), the order
    # an allocation cycle locks them in: a file listing queues in another order cannot deadlock with it.
    locked = select(JobQueueRow).order_by(JobQueueRow.job_queue_name).with_for_update()
    queue_rows = {row.job_queue_name: row for row in session.scalars(locked)}
    share_rows: dict[str, dict[str, QuotaShareRow]] = defaultdict(dict)
    for share_row in session.scalars(select(QuotaShareRow).order_by(QuotaShareRow.position)):
        share_rows[share_row.job_queue_name][share_row.quota_share_name] = share_row
    wanted = {queue.job_queue_name: queue for queue in config.job_queues}

    problems = _removals_with_unfinished_jobs(session, wanted)
    if problems:
        raise ConfigApplyError(source, problems)

    removed = [name for name in queue_rows if name not in wanted]
    changes: list[ConfigChange] = []
    for name in [*wanted, *removed]:
        changes += _apply_queue(
            session,
            name,
            queue_rows.get(name),
            share_rows[name],
            wanted.get(name),
            _Applied(applied_by, source, now),
        )
    return changes


def applied_config(session: Session, job_queue_name: str) -> dict[str, Any] | None:
    """The job queue as applied, AWS-shaped (``{"jobQueueName", "capacityLimits", "quotaShares"}``, and
    ``scheduler`` when the quota file wrote it)."""
    queue_row = session.get(JobQueueRow, job_queue_name)
    if queue_row is None:
        return None
    shares = session.scalars(
        select(QuotaShareRow)
        .where(QuotaShareRow.job_queue_name == job_queue_name)
        .order_by(QuotaShareRow.position)
    )
    return {**_queue_document(queue_row), "quotaShares": [_share_document(row) for row in shares]}


@dataclass(frozen=True, slots=True)
class _Applied:
    by: str
    source: str
    at: datetime


def _removals_with_unfinished_jobs(session: Session, wanted: Mapping[str, JobQueueWithShares]) -> list[str]:
    """One line per queue or share ``wanted`` leaves out while jobs in it have not finished."""
    unfinished: dict[tuple[str, str], list[str]] = defaultdict(list)
    for queue_name, share_name, job_id in session.execute(
        select(JobRow.job_queue_name, JobRow.quota_share_name, JobRow.job_id)
        .where(JobRow.status.not_in(FINAL_STATUSES))
        .order_by(JobRow.job_queue_name, JobRow.quota_share_name, JobRow.submitted_at, JobRow.submit_seq)
    ):
        unfinished[(queue_name, share_name)].append(job_id)
    problems: list[str] = []
    for (queue_name, share_name), job_ids in unfinished.items():
        queue = wanted.get(queue_name)
        if queue is None:
            what = f"job queue {queue_name} is missing, but its quota share {share_name}"
        elif share_name not in {share.quota_share_name for share in queue.quota_shares}:
            what = f"quota share {share_name} of job queue {queue_name} is missing, but it"
        else:
            continue
        problems.append(
            f"  {what} still has {len(job_ids)} job(s) that have not finished ({_name_jobs(job_ids)}): "
            "keep it until they finish, or terminate them first"
        )
    return problems


def _name_jobs(job_ids: list[str]) -> str:
    named = ", ".join(job_ids[:_JOBS_NAMED])
    more = len(job_ids) - _JOBS_NAMED
    return f"{named} and {more} more" if more > 0 else named


def _apply_queue(
    session: Session,
    name: str,
    queue_row: JobQueueRow | None,
    share_rows: dict[str, QuotaShareRow],
    queue: JobQueueWithShares | None,
    applied: _Applied,
) -> list[ConfigChange]:
    old = _elements(
        None if queue_row is None else _queue_document(queue_row),
        [_share_document(row) for row in share_rows.values()],
    )
    new_document = None if queue is None else queue.model_dump(mode="json", by_alias=True, exclude_none=True)
    new = _elements(
        None if new_document is None else _queue_document_of(new_document),
        [] if new_document is None else new_document["quotaShares"],
    )
    keys = list(dict.fromkeys([*new, *old]))
    diffs = [(key, old.get(key), new.get(key)) for key in keys if old.get(key) != new.get(key)]
    if not diffs:
        return []

    latest = session.scalar(
        select(func.max(ConfigRevisionRow.revision)).where(ConfigRevisionRow.job_queue_name == name)
    )
    revision = (latest or 0) + 1
    if queue is None:
        session.execute(delete(QuotaShareRow).where(QuotaShareRow.job_queue_name == name))
        session.execute(delete(JobQueueRow).where(JobQueueRow.job_queue_name == name))
    else:
        _write_queue(session, queue_row, share_rows, queue, revision, applied.at)
        bump_generation(session, name)
    session.add(
        ConfigRevisionRow(
            job_queue_name=name,
            revision=revision,
            applied_at=applied.at,
            applied_by=applied.by,
            source=applied.source,
            config=new_document,
        )
    )
    changes = [ConfigChange(name, share_name, revision, before, after) for share_name, before, after in diffs]
    for change in changes:
        add_audit_row(
            session,
            applied.at,
            name,
            AuditKind.CONFIG_CHANGED,
            quota_share_name=change.quota_share_name,
            message=f"{change.description} by {applied.by} from {applied.source}",
            details={
                "revision": revision,
                "appliedBy": applied.by,
                "source": applied.source,
                "old": change.old,
                "new": change.new,
            },
        )
    return changes


def _write_queue(
    session: Session,
    queue_row: JobQueueRow | None,
    share_rows: dict[str, QuotaShareRow],
    queue: JobQueueWithShares,
    revision: int,
    now: datetime,
) -> None:
    capacity_limits = [limit.model_dump(by_alias=True) for limit in queue.capacity_limits]
    if queue_row is None:
        queue_row = JobQueueRow(job_queue_name=queue.job_queue_name, created_at=now)
        session.add(queue_row)
    queue_row.capacity_limits = capacity_limits
    queue_row.scheduler = queue.scheduler
    actions = queue.job_state_time_limit_actions
    queue_row.job_state_time_limit_actions = (
        None if actions is None else [action.model_dump(mode="json", by_alias=True) for action in actions]
    )
    queue_row.revision = revision
    queue_row.updated_at = now
    session.flush()  # the queue row exists before its shares point at it

    kept = {share.quota_share_name for share in queue.quota_shares}
    for share_name, removed_row in share_rows.items():
        if share_name not in kept:
            session.delete(removed_row)
    for position, share in enumerate(queue.quota_shares):
        document = share.model_dump(mode="json", by_alias=True, exclude_none=True)
        share_row = share_rows.get(share.quota_share_name)
        if share_row is None:
            share_row = QuotaShareRow(
                job_queue_name=queue.job_queue_name, quota_share_name=share.quota_share_name, created_at=now
            )
            session.add(share_row)
        elif _share_document(share_row) == document:
            share_row.position = position
            continue
        sharing = share.resource_sharing_configuration
        share_row.position = position
        share_row.capacity_limits = document["capacityLimits"]
        share_row.strategy = sharing.strategy.value
        share_row.borrow_limit = sharing.borrow_limit
        share_row.in_share_preemption = share.preemption_configuration.in_share_preemption
        share_row.state = share.state.value
        share_row.extensions = document.get("extensions")
        share_row.updated_at = now


def _elements(
    queue_document: dict[str, Any] | None, share_documents: Iterable[dict[str, Any]]
) -> dict[str | None, dict[str, Any]]:
    """What a change is reported on: the queue's own fields (key None) and each share by name."""
    if queue_document is None:
        return {}
    elements: dict[str | None, dict[str, Any]] = {None: queue_document}
    for document in share_documents:
        elements[document["quotaShareName"]] = document
    return elements


def _queue_document(row: JobQueueRow) -> dict[str, Any]:
    """The queue's own fields as the quota file writes them (``scheduler`` only when it was written)."""
    document: dict[str, Any] = {"jobQueueName": row.job_queue_name, "capacityLimits": row.capacity_limits}
    if row.scheduler is not None:
        document["scheduler"] = row.scheduler
    if row.job_state_time_limit_actions is not None:
        document["jobStateTimeLimitActions"] = row.job_state_time_limit_actions
    return document


#: The queue's own fields the ledger keeps (``_queue_document``).
_LEDGER_QUEUE_FIELDS = ("jobQueueName", "capacityLimits", "scheduler", "jobStateTimeLimitActions")


def _queue_document_of(document: Mapping[str, Any]) -> dict[str, Any]:
    return {key: document[key] for key in _LEDGER_QUEUE_FIELDS if key in document}


def _share_document(row: QuotaShareRow) -> dict[str, Any]:
    """The share as the quota file writes it (what ``QuotaShareConfig.model_dump`` gives)."""
    sharing: dict[str, Any] = {"strategy": row.strategy}
    if row.borrow_limit is not None:
        sharing["borrowLimit"] = row.borrow_limit
    return {
        "quotaShareName": row.quota_share_name,
        "capacityLimits": row.capacity_limits,
        "resourceSharingConfiguration": sharing,
        "preemptionConfiguration": {"inSharePreemption": row.in_share_preemption},
        "state": row.state,
        **({} if row.extensions is None else {"extensions": row.extensions}),
    }
