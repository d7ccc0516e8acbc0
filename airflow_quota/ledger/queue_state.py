"""Read a job queue as the engine sees it (``QueueState``): its applied configuration and unfinished jobs."""

from __future__ import annotations

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_quota.engine.config import JobQueueWithShares
from airflow_quota.engine.messages import format_loc
from airflow_quota.engine.model import QueueState
from airflow_quota.ledger.configuration import applied_config
from airflow_quota.ledger.errors import AppliedConfigError, LedgerError
from airflow_quota.ledger.job_rows import FINAL_STATUSES, job_from_row
from airflow_quota.ledger.models import JobQueueRow, JobRow


def job_queue_names(session: Session) -> list[str]:
    """The applied job queues' names, sorted."""
    return list(session.scalars(select(JobQueueRow.job_queue_name).order_by(JobQueueRow.job_queue_name)))


def load_queue_state(session: Session, job_queue_name: str) -> QueueState:
    """The job queue as applied and its jobs that have not finished, as the engine sees them."""
    return load_queue(session, job_queue_name)[0]


def load_queue(session: Session, job_queue_name: str) -> tuple[QueueState, dict[str, JobRow]]:
    """``load_queue_state`` and the rows it read, by job id.

    Holding the rows keeps them in the session (its identity map holds clean rows weakly), so a caller
    that looks them up again, as the allocator does for each job, reads no row twice.
    """
    document = applied_config(session, job_queue_name)
    if document is None:
        raise LedgerError(
            f"job queue {job_queue_name} is not in the quota ledger: apply a quota file that defines it"
        )
    try:
        queue = JobQueueWithShares.model_validate(document).to_job_queue()
    except ValidationError as error:
        problems = "; ".join(f"{format_loc(each['loc'])}: {each['msg']}" for each in error.errors()[:3])
        raise AppliedConfigError(
            f"the quota configuration applied to job queue {job_queue_name} no longer validates "
            f"({problems}): apply a valid quota file for it (airflow quota apply -f FILE); its jobs wait "
            "meanwhile"
        ) from None
    rows = {
        row.job_id: row
        for row in session.scalars(
            select(JobRow)
            .where(JobRow.job_queue_name == job_queue_name, JobRow.status.not_in(FINAL_STATUSES))
            .order_by(JobRow.submitted_at, JobRow.submit_seq)
        )
    }
    return QueueState(queue, {job_id: job_from_row(row) for job_id, row in rows.items()}), rows
