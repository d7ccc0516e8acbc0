"""The allocator's side of Airflow: read task instances, claim them, resume them, signal them.

Everything here runs inside the cycle's session (the scheduler side may use the metadata DB) and never
commits. The task instances waiting for admission are read as plain columns, without locks
(``waiting_on``); only those the cycle acts on are *claimed* (``claim_waiting``, ``claim_deferred``),
and only those it resumes are loaded as ORM objects (``task_instances``). On PostgreSQL a claim locks the
row ``FOR UPDATE SKIP LOCKED`` with its state (and the trigger it waits on) re-checked; on SQLite a
guarded no-op UPDATE must match it (it also takes the database's write lock until the cycle commits). A
task cleared, failed or resumed by someone else between the read and the write is then left alone
instead of being resurrected (research: grant-mechanism.md section 4.5).
"""

from __future__ import annotations

import json
import logging
import typing
import uuid
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from itertools import compress, repeat
from operator import is_, is_not, not_
from typing import Any, NamedTuple

from airflow.jobs.job import Job, JobState
from airflow.models.dagrun import DagRun
from airflow.models.log import Log
from airflow.models.task_state_store import TaskStateStoreModel
from airflow.models.taskinstance import TaskInstance, clear_task_instances
from airflow.models.taskinstancehistory import TaskInstanceHistory
from airflow.models.taskinstancekey import TaskInstanceKey
from airflow.models.trigger import Trigger, handle_event_submit
from airflow.state import TaskScope, get_state_backend
from airflow.triggers.base import TriggerEvent
from airflow.utils.sqlalchemy import with_row_locks
from airflow.utils.state import TaskInstanceState
from sqlalchemy import String, Table, and_, cast, inspect, select, tuple_, update
from sqlalchemy.orm import Session, lazyload

from airflow_quota.allocator.job_ids import job_id_for
from airflow_quota.allocator.reconcile import TRY_EVENTS, UNEXPLAINED_STATES, TaskView, is_current_try
from airflow_quota.engine.model import JobStatus
from airflow_quota.ledger.bulk_update import update_in_bulk
from airflow_quota.ledger.job_rows import OPEN_STATUSES
from airflow_quota.ledger.models import JobRow
from airflow_quota.protocol import PREEMPT_KEY, TRAINING_JOB_KEY, TrainingJobRecord

log = logging.getLogger(__name__)


def is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


@dataclass(frozen=True, slots=True)
class WaitingTask:
    """A task instance deferred on an admission trigger, as read (not claimed), with its trigger's kwargs."""

    id: uuid.UUID
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    trigger_id: int
    #: When it deferred on the trigger, and whether it did so from a worker run (``pid`` set).
    deferred_at: datetime
    from_worker: bool
    kwargs: dict[str, Any]
    #: The job id of its try (``job_ids.job_id_for``), worked out once per deferral.
    job_id: str


def waiting_on(session: Session, classpath: str) -> list[WaitingTask]:
    """Task instances deferred on triggers of ``classpath``, oldest deferral first; read, not claimed.

    Each cycle reads only what identifies each deferral (``_Deferral``); the rest (names, the trigger's
    kwargs, decrypted) is read once per deferral and kept while it is deferred (``_WaitingTasks``).
    The same list is returned again while the deferrals are the same (callers must not change it).
    """
    return _waiting.read(session, classpath)


