"""The audit log's writer: one row per decision or event, in the caller's session."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

from airflow_quota.engine.model import Job
from airflow_quota.ledger.models import AuditKind, AuditRow


def add_audit_row(
    session: Session,
    now: datetime,
    job_queue_name: str,
    kind: AuditKind,
    *,
    message: str,
    job: Job | None = None,
    job_id: str | None = None,
    quota_share_name: str | None = None,
    related_job_id: str | None = None,
    rule: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Append one audit row; a ``job`` gives its id and its share (``job_id`` and ``quota_share_name`` are
    then ignored: they name a job the ledger does not hold, such as an AWS Batch service job). Within
    ``audit_rows_in_bulk`` the row waits for that block's INSERT."""
    values = audit_values(
        now,
        job_queue_name,
        kind,
        message=message,
        job=job,
        job_id=job_id,
        quota_share_name=quota_share_name,
        related_job_id=related_job_id,
        rule=rule,
        details=details,
    )
    bulk: list[dict[str, Any]] | None = session.info.get(_IN_BULK)
    if bulk is None:
        session.add(AuditRow(**values))
    else:
        bulk.append(values)


@contextmanager
def audit_rows_in_bulk(session: Session) -> Iterator[None]:
    """Within the block, ``add_audit_row`` collects its rows, in order, instead of adding ORM objects; when
    the block ends they are inserted in one INSERT after the session's pending rows (flushed first), so
    the log keeps its order (a cycle finishing hundreds of jobs wrote as many objects). When the block
    raises nothing is inserted (its transaction is rolled back). A block inside another adds its rows to
    the outer one's. Nothing in the block may read the audit log or roll back a savepoint of its own: its
    rows are not written yet."""
    if _IN_BULK in session.info:
        yield
        return
    rows: list[dict[str, Any]] = []
    session.info[_IN_BULK] = rows
    try:
        yield
    finally:
        del session.info[_IN_BULK]
    if rows:
        session.flush()
        session.execute(insert(AuditRow), rows)


#: ``Session.info`` key of the rows ``audit_rows_in_bulk`` collects.
_IN_BULK = "airflow_quota.audit_rows_in_bulk"


def audit_values(
    now: datetime,
    job_queue_name: str,
    kind: AuditKind,
    *,
    message: str,
    job: Job | None = None,
    job_id: str | None = None,
    quota_share_name: str | None = None,
    related_job_id: str | None = None,
    rule: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``add_audit_row``'s row as a dictionary of its attributes, for a bulk INSERT of many."""
    return {
        "at": now,
        "job_queue_name": job_queue_name,
        "kind": kind.value,
        "quota_share_name": quota_share_name if job is None else job.share_name,
        "job_id": job_id if job is None else job.job_id,
        "related_job_id": related_job_id,
        "rule": rule,
        "message": message,
        "details": details,
    }
