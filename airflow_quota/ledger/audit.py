"""The audit log's writer: one row per decision or event, in the caller's session."""

from __future__ import annotations

from datetime import datetime
from typing import Any

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
    then ignored: they name a job the ledger does not hold, such as an AWS Batch service job)."""
    session.add(
        AuditRow(
            **audit_values(
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
        )
    )


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