class _WaitingTasks:
    """The tasks of the latest read, by deferral: a cycle at 10,000 waiting reads three or four columns per
    task instead of the names and kwargs of each, and builds a ``WaitingTask`` only for a new deferral.
    Only the deferrals of the latest read are kept, so an entry never outlives its deferral.

    The columns come as the driver's own tuples (``_deferral_rows``: no SQLAlchemy row per task, and in no
    order, which spares the database a sort of them all); each is looked up among the latest read's in
    C. When they are the same deferrals, the latest read's list itself is returned: nothing deferred,
    resumed or cleared since, and a caller may tell so by its identity (``is``). Else the latest read's
    tasks still deferred keep their order, and the new ones are put in their places: oldest deferral
    first, by the trigger's creation time then the task instance's id, the order an ``ORDER BY`` of those
    two columns gives.

    A deferral's key is a plain tuple: its trigger's id (Airflow creates a trigger row for each deferral
    of each task instance), then its try number and whether a worker deferred it (the two columns of a
    ``WaitingTask`` that could change). On PostgreSQL that is all (``compact``: trigger ids come from a
    sequence, never given twice; the two text columns more were half the read's time at 13,000 waiting).
    Were two task instances ever deferred on one trigger row (Airflow never does so), their keys would be
    one: that read is made again with full keys, so no task is hidden behind another's. A full key
    (SQLite, which gives a new row the id of a deleted one) also holds the trigger's creation time (after
    its id) and the task instance's id (last). Trigger ids are given again only when the sequence starts
    over (``airflow db reset`` or a restored backup under a running scheduler): every ``CHECK_EVERY``
    reads, the compact keys known are checked against the task instances' ids (``_still_theirs``), and
    a key found to be another task's now makes that read start afresh."""

    def __init__(self) -> None:
        self._by_classpath: dict[str, _Read] = {}
        self._reads = 0

    def read(self, session: Session, classpath: str) -> list[WaitingTask]:
        compact = is_postgres(session)
        rows = _deferral_rows(session, classpath, compact=compact)
        if compact and len(set(rows)) < len(rows):  # one trigger row, two task instances
            compact = False
            rows = _deferral_rows(session, classpath, compact=compact)
        latest = self._by_classpath.get(classpath)
        self._reads += 1
        if (
            latest is None
            or latest.compact is not compact
            or (compact and self._reads % CHECK_EVERY == 0 and not _still_theirs(session, classpath, latest))
        ):
            latest = _Read(compact, False, [], [], [], {})  # nothing to take for the same
        known = latest.by_deferral
        found = list(map(known.get, rows))
        missing = list(compress(rows, map(is_, found, repeat(None))))
        if latest.complete and not missing and len(rows) == len(known):
            return latest.tasks  # the same deferrals (a task instance is deferred once: no row twice)
        fetched: dict[Any, WaitingTask] = {}
        new = [each[0] for each in missing]  # their triggers' ids
        if len(new) > _CHUNK and 2 * len(new) > len(rows):  # mostly new (a burst): one read of all
            fetched = _full_rows(session, None, classpath, compact=compact)
        else:
            for start in range(0, len(new), _CHUNK):
                fetched.update(_full_rows(session, new[start : start + _CHUNK], classpath, compact=compact))
        # A deferral that moved on between the two reads is left out: the next cycle reads it again.
        added = sorted(
            (_order_key(task), each, task) for each in missing if (task := fetched.get(each)) is not None
        )
        # The latest read's lists are changed in place (they are this reader's own; the list of tasks it
        # returned is copied first): the tasks that are no longer deferred taken out, found by their
        # ``id()`` (no task looked at), the new ones put in their places.
        keys, ordered, tasks = latest.keys, latest.rows, list(latest.tasks)
        if len(rows) - len(missing) < len(tasks):
            still = set(map(id, compress(found, map(is_not, found, repeat(None)))))
            kept = list(map(still.__contains__, map(id, tasks)))
            gone = list(compress(range(len(tasks)), map(not_, kept)))
            for at in gone:
                del known[ordered[at]]
            if len(gone) > _CHUNK:  # many: the lists filtered whole (in C)
                keys, ordered = list(compress(keys, kept)), list(compress(ordered, kept))
                tasks = list(compress(tasks, kept))
            else:
                for at in reversed(gone):
                    del keys[at], ordered[at], tasks[at]
        if len(added) > _CHUNK:  # many: sorted together (in C; the keys are unique)
            merged = sorted([*zip(keys, ordered, tasks, strict=True), *added])
            keys, ordered, tasks = (list(column) for column in zip(*merged, strict=True))
        else:
            for key, each, task in added:
                at = bisect_right(keys, key)
                keys.insert(at, key)
                ordered.insert(at, each)
                tasks.insert(at, task)
        known.update((each, task) for _, each, task in added)
        complete = len(tasks) == len(rows)  # else the next read must not take this one for the same
        self._by_classpath[classpath] = _Read(compact, complete, ordered, keys, tasks, known)
        return tasks


#: Every so many reads, the compact keys known are checked against the task instances' ids.
CHECK_EVERY = 100


