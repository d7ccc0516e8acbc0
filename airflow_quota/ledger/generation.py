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
from sqlalchemy.orm import Session, SessionTransaction

from airflow_quota.ledger.models import JobQueueRow


class QueueMark(NamedTuple):
    """Where a job queue stands: its configuration's revision and its generation."""

    revision: int
    generation: int


def bump_generation(session: Session, job_queue_name: str) -> None:
    """Add one to the queue's generation in this transaction, once: a later call in the same transaction
    (or a savepoint within it) does nothing, since one bump already tells every kept state that the queue
    changed. A bump inside a savepoint counts only while that savepoint is open: once it is released or
    rolled back, the next call bumps again (a rolled-back bump is gone; a released one is merely repeated).

    On PostgreSQL the row stays locked until the transaction ends, so two writers' bumps never merge. A
    cycle that records ten finishes one after the other runs one UPDATE for the queue, not ten (each a
    flush of the rows written before it, and a round trip).
    """
    bumped = _bumped(session)
    current = session.get_nested_transaction() or session.get_transaction()
    if current is not None:
        for transaction, queues in bumped:
            if job_queue_name in queues and _within(current, transaction):
                return
    generation = session.scalar(
        update(JobQueueRow)
        .where(JobQueueRow.job_queue_name == job_queue_name)
        .values(generation=JobQueueRow.generation + 1)
        .returning(JobQueueRow.generation)
        .execution_options(synchronize_session=False)
    )
    current = session.get_nested_transaction() or session.get_transaction()
    if current is None:  # not in a transaction (an autocommit connection): nothing to remember
        return
    root = session.get_transaction()
    written = session.info.setdefault(_WRITTEN, {})
    written[job_queue_name] = (root, generation)
    for transaction, queues in bumped:
        if transaction is current:
            queues.add(job_queue_name)
            return
    bumped[:] = [entry for entry in bumped if entry[0].is_active]  # the ended ones are dropped
    bumped.append((current, {job_queue_name}))


#: ``Session.info`` key of the queues bumped per open transaction (``bump_generation``).
_BUMPED = "airflow_quota.bumped_generations"
#: ``Session.info`` key of each queue's latest bump: the outermost transaction then, and the generation.
_WRITTEN = "airflow_quota.written_generations"


def mark_written(session: Session, job_queue_name: str, read: QueueMark) -> QueueMark:
    """The queue's mark as this transaction leaves it so far, without reading it again: ``read`` (the mark
    this transaction read, with the queue's row locked: no one else bumps it meanwhile), with the
    generation of this transaction's latest bump of the queue, if any.

    Off only when a savepoint rolled back that latest bump (the generation went back): then it names a
    generation the ledger does not have, and a kept state with it is read whole next time. Never the other
    way: a mark that equals the ledger's is the ledger's."""
    latest = session.info.get(_WRITTEN, {}).get(job_queue_name)
    if latest is None or latest[0] is not session.get_transaction():
        return read
    return QueueMark(read.revision, latest[1])


def _bumped(session: Session) -> list[tuple[SessionTransaction, set[str]]]:
    bumped: list[tuple[SessionTransaction, set[str]]] = session.info.setdefault(_BUMPED, [])
    return bumped


def _within(current: SessionTransaction, transaction: SessionTransaction) -> bool:
    """Whether ``transaction`` is still open and is ``current`` or one of the transactions it is inside."""
    if not transaction.is_active:
        return False
    each: SessionTransaction | None = current
    while each is not None:
        if each is transaction:
            return True
        each = each.parent
    return False


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
