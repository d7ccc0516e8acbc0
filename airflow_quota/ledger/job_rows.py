"""The translation between a job's row (``JobRow``) and the engine's ``Job``, both ways.

Engine time is epoch seconds: pass ``to_engine_time(now)`` to ``plan_cycle`` so the start times it decides
are the ones stored (timestamps keep microseconds, and such times round-trip exactly).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from itertools import compress, islice
from operator import is_not
from typing import cast

from sqlalchemy import Table, bindparam, event, inspect, select, text, update
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from airflow_quota.engine.model import Job, JobRequest, JobStatus, QueueState, StopCause
from airflow_quota.ledger.bulk_update import update_in_bulk
from airflow_quota.ledger.errors import LedgerError
from airflow_quota.ledger.generation import bump_generation
from airflow_quota.ledger.models import JobRow

#: The status column's values of a job that has finished.
FINAL_STATUSES = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value)
#: The others: an open job's (a query naming them can read an index of the status; with NOT IN the
#: finished jobs, all of the ledger's history, are read too).
OPEN_STATUSES = tuple(status.value for status in JobStatus if status.value not in FINAL_STATUSES)


def to_engine_time(at: datetime) -> float:
    """The engine's clock (epoch seconds) for a timezone-aware datetime."""
    return at.timestamp()


def from_engine_time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def job_from_row(row: JobRow) -> Job:
    """The job as the engine sees it."""
    started = None
    if row.started_at is not None and row.start_seq is not None:
        started = (to_engine_time(row.started_at), row.start_seq)
    return Job(
        job_id=row.job_id,
        request=JobRequest(
            job_name=row.job_name,
            quota_share_name=row.quota_share_name,
            capacity_unit=row.capacity_unit,
            instance_count=row.instance_count,
            scheduling_priority=row.scheduling_priority,
            preemption_retries_before_termination=row.preemption_retries_before_termination,
        ),
        submitted=(to_engine_time(row.submitted_at), row.submit_seq),
        status=JobStatus(row.status),
        status_reason=row.status_reason,
        started=started,
        stop_cause=None if row.stop_cause is None else StopCause(row.stop_cause),
        preempted_by=row.preempted_by,
        awaiting_victims=awaited_stops(row.awaiting_victims, row.instance_count),
        preempted_attempt_count=row.preempted_attempt_count,
        last_checkpoint=None if row.last_checkpoint_at is None else to_engine_time(row.last_checkpoint_at),
    )


def awaited_stops(stored: dict[str, int] | list[str], instance_count: int) -> dict[str, int]:
    """A reservation's stops and the units each gives it, as its row keeps them (``Job.awaiting_victims``).

    A ledger written before the units were kept lists the stops alone: each is read as giving up to the
    job's whole count, and the engine splits them again in its turn order (``engine.usage.allocate_claims``).
    """
    if isinstance(stored, list):
        return dict.fromkeys(stored, instance_count)
    return dict(stored)


def write_job(row: JobRow, job: Job, now: datetime) -> None:
    """Copy what the engine knows of ``job`` into ``row``; release its capacity once it holds none."""
    set_columns(row, job_values(job, now))


def job_values(job: Job, now: datetime) -> dict[str, object]:
    """The columns of a job's row that say what the engine knows of it (``write_job``)."""
    started, stop_cause = job.started, job.stop_cause
    values: dict[str, object] = {
        "quota_share_name": job.request.quota_share_name,
        "job_name": job.request.job_name,
        "capacity_unit": job.request.capacity_unit,
        "instance_count": job.request.instance_count,
        "scheduling_priority": job.request.scheduling_priority,
        "preemption_retries_before_termination": job.request.preemption_retries_before_termination,
        "status": job.status.value,
        "status_reason": job.status_reason,
        "submitted_at": from_engine_time(job.submitted[0]),
        "submit_seq": job.submitted[1],
        "started_at": None if started is None else from_engine_time(started[0]),
        "start_seq": None if started is None else started[1],
        "stop_cause": None if stop_cause is None else stop_cause.value,
        "preempted_by": job.preempted_by,
        "awaiting_victims": dict(sorted(job.awaiting_victims.items())),
        "preempted_attempt_count": job.preempted_attempt_count,
        "last_checkpoint_at": None if job.last_checkpoint is None else from_engine_time(job.last_checkpoint),
    }
    if stop_cause is None:
        values["preemption_rule"] = None
    if not job.status.holds_capacity:
        values.update(_RELEASED)
    values["updated_at"] = now
    return values