def _still_theirs(session: Session, classpath: str, latest: _Read) -> bool:
    """Whether every compact key ``latest`` knows that is read again now is still its task's: the same
    trigger row, try and worker flag, and the same task instance (its id read with the full keys)."""
    known = latest.by_deferral
    for row in _deferral_rows(session, classpath, compact=False):
        trigger_id, _, try_number, from_worker, ti_id = row
        task = known.get((trigger_id, try_number, from_worker))
        if task is not None and str(task.id) != ti_id:
            log.warning(
                "The deferral on trigger %s is task instance %s's now, not %s's: trigger ids were given "
                "again (the database was reset or restored?); the waiting tasks are read afresh",
                trigger_id,
                ti_id,
                task.id,
            )
            return False
    return True


def _order_key(task: WaitingTask) -> tuple[datetime, str]:
    """Where a deferral goes in the waiting tasks: the trigger's creation time, then the task instance's
    id in text (the order of its ``uuid`` or its text column alike)."""
    return (task.deferred_at, str(task.id))


class _Read(NamedTuple):
    """One read of the deferrals on a classpath: whether its keys are compact, whether every deferral
    read was found, its deferrals in order, their order keys (``_order_key``) and tasks, and the tasks by
    deferral."""

    compact: bool
    complete: bool
    rows: list[tuple[Any, ...]]
    keys: list[tuple[datetime, str]]
    tasks: list[WaitingTask]
    by_deferral: dict[Any, WaitingTask]


def _deferral_rows(session: Session, classpath: str, *, compact: bool) -> list[tuple[Any, ...]]:
    """The key (``_WaitingTasks``) of each task instance deferred on ``classpath``, in no order, as the
    DB-API cursor returns them (plain tuples: no SQLAlchemy row per task)."""
    connection = session.connection()
    dialect = connection.dialect
    sql = _DEFERRALS_SQL.get((dialect.name, classpath, compact))
    if sql is None:
        ti = TaskInstance
        # The creation time and the id as text: the column types would build a timezone-aware datetime
        # and a uuid.UUID per row, most of the read at 10,000; they only identify a deferral.
        columns: list[Any] = [Trigger.id, ti.try_number, ti.pid.is_not(None)]
        if not compact:
            columns[1:1] = [cast(Trigger.created_date, String)]
            columns.append(cast(ti.id, String))
        query = (
            select(*columns)
            .join(Trigger, ti.trigger_id == Trigger.id)
            .where(ti.state == TaskInstanceState.DEFERRED.value, Trigger.classpath == classpath)
        )
        # Constants only (the state and the classpath), rendered by the dialect: no parameters to bind.
        sql = str(query.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
        _DEFERRALS_SQL[(dialect.name, classpath, compact)] = sql
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql)
        rows: list[tuple[Any, ...]] = list(cursor.fetchall())
    finally:
        cursor.close()
    return rows


#: ``_deferral_rows``'s statement, by dialect, classpath and whether its keys are compact.
_DEFERRALS_SQL: dict[tuple[str, str, bool], str] = {}


def _full_rows(
    session: Session, trigger_ids: Sequence[int] | None, classpath: str, *, compact: bool
) -> dict[tuple[Any, ...], WaitingTask]:
    """The ``WaitingTask`` of each task instance deferred on a trigger of ``classpath`` among
    ``trigger_ids`` (None: any), by its deferral's key (``_WaitingTasks``).

    Two reads of one table each, joined here by trigger id, not one join: with the statistics of tables
    that were nearly empty a minute ago (a burst into a new or quiet database, before autovacuum analyzes
    them), PostgreSQL joined them in nested loops, a scan of the triggers for each deferred task instance:
    up to two seconds a read at a few thousand waiting (Kueue's benchmark). Each read here is one pass over
    its table at worst. A deferral made between the two reads is left out (its trigger was not read): the
    next cycle reads it."""
    ti = TaskInstance
    triggers_query = select(
        Trigger.id,
        Trigger.created_date,
        cast(Trigger.created_date, String).label("created_text"),
        Trigger.encrypted_kwargs,
    ).where(Trigger.classpath == classpath)
    tasks_query = select(
        ti.id.label("ti_id"),
        cast(ti.id, String).label("ti_id_text"),
        ti.dag_id,
        ti.run_id,
        ti.task_id,
        ti.map_index,
        ti.try_number,
        ti.pid,
        ti.trigger_id,
    ).where(ti.state == TaskInstanceState.DEFERRED, ti.trigger_id.is_not(None))
    if trigger_ids is not None:
        triggers_query = triggers_query.where(Trigger.id.in_(trigger_ids))
        tasks_query = tasks_query.where(ti.trigger_id.in_(trigger_ids))
    triggers = {trigger.id: trigger for trigger in session.execute(triggers_query)}
    tasks: dict[tuple[Any, ...], WaitingTask] = {}
    for row in session.execute(tasks_query):
        trigger = triggers.get(row.trigger_id)
        if trigger is None:  # deferred on a trigger of another classpath (or one made since)
            continue
        from_worker = row.pid is not None
        if compact:
            key: tuple[Any, ...] = (row.trigger_id, row.try_number, from_worker)
        else:
            key = (row.trigger_id, trigger.created_text, row.try_number, from_worker, row.ti_id_text)
        tasks[key] = WaitingTask(
            id=row.ti_id,
            dag_id=row.dag_id,
            run_id=row.run_id,
            task_id=row.task_id,
            map_index=row.map_index,
            try_number=row.try_number,
            trigger_id=row.trigger_id,
            deferred_at=trigger.created_date,
            from_worker=from_worker,
            kwargs=Trigger._decrypt_kwargs(trigger.encrypted_kwargs),
            job_id=job_id_for(row.dag_id, row.run_id, row.task_id, row.map_index, row.try_number),
        )
    return tasks


