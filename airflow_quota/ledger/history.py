"""What-if on real history: the ledger's jobs of one job queue as a simulator trace (``sim/trace.py``).

Each job first submitted in ``[since, until)`` becomes one ``TraceJob``:

- ``submitTime``: seconds from the first exported job's first submission (``HistoryTrace.origin``);
- ``jobName``: its job id made a valid name (``job_name_for``), ``quotaShareName``, ``capacityUnit``,
  ``instanceCount`` and ``preemptionRetriesBeforeTermination`` as requested;
- ``schedulingPriority``: as submitted (before any ``jobs update-priority``);
- ``duration``: the seconds it held capacity over all its attempts, each from its grant until its units
  were free again (its REQUEUED, SUCCEEDED or FAILED row), a preemption's stop phase included: what the
  simulator counts as work done when a preempted job resumes where it stopped (checkpoint interval 0);
  empty (it runs until the end) for a job that has not ended yet.

Jobs that ended without ever being granted held nothing and are left out (``left_out`` counts them). The
attempts are replayed from the audit log in its order; a retry that took over its try's capacity
(HANDED_OVER) holds it from then on. ``stop_seconds`` lists how long each completed preemption's stop took
(PREEMPTED to REQUEUED or FAILED), so a replay can be given a realistic ``--stop-seconds``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    ARRAY,
    DateTime,
    String,
    Text,
    any_,
    bindparam,
    cast,
    literal_column,
    select,
    type_coerce,
)
from sqlalchemy.orm import Session

from airflow_quota.engine.config import MAX_NAME_LENGTH
from airflow_quota.engine.model import JobStatus
from airflow_quota.ledger.models import AuditKind, AuditRow, JobRow
from airflow_quota.sim.trace import TraceJob

#: Job ids per audit query (an IN list of job ids stays well within every database's limits).
CHUNK = 2000
#: Jobs read and replayed at a time (their audit rows are in memory together).
BATCH = 2000
_JOB = JobRow.__table__
_AUDIT = AuditRow.__table__
#: An audit row as the export reads it: id, job id, kind, at, related job id, details.
_AuditColumns = tuple[int, str | None, str, datetime, str | None, str | None]
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_-]+")
_ATTEMPT_KINDS = (
    AuditKind.GRANTED,
    AuditKind.PREEMPTED,
    AuditKind.REQUEUED,
    AuditKind.SUCCEEDED,
    AuditKind.FAILED,
    AuditKind.HANDED_OVER,
    AuditKind.PRIORITY_CHANGED,
)
_RELEASES = (AuditKind.REQUEUED.value, AuditKind.SUCCEEDED.value, AuditKind.FAILED.value)


class HistoryError(ValueError):
    """The history cannot be exported as asked (the message says what to give instead)."""


@dataclass(frozen=True, slots=True)
class HistoryTrace:
    """The exported jobs in submission order, and what the export measured on the way."""

    job_queue_name: str
    #: The first exported job's first submission: the trace's time 0 (None when no job was exported).
    origin: datetime | None
    jobs: list[TraceJob]
    #: Trace job name -> the ledger's job id.
    job_ids: dict[str, str]
    #: Jobs that ended without ever being granted (not in the trace).
    left_out: int = 0
    #: Seconds each completed preemption's stop took, in the order they completed.
    stop_seconds: list[float] = field(default_factory=list)
    #: GPU-seconds each preemption lost (its PREEMPTED audit row's ``lostUnitSeconds``), in decision order.
    lost_unit_seconds: list[float] = field(default_factory=list)


def export_history(
    session: Session,
    *,
    since: datetime,
    until: datetime | None = None,
    job_queue_name: str | None = None,
) -> HistoryTrace:
    """The jobs first submitted in ``[since, until)`` to ``job_queue_name`` (or to the one queue that has
    jobs then) as a trace, all in memory (``HistoryStream`` writes a trace of any length in bounded
    memory); ``HistoryError`` when jobs of several queues match and none was named."""
    stream = HistoryStream(session, since=since, until=until, job_queue_name=job_queue_name, keep_ids=True)
    jobs = list(stream)
    return HistoryTrace(
        stream.job_queue_name,
        stream.origin,
        jobs,
        stream.job_ids,
        stream.left_out,
        stream.stop_seconds,
        stream.lost_unit_seconds,
    )


class HistoryStream:
    """The trace of the jobs first submitted in ``[since, until)``, read as it is iterated: jobs a batch
    at a time in submission order (a server-side cursor on PostgreSQL), each batch's audit rows by their
    job ids, so memory stays bounded however long the history (``benchmarks/history_export.py``). What
    the export measured (``origin``, ``left_out``, ``stop_seconds``, ``exported``) is complete once it
    has been iterated to its end. ``HistoryError`` (when it is made) when jobs of several job queues match
    and none was named."""

    def __init__(
        self,
        session: Session,
        *,
        since: datetime,
        until: datetime | None = None,
        job_queue_name: str | None = None,
        keep_ids: bool = False,
    ) -> None:
        # Plain columns on the session's connection: no ORM objects nor ORM row processing per row.
        self._connection = session.connection()
        self._filters = [_JOB.c.submitted_at >= since]
        if until is not None:
            self._filters.append(_JOB.c.submitted_at < until)
        if job_queue_name is not None:
            self._filters.append(_JOB.c.job_queue_name == job_queue_name)
        queues = sorted(
            self._connection.scalars(select(_JOB.c.job_queue_name).where(*self._filters).distinct())
        )
        if len(queues) > 1:
            raise HistoryError(
                f"jobs of {len(queues)} job queues were submitted then ({', '.join(queues)}); a trace "
                "replays one job queue: give --queue NAME"
            )
        self.job_queue_name = queues[0] if queues else (job_queue_name or "")
        self.origin: datetime | None = None
        self.exported = 0
        self.left_out = 0
        #: Trace job name -> the ledger's job id (only with ``keep_ids``).
        self.job_ids: dict[str, str] = {}
        self._keep_ids = keep_ids
        self._names: set[str] = set()
        self._stops: list[tuple[datetime, float]] = []
        self._lost: list[tuple[datetime, float]] = []
        # PostgreSQL's driver gives times with their zone already: read them as they come (Airflow's
        # UtcDateTime converts each again, a second a million rows); SQLite's text needs it.
        postgres = self._connection.dialect.name == "postgresql"
        self._at = type_coerce(_AUDIT.c.at, DateTime(timezone=True)) if postgres else _AUDIT.c.at
        self._submitted_at = (
            type_coerce(_JOB.c.submitted_at, DateTime(timezone=True)) if postgres else _JOB.c.submitted_at
        )
        # A batch's job ids as one array on PostgreSQL (an IN list of 2,000 is rendered anew each time).
        kinds = [kind.value for kind in _ATTEMPT_KINDS]
        ids = (
            _AUDIT.c.job_id == any_(bindparam("ids", type_=ARRAY(String)))
            if postgres
            else _AUDIT.c.job_id.in_(bindparam("ids", expanding=True))
        )
        self._audit_query = select(*self._audit_columns()).where(ids, _AUDIT.c.kind.in_(kinds))
        self._audit_sql: str | None = None
        if postgres:  # the kinds written in (constants), the job ids the one parameter
            written: list[Any] = [literal_column(f"'{kind}'") for kind in kinds]
            query = select(*self._audit_columns()).where(ids, _AUDIT.c.kind.in_(written))
            self._audit_sql = str(query.compile(dialect=self._connection.dialect))

    @property
    def stop_seconds(self) -> list[float]:
        """Seconds each completed preemption's stop took, in the order they completed."""
        return [seconds for _, seconds in sorted(self._stops)]

    @property
    def lost_unit_seconds(self) -> list[float]:
        """GPU-seconds each preemption of the exported jobs lost, in the order they were decided (those
        recorded before lost work was measured are left out)."""
        return [lost for _, lost in sorted(self._lost)]

    def __iter__(self) -> Iterator[TraceJob]:
        query = (
            select(
                _JOB.c.job_id,
                _JOB.c.quota_share_name,
                _JOB.c.status,
                _JOB.c.scheduling_priority,
                _JOB.c.capacity_unit,
                _JOB.c.instance_count,
                _JOB.c.preemption_retries_before_termination,
                self._submitted_at,
            )
            .where(*self._filters)
            .order_by(_JOB.c.submitted_at, _JOB.c.submit_seq, _JOB.c.job_id)
            .execution_options(yield_per=BATCH)
        )
        final_statuses = {status.value for status in JobStatus if status.is_final}
        handovers = self._handovers()
        for batch in self._connection.execute(query).partitions():
            job_ids = [row[0] for row in batch]
            attempts = _replay_attempts(self._audit_rows(job_ids, handovers), job_ids)
            for job_id, share, status, priority, unit, count, retries, submitted_at in batch:
                if self.origin is None:
                    self.origin = submitted_at
                record = attempts.get(job_id) or _Attempts()
                self._stops += record.stops
                self._lost += record.lost
                final = status in final_statuses
                if final and not record.granted:
                    self.left_out += 1
                    continue
                name = job_name_for(job_id, taken=self._names)
                self._names.add(name)
                if self._keep_ids:
                    self.job_ids[name] = job_id
                self.exported += 1
                yield TraceJob(
                    submit_time=(submitted_at - self.origin).total_seconds(),
                    job_name=name,
                    quota_share_name=share,
                    scheduling_priority=record.first_priority
                    if record.first_priority is not None
                    else priority,
                    capacity_unit=unit,
                    instance_count=count,
                    duration=record.held_seconds if final else None,
                    preemption_retries_before_termination=retries,
                )

    def _handovers(self) -> dict[str, list[_AuditColumns]]:
        """The HANDED_OVER rows of the exported jobs (retries that took over their try's capacity), by the
        job that handed over: few (one per retry that found its try's training job still running), read
        once so that a try is released by a retry exported in a later batch."""
        found: dict[str, list[_AuditColumns]] = defaultdict(list)
        for row in self._connection.execute(
            select(*self._audit_columns())
            .join_from(_AUDIT, _JOB, _JOB.c.job_id == _AUDIT.c.job_id)
            .where(
                _AUDIT.c.kind == AuditKind.HANDED_OVER.value,
                _AUDIT.c.related_job_id.is_not(None),
                *self._filters,
            )
        ).all():
            found[row[4]].append(row)
        return found

    def _audit_columns(self) -> tuple[Any, ...]:
        """An audit row as the export reads it (``_AuditColumns``): its details as their JSON text, parsed
        only for the rare row that needs them (``_replay_attempts``)."""
        return (
            _AUDIT.c.id,
            _AUDIT.c.job_id,
            _AUDIT.c.kind,
            self._at,
            _AUDIT.c.related_job_id,
            cast(_AUDIT.c.details, Text),
        )

    def _audit_rows(
        self, job_ids: Sequence[str], handovers: dict[str, list[_AuditColumns]]
    ) -> list[_AuditColumns]:
        """The audit rows that tell these jobs' attempts, in the log's order: their own, and the
        HANDED_OVER rows of the exported retries that took over one of these jobs' capacity."""
        rows: list[_AuditColumns] = []
        for start in range(0, len(job_ids), CHUNK):
            rows += self._read_audit(list(job_ids[start : start + CHUNK]))
        handed = [row for job_id in job_ids for row in handovers.get(job_id, ())]
        if handed:  # a retry's HANDED_OVER row may be among these jobs' own rows too: once
            seen = {row[0] for row in rows}
            rows += [row for row in handed if row[0] not in seen]
        rows.sort(key=itemgetter(0))
        return rows

    def _read_audit(self, job_ids: list[str]) -> list[_AuditColumns]:
        """These jobs' own audit rows of ``_ATTEMPT_KINDS``. On PostgreSQL through the driver's cursor,
        its rows as it makes them (plain tuples, the times with their zone): the rows are most of the
        export's work, and SQLAlchemy's result rows cost as much again."""
        if self._audit_sql is None:
            return list(self._connection.execute(self._audit_query, {"ids": job_ids}).all())
        cursor = self._connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(self._audit_sql, {"ids": job_ids})
            return list(cursor.fetchall())
        finally:
            cursor.close()


