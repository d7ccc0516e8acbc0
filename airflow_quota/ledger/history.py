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
import re
from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Row, select
from sqlalchemy.orm import Session

from airflow_quota.engine.config import MAX_NAME_LENGTH
from airflow_quota.engine.model import JobStatus
from airflow_quota.ledger.models import AuditKind, AuditRow, JobRow
from airflow_quota.sim.trace import TraceJob

#: Job ids per audit query (an IN list of job ids stays well within every database's limits).
CHUNK = 500
#: Jobs read and replayed at a time (their audit rows are in memory together).
BATCH = 2000
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_-]+")
_ATTEMPT_KINDS = (
    AuditKind.GRANTED,
    AuditKind.PREEMPTED,
    AuditKind.TERMINATED,
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
        stream.job_queue_name, stream.origin, jobs, stream.job_ids, stream.left_out, stream.stop_seconds
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
        self._session = session
        self._filters = [JobRow.submitted_at >= since]
        if until is not None:
            self._filters.append(JobRow.submitted_at < until)
        if job_queue_name is not None:
            self._filters.append(JobRow.job_queue_name == job_queue_name)
        queues = sorted(session.scalars(select(JobRow.job_queue_name).where(*self._filters).distinct()))
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

    @property
    def stop_seconds(self) -> list[float]:
        """Seconds each completed preemption's stop took, in the order they completed."""
        return [seconds for _, seconds in sorted(self._stops)]

    def __iter__(self) -> Iterator[TraceJob]:
        columns = (
            JobRow.job_id,
            JobRow.quota_share_name,
            JobRow.status,
            JobRow.scheduling_priority,
            JobRow.capacity_unit,
            JobRow.instance_count,
            JobRow.preemption_retries_before_termination,
            JobRow.submitted_at,
        )
        query = (
            select(*columns)
            .where(*self._filters)
            .order_by(JobRow.submitted_at, JobRow.submit_seq, JobRow.job_id)
            .execution_options(yield_per=BATCH)
        )
        for batch in self._session.execute(query).partitions():
            attempts = _replay_attempts(self._session, [row.job_id for row in batch], self._filters)
            for row in batch:
                if self.origin is None:
                    self.origin = row.submitted_at
                record = attempts.get(row.job_id) or _Attempts()
                self._stops += record.stops
                final = JobStatus(row.status).is_final
                if final and not record.granted:
                    self.left_out += 1
                    continue
                name = job_name_for(row.job_id, taken=self._names)
                self._names.add(name)
                if self._keep_ids:
                    self.job_ids[name] = row.job_id
                self.exported += 1
                yield TraceJob(
                    submit_time=(row.submitted_at - self.origin).total_seconds(),
                    job_name=name,
                    quota_share_name=row.quota_share_name,
                    scheduling_priority=record.first_priority
                    if record.first_priority is not None
                    else row.scheduling_priority,
                    capacity_unit=row.capacity_unit,
                    instance_count=row.instance_count,
                    duration=record.held_seconds if final else None,
                    preemption_retries_before_termination=row.preemption_retries_before_termination,
                )


@dataclass(slots=True)
class _Attempts:
    """One job's attempts as the audit log tells them."""

    granted: bool = False
    held_since: datetime | None = None
    held_seconds: float = 0.0
    preempted_at: datetime | None = None
    #: (when the stop completed, how long it took)
    stops: list[tuple[datetime, float]] = field(default_factory=list)
    first_priority: int | None = None

    def hold(self, at: datetime) -> None:
        self.granted = True
        self.held_since = at

    def release(self, at: datetime) -> None:
        if self.held_since is not None:
            self.held_seconds += (at - self.held_since).total_seconds()
        self.held_since = None


def _replay_attempts(
    session: Session, job_ids: Sequence[str], exported: Sequence[ColumnElement[bool]]
) -> dict[str, _Attempts]:
    """These jobs' attempts, each replayed from its audit rows in the log's order: its own, and the
    HANDED_OVER rows of its retries (``exported``: the filters of the jobs exported) that took over its
    capacity."""
    attempts: dict[str, _Attempts] = defaultdict(_Attempts)
    these = set(job_ids)
    for row in _audit_rows(session, job_ids, exported):
        if row.job_id is None:
            continue
        kind = row.kind
        if kind == AuditKind.HANDED_OVER.value and row.related_job_id is not None:
            attempts[row.related_job_id].release(row.at)
            if row.job_id in these:
                attempts[row.job_id].hold(row.at)
            continue
        record = attempts[row.job_id]
        if kind == AuditKind.GRANTED.value:
            record.hold(row.at)
        elif kind == AuditKind.PREEMPTED.value:
            record.preempted_at = record.preempted_at or row.at
        elif kind in _RELEASES:
            if record.preempted_at is not None and record.held_since is not None:
                record.stops.append((row.at, (row.at - record.preempted_at).total_seconds()))
            record.preempted_at = None
            record.release(row.at)
        elif kind == AuditKind.PRIORITY_CHANGED.value and record.first_priority is None:
            old = (row.details or {}).get("old")
            record.first_priority = old if isinstance(old, int) else None
    return {job_id: attempts[job_id] for job_id in job_ids if job_id in attempts}


def _audit_rows(
    session: Session, job_ids: Sequence[str], exported: Sequence[ColumnElement[bool]]
) -> list[Row[Any]]:
    """The audit rows that tell these jobs' attempts, in the log's order: their own, and the HANDED_OVER
    rows of exported jobs (``exported``: their filters) that took over one of these jobs' capacity."""
    columns = (
        AuditRow.id,
        AuditRow.job_id,
        AuditRow.kind,
        AuditRow.at,
        AuditRow.related_job_id,
        AuditRow.details,
    )
    kinds = [kind.value for kind in _ATTEMPT_KINDS]
    rows: list[Row[Any]] = []
    for start in range(0, len(job_ids), CHUNK):
        chunk = job_ids[start : start + CHUNK]
        rows += session.execute(select(*columns).where(AuditRow.job_id.in_(chunk), AuditRow.kind.in_(kinds)))
        rows += session.execute(
            select(*columns)
            .join(JobRow, JobRow.job_id == AuditRow.job_id)
            .where(
                AuditRow.related_job_id.in_(chunk),
                AuditRow.kind == AuditKind.HANDED_OVER.value,
                *exported,
            )
        )
    return sorted({row.id: row for row in rows}.values(), key=lambda row: row.id)  # a row found twice once


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