_waiting = _WaitingTasks()


def claim_waiting(session: Session, tasks: Sequence[WaitingTask]) -> set[uuid.UUID]:
    """Claim the task instances of ``tasks`` still deferred on the trigger they were read with; their ids.

    Only the rows are locked (PostgreSQL) or touched (SQLite); ``task_instances`` loads those to resume.
    """
    claimed: set[uuid.UUID] = set()
    for start in range(0, len(tasks), _CHUNK):
        chunk = tasks[start : start + _CHUNK]
        still_waiting = and_(
            tuple_(TaskInstance.id, TaskInstance.trigger_id).in_([(t.id, t.trigger_id) for t in chunk]),
            TaskInstance.state == TaskInstanceState.DEFERRED,
        )
        if is_postgres(session):
            query = with_row_locks(
                select(TaskInstance.id).where(still_waiting),
                session,
                of=TaskInstance,
                skip_locked=True,
                key_share=False,
            )
            claimed.update(session.scalars(query))
        else:
            touch = (
                update(TaskInstance)
                .where(still_waiting)
                .values(trigger_id=TaskInstance.trigger_id)
                .returning(TaskInstance.id)
                .execution_options(synchronize_session=False)
            )
            claimed.update(session.scalars(touch))
    return claimed


def task_instances(session: Session, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, TaskInstance]:
    """The task instances ``ids`` (claimed by this session), by id."""
    found: dict[uuid.UUID, TaskInstance] = {}
    for start in range(0, len(ids), _CHUNK):
        query = (
            select(TaskInstance)
            .where(TaskInstance.id.in_(ids[start : start + _CHUNK]))
            .options(lazyload(TaskInstance.dag_run))
        )
        found.update((ti.id, ti) for ti in session.scalars(query))
    return found


#: Task instances per statement (keeps the bound parameters well under both backends' limits).
_CHUNK = 500


def claim_deferred(session: Session, ti_id: str) -> TaskInstance | None:
    """The task instance ``ti_id`` if it is still deferred (on any trigger), claimed; else None."""
    query = select(TaskInstance).where(
        TaskInstance.id == uuid.UUID(ti_id), TaskInstance.state == TaskInstanceState.DEFERRED
    )
    if is_postgres(session):
        query = with_row_locks(query, session, of=TaskInstance, skip_locked=True, key_share=False)
        claimed: TaskInstance | None = session.scalar(query)
        return claimed
    ti: TaskInstance | None = session.scalar(query)
    if ti is None or ti.trigger_id is None or not _claim_sqlite(session, ti.id, ti.trigger_id):
        return None
    return ti


def _claim_sqlite(session: Session, ti_id: uuid.UUID, trigger_id: int) -> bool:
    """SQLite: prove the row is still deferred on this trigger and take the write lock until commit."""
    result = session.execute(
        update(TaskInstance)
        .where(
            TaskInstance.id == ti_id,
            TaskInstance.state == TaskInstanceState.DEFERRED,
            TaskInstance.trigger_id == trigger_id,
        )
        .values(trigger_id=TaskInstance.trigger_id)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0) == 1)