def set_columns(row: JobRow, values: dict[str, object]) -> None:
    """Set the columns of ``values`` (by attribute name) on ``row`` where they change; within
    ``job_rows_in_bulk`` (a row of its session) they wait for its bulk UPDATE, otherwise the unit of work
    writes them at the next flush.

    Only the columns that change are set: a cycle writes hundreds of rows, most of whose columns stay,
    and setting an ORM attribute costs several times reading it. Read from the row's ``__dict__``: an
    attribute not loaded (or a new row's, not yet given) is set, never loaded by a query."""
    loaded = row.__dict__
    state = inspect(row)
    session = state.session
    pending: dict[str, tuple[JobRow, set[str]]] | None = (
        None if session is None or not state.persistent else session.info.get(_IN_BULK)
    )
    if pending is None:
        for name, value in values.items():
            if name not in loaded or loaded[name] != value:
                setattr(row, name, value)
        return
    names = pending.setdefault(row.job_id, (row, set()))[1]
    for name, value in values.items():
        if name not in loaded or loaded[name] != value:
            set_committed_value(row, name, value)  # as if loaded so: the unit of work leaves it alone
            names.add(name)


@contextmanager
def job_rows_in_bulk(session: Session) -> Iterator[None]:
    """Within the block, the columns ``set_columns`` (and so ``write_job``, ``write_jobs``) sets on the
    session's job rows are written in bulk: the rows' objects hold the new values at once, and the rows
    are written together before the next statement the session executes (``Session.execute`` and every
    query made through it: what the block reads sees them, as after an autoflush) and when the block ends,
    one UPDATE per set of columns changed. A cycle turning over its capacity changes hundreds of rows, one
    UPDATE and the unit of work's bookkeeping each (a tenth of the cycle). Statements run on the
    session's connection directly (``session.connection().execute``) do not see rows not written yet.

    When the block raises, the rows not written yet are left so and their objects expired (the caller
    rolls back what was written). A block inside another adds its rows to the outer one's."""
    if _IN_BULK in session.info:
        yield
        return
    pending: dict[str, tuple[JobRow, set[str]]] = {}
    session.info[_IN_BULK] = pending

    def write_first(execute_state: ORMExecuteState) -> None:
        if pending:
            _write_pending(session, pending)

    event.listen(session, "do_orm_execute", write_first)
    try:
        yield
        _write_pending(session, pending)
    except BaseException:
        for row, _ in pending.values():
            session.expire(row)
        raise
    finally:
        event.remove(session, "do_orm_execute", write_first)
        del session.info[_IN_BULK]


def _write_pending(session: Session, pending: dict[str, tuple[JobRow, set[str]]]) -> None:
    """Write the rows ``job_rows_in_bulk`` holds, one UPDATE per set of columns changed (the values the
    objects hold now: a column the unit of work also writes gets the same value from both)."""
    by_columns: dict[tuple[str, ...], list[JobRow]] = defaultdict(list)
    for row, changed in pending.values():
        if changed:
            by_columns[tuple(sorted(changed))].append(row)
    connection = session.connection()
    for names, rows in by_columns.items():
        update_in_bulk(connection, cast(Table, JobRow.__table__), names, rows)
    pending.clear()  # (not before: when a statement fails, the block's end expires them all)


#: ``Session.info`` key of the rows ``job_rows_in_bulk`` has not written yet, by job id.
_IN_BULK = "airflow_quota.job_rows_in_bulk"


#: A row's columns once its job holds no capacity.
_RELEASED: dict[str, object] = {
    "held_capacity_unit": None,
    "held_instance_count": 0,
    "borrowed_instance_count": 0,
    "borrowed_from": None,
    "held_devices": None,
    "stop_signalled_at": None,
}


def write_changed_jobs(
    session: Session, before: QueueState, after: QueueState, now: datetime
) -> dict[str, JobRow]:
    """Write every job of ``after`` that differs from ``before``; return their rows by job id.

    The rows the session already holds (the allocator keeps its cycle's rows) are taken from it without a
    query, so recording one event after another does not flush and re-read each time.
    """
    return write_jobs(session, changed_jobs(before, after), now)


def changed_jobs(before: QueueState, after: QueueState) -> dict[str, Job]:
    """The jobs of ``after`` that differ from ``before`` (new ones too), by job id.

    An event's ``after`` is nearly always ``before``'s dictionary copied with a few jobs replaced or
    added at its end: then the jobs not the same object are picked out in C (no Python step per job at
    10,000 waiting) and only those are compared."""
    jobs_before, jobs_after = before.jobs, after.jobs
    keys_before = list(jobs_before)
    keys_after = list(jobs_after)
    shared = len(keys_before)
    if len(keys_after) < shared or keys_after[:shared] != keys_before:
        return {
            job_id: job
            for job_id, job in jobs_after.items()
            if (old := jobs_before.get(job_id)) is not job and old != job
        }
    replaced = compress(keys_before, map(is_not, jobs_before.values(), islice(jobs_after.values(), shared)))
    changed = {job_id: job for job_id in replaced if (job := jobs_after[job_id]) != jobs_before[job_id]}
    changed.update((job_id, jobs_after[job_id]) for job_id in keys_after[shared:])
    return changed


