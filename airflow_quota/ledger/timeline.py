"""A job queue's history as a timeline: which job held which unit of capacity when, and who waited.

Built from the audit log alone (it is kept as long as the timeline can reach back), replayed in its order:

- GRANTED opens a *bar* per unit of capacity granted (``instanceCount`` of them, the last ``borrowed`` marked
  borrowed) on *rows* of its capacity unit (a row is one unit of capacity: a GPU, an instance). A local
  unit's grant names its device indices (``devices``): its bars are on those rows, one row per GPU of the
  host. Otherwise (remote instances, or a grant recorded before devices were) the ledger has counts, not
  identities, and the bars are laid out on the lowest free rows;
- PREEMPTED ends the RUNNING phase and opens a STOPPING one on the same rows, naming the preemptor (the
  victim keeps its capacity until its training job has stopped: two-phase preemption); a TERMINATED job
  being stopped likewise, with no preemptor;
- REQUEUED, SUCCEEDED and FAILED end the job's bars (and REQUEUED starts a wait); HANDED_OVER moves the old
  try's bars to its retry on the same rows; PRIORITY_CHANGED changes the priority of the bars after it;
- a job waits from its submission to its grant, and from each requeue to its next grant; a wait that goes
  on also says the engine's reason for it now (the job's statusReason).

Only the jobs that may touch the window are read (submitted by its end, and unfinished or last changed
after its start), newest first up to ``MAX_TIMELINE_JOBS``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import astuple, dataclass, field
from datetime import datetime
from enum import StrEnum

from sqlalchemy import ColumnElement, Select, and_, func, or_, select
from sqlalchemy.orm import Session

from airflow_quota.engine.devices import LOCAL_UNIT_PREFIX
from airflow_quota.engine.model import JobStatus
from airflow_quota.ledger.job_rows import FINAL_STATUSES
from airflow_quota.ledger.models import AuditKind, AuditRow, JobQueueRow, JobRow

#: A job's statuses before it ends (named, not "not final", so the query can use the status index).
UNFINISHED_STATUSES = [status.value for status in JobStatus if status.value not in FINAL_STATUSES]
#: The most jobs one timeline replays (the newest by submission); the timeline says when it left some out.
MAX_TIMELINE_JOBS = 500


class Phase(StrEnum):
    """What a job does with the capacity a bar shows."""

    #: Granted and not told to stop (SCHEDULED, STARTING or RUNNING).
    RUNNING = "RUNNING"
    #: Preempted (or terminated) and stopping its training job: the capacity is still held.
    STOPPING = "STOPPING"


@dataclass(slots=True)
class Bar:
    """One job's hold of one unit of capacity (one row) over one phase."""

    job_id: str
    quota_share_name: str
    scheduling_priority: int
    capacity_unit: str
    row: int
    borrowed: bool
    attempt: int | None
    phase: Phase
    start: datetime
    #: None: still held at the end of the window.
    end: datetime | None = None
    #: The audit kind that ended the phase: PREEMPTED, TERMINATED, REQUEUED, SUCCEEDED, FAILED, HANDED_OVER.
    ended_by: str | None = None
    #: A STOPPING phase's preemptor (None when the job was terminated).
    preempted_by: str | None = None
    rule: str | None = None
    #: Why the phase began, as the audit log words it.
    reason: str = ""
    #: The GPU's device index, when the grant named it (a local unit); the bar is then on its row.
    device: int | None = None
    #: A STOPPING phase after a preemption: the GPU-seconds the preemption lost (its PREEMPTED row's
    #: ``lostUnitSeconds``, for all of the job's units) and what it counts from (``checkpoint``, ``start``).
    lost_unit_seconds: float | None = None
    lost_since: str | None = None


@dataclass(slots=True)
class Wait:
    """A period a job waited for capacity (RUNNABLE)."""

    start: datetime
    end: datetime | None
    reason: str


@dataclass(slots=True)
class TimelineJob:
    """A job the timeline shows, as it is now, with its waiting periods in the window."""

    row: JobRow
    waits: list[Wait] = field(default_factory=list)


@dataclass(slots=True)
class UnitTimeline:
    """One capacity unit of the queue: its capacity now, how many rows the bars need, and the bars."""

    capacity_unit: str
    capacity: int
    rows: int
    bars: list[Bar]
    #: The rows are the host's device indices (a local unit): row ``i`` is GPU ``i``.
    devices: bool = False