def resume(session: Session, ti: TaskInstance, payload: dict[str, Any], *, flush: bool = True) -> None:
    """Resume a claimed deferred task with ``payload`` as its trigger event (what a fired trigger does).

    ``flush=False``: leave the task's changes to the caller's next flush. Airflow flushes after each task
    it resumes: a cycle resuming a hundred grants then makes a hundred UPDATEs, one round trip each,
    where one flush after the last sends them in batches."""
    event = TriggerEvent(payload)  # type: ignore[no-untyped-call]  # untyped upstream __init__
    handler_session = session if flush else typing.cast(Session, _FlushLater(session))
    handle_event_submit(event, task_instance=ti, session=handler_session)


class _FlushLater:
    """A session whose ``flush`` does nothing: the caller flushes once, after the last task it resumes
    (every other use goes to the session itself)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def flush(self, objects: object = None) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def write_resumed(session: Session, tis: Sequence[TaskInstance]) -> None:
    """Write what ``resume(flush=False)`` changed on the task instances ``tis`` in bulk, then flush the
    session (whatever else it holds, and any of ``tis`` changed in another way).

    The unit of work would send one UPDATE per task instance (one round trip each on PostgreSQL) after
    its bookkeeping of each: a cycle turning over its capacity resumes hundreds (a fifth of its time).
    Here the task instances whose changes are all plain columns are written together, one statement
    per set of columns (``ledger.bulk_update``), their ``updated_at`` set as the unit of work sets it,
    and then expunged: the session forgets them (they hold what was written; a later query in the
    session reads them again). When a statement fails, the caller's rollback expires them (the session
    still knows them as changed), and they are read again as the database has them."""
    now = datetime.now(UTC)  # what ``updated_at``'s ``onupdate`` gives
    by_columns: dict[tuple[str, ...], list[TaskInstance]] = defaultdict(list)
    for ti in tis:
        changed = _TI_ATTRIBUTES - inspect(ti).unmodified
        if changed and changed <= _TI_COLUMNS:
            ti.updated_at = now
            by_columns[tuple(sorted(changed | {"updated_at"}))].append(ti)
    connection = session.connection()
    for names, written in by_columns.items():
        update_in_bulk(connection, _TI_TABLE, names, written)
        for ti in written:
            session.expunge(ti)  # (marking each attribute as written left them to the flush: x1.5)
    session.flush()


_TI_TABLE = typing.cast(Table, TaskInstance.__table__)
#: Every attribute of a task instance; those that are its table's columns under their own name.
_TI_ATTRIBUTES = frozenset(inspect(TaskInstance).attrs.keys())
_TI_COLUMNS = frozenset(
    attribute.key
    for attribute in inspect(TaskInstance).column_attrs
    if len(attribute.columns) == 1
    and attribute.columns[0].table is _TI_TABLE
    and attribute.columns[0].name == attribute.key
)


def task_views(
    session: Session,
    job_ids: Sequence[str] | None = None,
    *,
    waiting_too: bool = True,
    job_queue_name: str | None = None,
) -> dict[str, TaskView]:
    """The task instance of every open (not final) job, by job id; jobs without one are left out.

    ``waiting_too=False``: leave out the RUNNABLE jobs (a cycle reads their tasks as waiting requests,
    ``waiting_on``, and a RUNNABLE job whose task it does not find waiting is viewed by its id: at 10,000
    waiting that is nearly every row, and their join to ``task_instance`` was most of a steady cycle's
    read). ``job_ids``: only those jobs; ``job_queue_name``: only that job queue's.

    For a job whose try is over (the task instance ended it, or moved on from it), the view also carries
    what Airflow recorded about that try (``_what_ended``), so its reason can say what happened.
    """
    statuses = OPEN_STATUSES if waiting_too else _HOLDING_OR_STOPPING
    jobs_query = select(JobRow.job_id, JobRow.try_number, JobRow.ti_id).where(JobRow.status.in_(statuses))
    if job_ids is not None:
        jobs_query = jobs_query.where(JobRow.job_id.in_(job_ids))
    if job_queue_name is not None:
        jobs_query = jobs_query.where(JobRow.job_queue_name == job_queue_name)
    rows = _views_by_ti_id(session, session.execute(jobs_query).all())
    moved = [job_id for job_id, row in rows.items() if row is None]  # a later try, or no id known
    for start in range(0, len(moved), _CHUNK):
        found = session.execute(_by_key(moved[start : start + _CHUNK]))
        rows.update((row.job_id, _ViewRow(*row)) for row in found)
    views: dict[str, TaskView] = {}
    over: dict[str, _Try] = {}
    for row in rows.values():
        if row is None:  # its task instance is gone
            continue
        state = None if row.state is None else str(getattr(row.state, "value", row.state))
        views[row.job_id] = TaskView(
            state=state,
            try_number=row.try_number,
            ti_id=str(row.id),
            trigger_classpath=row.classpath,
            deferred_at=row.created_date,
            from_worker=row.pid is not None,
        )
        current = is_current_try(row.job_try_number, row.job_ti_id, row.try_number, str(row.id))
        if not current or state not in UNEXPLAINED_STATES:
            key = (row.dag_id, row.run_id, row.task_id, row.map_index, row.job_try_number)
            over[row.job_id] = _Try(key, row.job_ti_id)
    if over:
        events, scheduler_gone = _what_ended(session, over)
        for job_id in over:
            views[job_id] = replace(
                views[job_id],
                try_events=frozenset(events.get(job_id, ())),
                scheduler_gone=job_id in scheduler_gone,
            )
    return views


def _view_columns() -> tuple[Any, ...]:
    ti = TaskInstance
    return (
        ti.dag_id,
        ti.run_id,
        ti.task_id,
        ti.map_index,
        ti.state,
        ti.try_number,
        ti.id,
        ti.pid,
        Trigger.classpath,
        Trigger.created_date,
    )


def _views_by_ti_id(session: Session, jobs: Sequence[Any]) -> dict[str, Any]:
    """Each job's task instance read by the id its current try had (the primary key: the plan cannot go
    wrong on a fresh table's missing statistics, as a join on the task's key did), by job id; None where
    that id is no longer a task instance's (a later try has another) or the job names none."""
    by_ti: dict[uuid.UUID, tuple[str, int, str]] = {}
    rows: dict[str, Any] = {}
    for job_id, try_number, ti_id in jobs:
        rows[job_id] = None
        try:
            by_ti[uuid.UUID(ti_id)] = (job_id, try_number, ti_id)
        except (TypeError, ValueError):
            continue
    ids = list(by_ti)
    for start in range(0, len(ids), _CHUNK):
        query = (
            select(*_view_columns())
            .outerjoin(Trigger, TaskInstance.trigger_id == Trigger.id)
            .where(TaskInstance.id.in_(ids[start : start + _CHUNK]))
        )
        for row in session.execute(query):
            job_id, try_number, ti_id = by_ti[row.id]
            rows[job_id] = _ViewRow(job_id, try_number, ti_id, *row)
    return rows