@dataclass(slots=True)
class _Attempts:
    """One job's attempts as the audit log tells them."""

    granted: bool = False
    held_since: datetime | None = None
    held_seconds: float = 0.0
    preempted_at: datetime | None = None
    #: (when the stop completed, how long it took)
    stops: list[tuple[datetime, float]] = field(default_factory=list)
    #: (when a preemption was decided, the GPU-seconds it lost)
    lost: list[tuple[datetime, float]] = field(default_factory=list)
    first_priority: int | None = None

    def hold(self, at: datetime) -> None:
        self.granted = True
        self.held_since = at

    def release(self, at: datetime) -> None:
        if self.held_since is not None:
            self.held_seconds += (at - self.held_since).total_seconds()
        self.held_since = None


def _replay_attempts(rows: list[_AuditColumns], job_ids: Sequence[str]) -> dict[str, _Attempts]:
    """These jobs' attempts, each replayed from its audit ``rows`` in the log's order (``_audit_rows``:
    its own, and its retries' HANDED_OVER rows that took over its capacity)."""
    attempts: dict[str, _Attempts] = defaultdict(_Attempts)
    these = set(job_ids)
    granted, preempted, handed_over, priority = (
        AuditKind.GRANTED.value,
        AuditKind.PREEMPTED.value,
        AuditKind.HANDED_OVER.value,
        AuditKind.PRIORITY_CHANGED.value,
    )
    for _, job_id, kind, at, related_job_id, details in rows:
        if job_id is None:
            continue
        if kind == handed_over and related_job_id is not None:
            attempts[related_job_id].release(at)
            if job_id in these:
                attempts[job_id].hold(at)
            continue
        record = attempts[job_id]
        if kind == granted:
            record.hold(at)
        elif kind == preempted:
            record.preempted_at = record.preempted_at or at
            lost = (json.loads(details or "null") or {}).get("lostUnitSeconds")
            if isinstance(lost, int | float):
                record.lost.append((at, float(lost)))
        elif kind in _RELEASES:
            if record.preempted_at is not None and record.held_since is not None:
                record.stops.append((at, (at - record.preempted_at).total_seconds()))
            record.preempted_at = None
            record.release(at)
        elif kind == priority and record.first_priority is None:
            old = (json.loads(details or "null") or {}).get("old")
            record.first_priority = old if isinstance(old, int) else None
    return {job_id: attempts[job_id] for job_id in job_ids if job_id in attempts}


def job_name_for(job_id: str, *, taken: Collection[str] = ()) -> str:
    """``job_id`` as a trace's jobName: runs of other characters than letters, digits, '-' and '_' become
    '_', at most ``MAX_NAME_LENGTH`` long (a long id ends in 12 hex digits of its SHA-256), and not one of
    ``taken`` (a '-2', '-3', ... suffix otherwise)."""
    name = _NOT_IN_A_NAME.sub("_", job_id).strip("_") or "job"
    if len(name) > MAX_NAME_LENGTH:
        name = f"{name[: MAX_NAME_LENGTH - 13]}-{hashlib.sha256(job_id.encode()).hexdigest()[:12]}"
    candidate, suffix = name, 1
    while candidate in taken:
        suffix += 1
        tail = f"-{suffix}"
        candidate = name[: MAX_NAME_LENGTH - len(tail)] + tail
    return candidate