@dataclass(slots=True)
class QueueTimeline:
    job_queue_name: str
    since: datetime | None
    until: datetime
    #: When the queue's first job (in the ledger) was submitted; None when it has none.
    first_submitted_at: datetime | None
    units: list[UnitTimeline]
    jobs: list[TimelineJob]
    #: More jobs touched the window than ``MAX_TIMELINE_JOBS``: the oldest were left out.
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class TaskInstanceKey:
    """Narrows a timeline to the jobs (every try) of one Airflow task instance."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1


def first_submitted_at(session: Session, job_queue_name: str) -> datetime | None:
    """When the queue's first job in the ledger was submitted."""
    return session.scalar(
        select(func.min(JobRow.submitted_at)).where(JobRow.job_queue_name == job_queue_name)
    )


def queue_timeline(
    session: Session,
    job_queue_name: str,
    since: datetime | None,
    until: datetime,
    *,
    task_instance: TaskInstanceKey | None = None,
) -> QueueTimeline:
    """The queue's bars and waits that overlap ``[since, until]`` (``since`` None: from its first job).

    With ``task_instance``, only that task instance's jobs are kept (the rows are laid out with every job of
    the queue, so a job sits on the same rows as on the queue's timeline).
    """
    jobs, truncated = _jobs_touching(session, job_queue_name, since, until)
    events: list[AuditRow] = []
    if jobs:
        history = select(AuditRow).where(AuditRow.job_id.in_(list(jobs)), AuditRow.at <= until)
        events = list(session.scalars(history.order_by(AuditRow.id)))
    replay = _Replay(jobs, events)
    for event in events:
        replay.apply(event)
    for job_id, job in jobs.items():
        current = replay.waiting.get(job_id)
        if current is not None and job.row.status == JobStatus.RUNNABLE.value and job.row.status_reason:
            current.reason = f"{current.reason}; {job.row.status_reason}"  # and the engine's reason now

    def overlaps(start: datetime, end: datetime | None) -> bool:
        return start <= until and (since is None or end is None or end >= since)

    kept = set(jobs)
    if task_instance is not None:
        kept = {job_id for job_id, job in jobs.items() if _of_task(job.row, task_instance)}
    capacity = _queue_capacity(session, job_queue_name)
    units = []
    for unit in dict.fromkeys([*capacity, *replay.bars]):
        bars = replay.bars.get(unit, [])
        rows = max([capacity.get(unit, 0), *(bar.row + 1 for bar in bars)])
        shown = [bar for bar in bars if bar.job_id in kept and overlaps(bar.start, bar.end)]
        units.append(
            UnitTimeline(unit, capacity.get(unit, 0), rows, shown, unit.startswith(LOCAL_UNIT_PREFIX))
        )
    with_bars = {bar.job_id for unit in units for bar in unit.bars}
    shown_jobs = []
    for job_id in kept:
        job = jobs[job_id]
        job.waits = [wait for wait in job.waits if overlaps(wait.start, wait.end)]
        if job.waits or job_id in with_bars:
            shown_jobs.append(job)
    shown_jobs.sort(key=lambda job: (job.row.submitted_at, job.row.submit_seq, job.row.job_id))
    return QueueTimeline(
        job_queue_name,
        since,
        until,
        first_submitted_at(session, job_queue_name),
        units,
        shown_jobs,
        truncated,
    )


def _of_task(row: JobRow, key: TaskInstanceKey) -> bool:
    return (row.dag_id, row.run_id, row.task_id, row.map_index) == astuple(key)


def jobs_touching_query(job_queue_name: str, since: datetime | None, until: datetime) -> Select[JobRow]:
    """The queue's jobs submitted by ``until`` and unfinished, or last changed at or after ``since``, newest
    first: both sides of the "or" read an index, (queue, status) and (queue, updated_at), so a short window
    over a long history reads only the jobs it shows."""
    conditions: list[ColumnElement[bool]] = [
        JobRow.job_queue_name == job_queue_name,
        JobRow.submitted_at <= until,
    ]
    if since is not None:
        conditions.append(or_(JobRow.status.in_(UNFINISHED_STATUSES), JobRow.updated_at >= since))
    return (
        select(JobRow)
        .where(and_(*conditions))
        .order_by(JobRow.submitted_at.desc(), JobRow.submit_seq.desc())
        .limit(MAX_TIMELINE_JOBS + 1)
    )


