"""Each job queue's generation: a counter that every transaction writing the queue's jobs or its
configuration bumps (``JobQueueRow.generation``).

An allocator that keeps a queue's state between cycles (``allocator.kept_state``) remembers the revision
and generation its last committed cycle left; it trusts what it kept only while both are unchanged, so
anyone else's commit (another allocator, a termination or priority change from the API or the CLI, a quota
file applied) makes it read the queue again. The ledger's own writers bump it, before they write:
``job_rows.write_jobs`` (every change of a job the engine sees), ``lifecycle.record_submissions``,
``configuration.apply_quota_config``. Columns only the allocator writes outside the engine (the capacity
a job holds, its stop signal, its training job) need no bump: the rows holding capacity are read again
every cycle anyway.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from airflow_quota.ledger.models import JobQueueRow


class QueueMark(NamedTuple):
    """Where a job queue stands: its configuration's revision and its generation."""

    revision: int
    generation: int


def bump_generation(session: Session, job_queue_name: str) -> int | None:
    """Add one to the queue's generation in this transaction; the new value (None: no such queue).

    On PostgreSQL the row stays locked until the transaction ends, so two writers' bumps never merge.
    """
    bumped: int | None = session.scalar(
        update(JobQueueRow)
        .where(JobQueueRow.job_queue_name == job_queue_name)
        .values(generation=JobQueueRow.generation + 1)
        .returning(JobQueueRow.generation)
        .execution_options(synchronize_session=False)
    )
    return bumped


def read_mark(session: Session, job_queue_name: str, *, lock: bool = False) -> QueueMark | None:
    """The queue's revision and generation (None: not applied); ``lock`` takes its row's lock (PostgreSQL
    ``FOR UPDATE``) so that no one else bumps it before this transaction ends."""
    query = select(JobQueueRow.revision, JobQueueRow.generation).where(
        JobQueueRow.job_queue_name == job_queue_name
    )
    if lock:
        query = query.with_for_update()
    row = session.execute(query).first()
    return None if row is None else QueueMark(row.revision, row.generation)