def write_jobs(session: Session, changed: dict[str, Job], now: datetime) -> dict[str, JobRow]:
    """Write each job of ``changed`` (by job id) into its row and bump the generation of their job
    queues (``ledger.generation``); return the rows by job id."""
    rows: dict[str, JobRow] = {}
    for job_id in changed:
        held = session.identity_map.get(identity_key(JobRow, job_id))
        if isinstance(held, JobRow):
            rows[job_id] = held
    missing = [job_id for job_id in changed if job_id not in rows]
    if missing:
        rows.update(
            (row.job_id, row) for row in session.scalars(select(JobRow).where(JobRow.job_id.in_(missing)))
        )
    # Kept states of these queues are stale from this commit on. Bumped before the rows change, so a
    # writer locks the queue's row before its jobs' rows, as the allocator does (no deadlock).
    for queue_name in sorted({row.job_queue_name for row in rows.values()}):
        bump_generation(session, queue_name)
    for job_id, job in changed.items():
        if job_id not in rows:
            raise LedgerError(f"job {job_id} is not in the quota ledger; record its submission first")
        write_job(rows[job_id], job, now)
    return rows


def write_reasons(session: Session, job_queue_name: str, reasons: dict[str, str]) -> None:
    """Write new statusReasons (by job id) of waiting jobs of ``job_queue_name`` in bulk, without loading
    their rows: on PostgreSQL one UPDATE per ``_REASONS_PER_STATEMENT`` jobs joined to two arrays (the
    distinct reasons, and each job's index into them), on SQLite one statement run for each job.

    A waiting job's reason alone changing is no change of the job: ``updated_at`` stays (its index then
    needs no new entry, and PostgreSQL can update the row in place). ``updated_at`` tells which finished
    jobs changed since a time (the GPU timeline's window); a waiting job is shown whenever it is open.

    A row the session holds gets the reason too, as written (not marked as changed: already in the DB)."""
    if not reasons:
        return
    bump_generation(session, job_queue_name)  # another host's kept state holds the reasons it wrote
    session.flush()  # a row the session holds is in the database before it is updated
    pending = session.info.get(_IN_BULK)
    if pending:  # so are the rows ``job_rows_in_bulk`` holds (SQLite's statement skips the session)
        _write_pending(session, pending)
    job_ids = sorted(reasons)
    if session.get_bind().dialect.name == "postgresql":
        for start in range(0, len(job_ids), _REASONS_PER_STATEMENT):
            chunk = job_ids[start : start + _REASONS_PER_STATEMENT]
            distinct = list(dict.fromkeys(reasons[job_id] for job_id in chunk))
            index = {reason: position for position, reason in enumerate(distinct, start=1)}
            session.execute(
                _UPDATE_REASONS_POSTGRES,
                {
                    "queue": job_queue_name,
                    "ids": chunk,
                    "positions": [index[reasons[job_id]] for job_id in chunk],
                    "reasons": distinct,
                },
            )
    else:
        session.connection().execute(  # a Core executemany: SQLite runs it in-process, row by row
            update(JobRow)
            .where(JobRow.job_id == bindparam("b_job_id"), JobRow.job_queue_name == job_queue_name)
            .values(status_reason=bindparam("b_reason")),
            [{"b_job_id": job_id, "b_reason": reasons[job_id]} for job_id in job_ids],
        )
    for held in list(session.identity_map.values()):  # the rows the cycle read: a few hundred at most
        if isinstance(held, JobRow) and held.job_id in reasons:
            set_committed_value(held, "status_reason", reasons[held.job_id])


#: Jobs per UPDATE of ``write_reasons`` on PostgreSQL (two array parameters of this length).
_REASONS_PER_STATEMENT = 5000

_UPDATE_REASONS_POSTGRES = text(
    "UPDATE quota_job SET status_reason = (CAST(:reasons AS TEXT[]))[new.position] "
    "FROM unnest(CAST(:ids AS VARCHAR[]), CAST(:positions AS INTEGER[])) AS new(job_id, position) "
    "WHERE quota_job.job_id = new.job_id AND quota_job.job_queue_name = :queue"
)


def job_row(session: Session, job_id: str) -> JobRow:
    """The job's row; ``LedgerError`` when the ledger has never heard of it."""
    row = session.get(JobRow, job_id)
    if row is None:
        raise LedgerError(f"job {job_id} is not in the quota ledger; record its submission first")
    return row