def _of_the_jobs_task(model: Any) -> Any:
    """The join condition of ``model``'s rows (task instances, task state) on the job's task instance key."""
    return and_(
        model.dag_id == JobRow.dag_id,
        model.run_id == JobRow.run_id,
        model.task_id == JobRow.task_id,
        model.map_index == JobRow.map_index,
    )


def _by_key(job_ids: Sequence[str]) -> Any:
    """The task instances of ``job_ids`` found by their task's key (its current try, whatever its id)."""
    ti = TaskInstance
    return (
        select(
            JobRow.job_id,
            JobRow.try_number.label("job_try_number"),
            JobRow.ti_id.label("job_ti_id"),
            *_view_columns(),
        )
        .join(ti, _of_the_jobs_task(ti))
        .outerjoin(Trigger, ti.trigger_id == Trigger.id)
        .where(JobRow.job_id.in_(job_ids))
    )


class _ViewRow(NamedTuple):
    job_id: str
    job_try_number: int
    job_ti_id: str | None
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    state: Any
    try_number: int
    id: uuid.UUID
    pid: int | None
    classpath: str | None
    created_date: datetime | None


#: The status column's values of an open job that is not waiting (RUNNABLE).
_HOLDING_OR_STOPPING = [value for value in OPEN_STATUSES if value != JobStatus.RUNNABLE.value]


@dataclass(frozen=True, slots=True)
class _Try:
    """One try of a task instance: (dag_id, run_id, task_id, map_index, try_number), and its id."""

    key: tuple[str, str, str, int, int]
    ti_id: str | None