def _jobs_touching(
    session: Session, job_queue_name: str, since: datetime | None, until: datetime
) -> tuple[dict[str, TimelineJob], bool]:
    """The queue's jobs submitted by ``until`` and unfinished, or last changed at or after ``since``; and
    the try a retry took its capacity over from, when it was left out (its bars are the retry's start)."""
    rows = list(session.scalars(jobs_touching_query(job_queue_name, since, until)))
    truncated = len(rows) > MAX_TIMELINE_JOBS
    jobs = {row.job_id: TimelineJob(row) for row in rows[:MAX_TIMELINE_JOBS]}
    handed_from = session.scalars(
        select(AuditRow.related_job_id).where(
            AuditRow.kind == AuditKind.HANDED_OVER.value, AuditRow.job_id.in_(list(jobs))
        )
    )
    missing = {job_id for job_id in handed_from if job_id and job_id not in jobs}
    if missing:
        for row in session.scalars(select(JobRow).where(JobRow.job_id.in_(missing))):
            jobs[row.job_id] = TimelineJob(row)
    return jobs, truncated


def _queue_capacity(session: Session, job_queue_name: str) -> dict[str, int]:
    queue = session.get(JobQueueRow, job_queue_name)
    if queue is None:
        return {}
    return {str(limit["capacityUnit"]): int(limit["maxCapacity"]) for limit in queue.capacity_limits}