def _what_ended(session: Session, over: dict[str, _Try]) -> tuple[dict[str, set[str]], set[str]]:
    """For jobs whose try is over, by job id: the ``TRY_EVENTS`` Airflow logged for that try, and the jobs
    whose try was queued by a scheduler that no longer runs (its ``task_instance_history`` row, written
    when the try was archived, names that scheduler's job)."""
    keys = {each.key: job_id for job_id, each in over.items()}
    events: dict[str, set[str]] = {}
    key_list = list(keys)
    for start in range(0, len(key_list), _CHUNK):
        logged = select(Log.dag_id, Log.run_id, Log.task_id, Log.map_index, Log.try_number, Log.event).where(
            tuple_(Log.dag_id, Log.run_id, Log.task_id, Log.map_index, Log.try_number).in_(
                key_list[start : start + _CHUNK]
            ),
            Log.event.in_(TRY_EVENTS),
        )
        for *key, event in session.execute(logged):
            events.setdefault(keys[tuple(key)], set()).add(event)  # type: ignore[index]  # a key read back
    by_ti = {uuid.UUID(each.ti_id): job_id for job_id, each in over.items() if each.ti_id is not None}
    gone: set[str] = set()
    ti_ids = list(by_ti)
    for start in range(0, len(ti_ids), _CHUNK):
        queued_by_stopped_scheduler = (
            select(TaskInstanceHistory.task_instance_id)
            .join(Job, Job.id == TaskInstanceHistory.queued_by_job_id)
            .where(
                TaskInstanceHistory.task_instance_id.in_(ti_ids[start : start + _CHUNK]),
                Job.state != JobState.RUNNING,
            )
        )
        gone.update(by_ti[ti_id] for ti_id in session.scalars(queued_by_stopped_scheduler))
    return events, gone


def training_records(session: Session, job_queue_name: str | None = None) -> dict[str, TrainingJobRecord]:
    """What each open job's task (of ``job_queue_name`` only, when given) last recorded under
    ``TRAINING_JOB_KEY``, by job id."""
    store = TaskStateStoreModel
    query = (
        select(JobRow.job_id, store.value)
        .join(store, _of_the_jobs_task(store))
        .where(JobRow.status.in_(OPEN_STATUSES), store.key == TRAINING_JOB_KEY)
    )
    if job_queue_name is not None:
        query = query.where(JobRow.job_queue_name == job_queue_name)
    records: dict[str, TrainingJobRecord] = {}
    for job_id, value in session.execute(query).all():
        try:
            document = json.loads(value)
        except ValueError:
            continue  # not ours to judge; an unreadable record is treated as no record
        if isinstance(document, dict) and isinstance(document.get("lease_id"), str):
            records[job_id] = document  # type: ignore[assignment]  # checked: a JSON object with a lease
    return records


def write_signal(session: Session, row: JobRow, document: dict[str, Any]) -> None:
    """Write the preemption signal a task running in a worker polls (its ``task_state_store``)."""
    if (
        session.scalar(select(DagRun.id).where(DagRun.dag_id == row.dag_id, DagRun.run_id == row.run_id))
        is None
    ):
        return  # the DAG run is gone; nothing can read the signal
    scope = TaskScope(row.dag_id, row.run_id, row.task_id, row.map_index)
    get_state_backend().set(scope, PREEMPT_KEY, json.dumps(document), session=session)


def clear_unresponsive(session: Session, ti_id: str) -> bool:
    """Last resort for a task that does not stop when told: clear it (its try ends)."""
    ti = session.scalar(select(TaskInstance).where(TaskInstance.id == uuid.UUID(ti_id)))
    if ti is None:
        return False
    clear_task_instances([ti], session, dag_run_state=False)
    return True


def scheduled_task_keys(
    session: Session, ti_ids: Sequence[str], job_ids: Sequence[str]
) -> list[TaskInstanceKey]:
    """The keys of the task instances named (by id, or by their ledger job) that are SCHEDULED now.

    After a cycle has committed: the tasks it resumed (grants, preempt events, rejections) that wait for
    the scheduler to queue them.
    """
    ids = set(ti_ids)
    if job_ids:
        ids.update(
            ti_id
            for ti_id in session.scalars(select(JobRow.ti_id).where(JobRow.job_id.in_(job_ids)))
            if ti_id is not None
        )
    if not ids:
        return []
    rows = session.execute(
        select(
            TaskInstance.dag_id,
            TaskInstance.task_id,
            TaskInstance.run_id,
            TaskInstance.try_number,
            TaskInstance.map_index,
        ).where(
            TaskInstance.id.in_([uuid.UUID(each) for each in ids]),
            TaskInstance.state == TaskInstanceState.SCHEDULED,
        )
    )
    return [TaskInstanceKey(*row) for row in rows]