class _Replay:
    """Replays audit rows in order into bars (per capacity unit) and waits (per job)."""

    def __init__(self, jobs: dict[str, TimelineJob], events: list[AuditRow]) -> None:
        self.jobs = jobs
        self.bars: dict[str, list[Bar]] = defaultdict(list)
        #: Per capacity unit, which job holds each row now (None: free).
        self.occupied: dict[str, list[str | None]] = defaultdict(list)
        #: Each job's bars open now, and its wait going on now.
        self.open: dict[str, list[Bar]] = {}
        self.waiting: dict[str, Wait] = {}
        #: Each job's priority as of the row being replayed: its first PRIORITY_CHANGED's old one, else its
        #: priority now.
        self.priority: dict[str, int] = {}
        for event in events:
            if event.kind == AuditKind.PRIORITY_CHANGED.value and event.job_id and event.details:
                self.priority.setdefault(event.job_id, int(event.details["old"]))

    def apply(self, event: AuditRow) -> None:
        job_id = event.job_id
        if job_id is None or job_id not in self.jobs:
            return
        kind, details = event.kind, event.details or {}
        if kind == AuditKind.SUBMITTED.value:
            row = self.jobs[job_id].row
            start = min(row.submitted_at, event.at)
            self._wait(job_id, start, "Waiting since its submission")
        elif kind == AuditKind.GRANTED.value:
            self._end_wait(job_id, event.at)
            unit = str(details.get("capacityUnit") or self.jobs[job_id].row.capacity_unit)
            count = int(details.get("instanceCount") or self.jobs[job_id].row.instance_count)
            borrowed = int(details.get("borrowed") or 0)
            attempt = details.get("attempt")
            devices = _devices(details.get("devices"), count)
            rows = self._take_rows(unit, job_id, count, devices)
            self.open[job_id] = [
                self._bar(
                    event,
                    job_id,
                    unit,
                    row,
                    index >= count - borrowed,
                    attempt,
                    Phase.RUNNING,
                    device=None if devices is None else devices[index],
                )
                for index, row in enumerate(rows)
            ]
        elif kind == AuditKind.PREEMPTED.value or (
            kind == AuditKind.TERMINATED.value and details.get("stopping") and job_id in self.open
        ):
            preemptor = event.related_job_id if kind == AuditKind.PREEMPTED.value else None
            self._next_phase(event, job_id, kind, preemptor)
        elif kind == AuditKind.HANDED_OVER.value:
            self._hand_over(event, event.related_job_id, job_id)
        elif kind == AuditKind.PRIORITY_CHANGED.value:
            self.priority[job_id] = int(details.get("new", self._priority(job_id)))
        elif kind in (AuditKind.REQUEUED.value, AuditKind.SUCCEEDED.value, AuditKind.FAILED.value):
            self._end_wait(job_id, event.at)
            self._release(job_id, event.at, kind)
            if kind == AuditKind.REQUEUED.value:
                by = f" by {event.related_job_id}" if event.related_job_id else ""
                self._wait(job_id, event.at, f"Requeued after its preemption{by}")
        elif kind == AuditKind.TERMINATED.value:
            self._end_wait(job_id, event.at)

    def _priority(self, job_id: str) -> int:
        return self.priority.get(job_id, self.jobs[job_id].row.scheduling_priority)

    def _bar(
        self,
        event: AuditRow,
        job_id: str,
        unit: str,
        row: int,
        borrowed: bool,
        attempt: object,
        phase: Phase,
        preempted_by: str | None = None,
        device: int | None = None,
    ) -> Bar:
        bar = Bar(
            job_id=job_id,
            quota_share_name=event.quota_share_name or self.jobs[job_id].row.quota_share_name,
            scheduling_priority=self._priority(job_id),
            capacity_unit=unit,
            row=row,
            borrowed=borrowed,
            attempt=attempt if isinstance(attempt, int) else None,
            phase=phase,
            start=event.at,
            preempted_by=preempted_by,
            rule=event.rule,
            reason=event.message,
            device=device,
        )
        self.bars[unit].append(bar)
        return bar

    def _take_rows(self, unit: str, job_id: str, count: int, devices: list[int] | None = None) -> list[int]:
        """The rows a grant's bars go on: its devices' when it names them and the replay has them free
        (it always has, unless the history misses an end), else the lowest free ones."""
        occupied = self.occupied[unit]
        if devices is not None:
            occupied.extend([None] * (max(devices, default=-1) + 1 - len(occupied)))
            if all(occupied[device] is None for device in devices):
                for device in devices:
                    occupied[device] = job_id
                return list(devices)
        rows = [row for row, holder in enumerate(occupied) if holder is None][:count]
        while len(rows) < count:
            occupied.append(None)
            rows.append(len(occupied) - 1)
        for row in rows:
            occupied[row] = job_id
        return rows

    def _close(self, job_id: str, at: datetime, ended_by: str) -> list[Bar]:
        bars = self.open.pop(job_id, [])
        for bar in bars:
            bar.end, bar.ended_by = at, ended_by
        return bars

    def _next_phase(self, event: AuditRow, job_id: str, kind: str, preemptor: str | None) -> None:
        details = event.details or {}
        lost = details.get("lostUnitSeconds") if kind == AuditKind.PREEMPTED.value else None
        since = details.get("lostSince") if lost is not None else None
        for old in self._close(job_id, event.at, kind):
            stopping = self._bar(
                event,
                job_id,
                old.capacity_unit,
                old.row,
                old.borrowed,
                old.attempt,
                Phase.STOPPING,
                preemptor,
                old.device,
            )
            if isinstance(lost, int | float) and not isinstance(lost, bool):
                stopping.lost_unit_seconds = float(lost)
                stopping.lost_since = str(since) if since else None
            self.open.setdefault(job_id, []).append(stopping)

    def _hand_over(self, event: AuditRow, old_job: str | None, new_job: str) -> None:
        old_bars = self._close(old_job, event.at, AuditKind.HANDED_OVER.value) if old_job else []
        if not old_bars:  # the old try is not in the timeline: the retry holds what it asked for
            row = self.jobs[new_job].row
            count = row.held_instance_count or row.instance_count
            devices = _devices(row.held_devices, count)
            rows = self._take_rows(row.capacity_unit, new_job, count, devices)
            borrowed = row.borrowed_instance_count
            self.open[new_job] = [
                self._bar(
                    event,
                    new_job,
                    row.capacity_unit,
                    each,
                    i >= len(rows) - borrowed,
                    None,
                    Phase.RUNNING,
                    device=None if devices is None else devices[i],
                )
                for i, each in enumerate(rows)
            ]
            return
        for old in old_bars:
            self.occupied[old.capacity_unit][old.row] = new_job
            bar = self._bar(
                event,
                new_job,
                old.capacity_unit,
                old.row,
                old.borrowed,
                old.attempt,
                old.phase,
                old.preempted_by,
                old.device,
            )
            bar.lost_unit_seconds, bar.lost_since = old.lost_unit_seconds, old.lost_since
            self.open.setdefault(new_job, []).append(bar)

    def _release(self, job_id: str, at: datetime, ended_by: str) -> None:
        for bar in self._close(job_id, at, ended_by):
            self.occupied[bar.capacity_unit][bar.row] = None

    def _wait(self, job_id: str, at: datetime, reason: str) -> None:
        wait = Wait(at, None, reason)
        self.jobs[job_id].waits.append(wait)
        self.waiting[job_id] = wait

    def _end_wait(self, job_id: str, at: datetime) -> None:
        wait = self.waiting.pop(job_id, None)
        if wait is not None:
            wait.end = at


def _devices(recorded: object, count: int) -> list[int] | None:
    """A grant's device indices as recorded, when they are ``count`` distinct indices >= 0; else None."""
    if not isinstance(recorded, list) or len(recorded) != count:
        return None
    if not all(type(device) is int and device >= 0 for device in recorded):
        return None
    return list(recorded) if len(set(recorded)) == count else None
