"""Read models over the ledger for people: who uses, borrows and lends what, and where each job stands.

Usage is the engine's own accounting (``engine.usage``): a share's ``used`` units are ``own`` up to its
limit and ``borrowed`` above it. Lending is pooled in the engine (borrowers take from the idle capacity of
all lending shares together, plus capacity no share owns), so *who lent to whom* is an attribution, made
deterministically: each borrowing share, in quota-file order, is served first from capacity no share owns,
then from the lending shares' idle own capacity in quota-file order. With that, one unit's capacity is
laid out exactly by owner: every share's limit is ``own + lent + idle`` and the rest of the queue is
``unowned used + unowned idle`` (plus any ``overdraft``: borrowing above what was lendable, possible only
after a limit was lowered).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, func, or_, select, union_all
from sqlalchemy.orm import Session

from airflow_quota.engine.model import JobStatus, QueueState
from airflow_quota.engine.planner import share_order_key
from airflow_quota.engine.usage import usage_of
from airflow_quota.ledger.job_rows import FINAL_STATUSES, job_from_row
from airflow_quota.ledger.models import AuditKind, AuditRow, JobRow

#: Pages of jobs and events (REST API and CLI alike): how many by default, and at most.
DEFAULT_JOBS = 100
DEFAULT_EVENTS = 50
MAX_PAGE = 1000
#: The most rows a page may skip (``offset``): the databases' 32-bit integer.
MAX_OFFSET = 2**31 - 1
#: A page of jobs counts the matches up to this many (a count stays cheap); beyond, its total is None.
MAX_TOTAL = 10_000


@dataclass(slots=True)
class ShareUnitUsage:
    """One share on one capacity unit: its limits and what it uses, borrows, lends and leaves idle."""

    quota_share_name: str
    capacity_unit: str
    limit: int
    #: Most it may hold, borrowing included, never above the queue's capacity.
    ceiling: int
    used: int
    own: int
    borrowed: int
    #: Lender share name -> units; the key None is capacity no share owns.
    borrowed_from: dict[str | None, int] = field(default_factory=dict)
    lent: int = 0
    #: Borrower share name -> units of this share's own capacity it uses.
    lent_to: dict[str, int] = field(default_factory=dict)
    idle: int = 0
    #: Units still held by this share's jobs that are being stopped (preempted or terminated).
    stopping: int = 0
    running_jobs: int = 0
    runnable_jobs: int = 0


@dataclass(slots=True)
class UnitUsage:
    """One capacity unit of a queue, laid out by owner."""

    capacity_unit: str
    capacity: int
    shares: list[ShareUnitUsage]
    #: Capacity no share owns: used by borrowers (borrower -> units), and idle.
    unowned: int = 0
    unowned_lent_to: dict[str, int] = field(default_factory=dict)
    unowned_idle: int = 0
    #: Borrowed units no lendable capacity covers (after a limit was lowered); they drain or are reclaimed.
    overdraft: int = 0
    #: Units physically held by jobs being stopped: no longer counted in a share (a preempted job's units
    #: count in its preemptor's share), or still counted (a terminated job), until the stop completes.
    stopping: int = 0
    #: Units no job holds physically now (idle counts units promised away whose holder is still stopping).
    free: int = 0


def queue_usage(state: QueueState) -> list[UnitUsage]:
    """Per capacity unit of the queue (and any unit its jobs name), every share's usage and lending."""
    queue = state.queue
    usage = usage_of(state)
    job_counts: Counter[tuple[str, str, JobStatus]] = Counter(
        (job.share_name, job.unit, job.status) for job in state.jobs.values()
    )
    stopping: Counter[tuple[str, str]] = Counter()
    for job in state.jobs.values():
        if job.is_stopping and job.status.holds_capacity:
            stopping[(job.share_name, job.unit)] += job.count
    units = list(
        dict.fromkeys([*queue.capacity, *(unit for share in queue.shares for unit in share.capacity_limits)])
    )
    report = []
    for unit in units:
        capacity = queue.capacity.get(unit, 0)
        shares = []
        for share in queue.shares:
            if not share.has_limit_for(unit) and not usage.usage(share.name, unit):
                continue
            used, limit = usage.usage(share.name, unit), share.own_limit(unit)
            ceiling = share.ceiling(unit)
            own = min(used, limit)
            shares.append(
                ShareUnitUsage(
                    quota_share_name=share.name,
                    capacity_unit=unit,
                    limit=limit,
                    ceiling=capacity if ceiling is None else min(ceiling, capacity),
                    used=used,
                    own=own,
                    borrowed=used - own,
                    idle=limit - own,
                    stopping=stopping[(share.name, unit)],
                    running_jobs=job_counts[(share.name, unit, JobStatus.RUNNING)],
                    runnable_jobs=job_counts[(share.name, unit, JobStatus.RUNNABLE)],
                )
            )
        owned = sum(share.own_limit(unit) for share in queue.shares)
        unit_usage = UnitUsage(unit, capacity, shares, unowned=max(0, capacity - owned))
        unit_usage.stopping = sum(entry.stopping for entry in shares)
        unit_usage.free = usage.idle(unit)
        unit_usage.unowned_idle = unit_usage.unowned
        _attribute_lending(unit_usage, {share.name for share in queue.shares if share.lends})
        report.append(unit_usage)
    return report


def _attribute_lending(unit: UnitUsage, lending_shares: set[str]) -> None:
    """Serve each borrower (in order) from unowned capacity first, then lenders' idle capacity in order."""
    lenders = [share for share in unit.shares if share.quota_share_name in lending_shares]
    for borrower in unit.shares:
        wanted = borrower.borrowed
        if wanted and unit.unowned_idle:
            taken = min(wanted, unit.unowned_idle)
            unit.unowned_idle -= taken
            unit.unowned_lent_to[borrower.quota_share_name] = taken
            borrower.borrowed_from[None] = taken
            wanted -= taken
        for lender in lenders:
            if not wanted:
                break
            if lender is borrower or not lender.idle:
                continue
            taken = min(wanted, lender.idle)
            lender.idle -= taken
            lender.lent += taken
            lender.lent_to[borrower.quota_share_name] = (
                lender.lent_to.get(borrower.quota_share_name, 0) + taken
            )
            borrower.borrowed_from[lender.quota_share_name] = taken
            wanted -= taken
        unit.overdraft += wanted


def share_positions(state: QueueState) -> dict[str, int]:
    """Each RUNNABLE job's position in its share (1 is next): priority descending, then submission order."""
    by_share = defaultdict(list)
    for job in state.jobs.values():
        if job.status is JobStatus.RUNNABLE:
            by_share[job.share_name].append(job)
    positions: dict[str, int] = {}
    for jobs in by_share.values():
        jobs.sort(key=share_order_key)
        positions.update({job.job_id: position for position, job in enumerate(jobs, start=1)})
    return positions


def positions_of_rows(rows: Iterable[JobRow]) -> dict[str, int]:
    """``share_positions`` for job rows of any queues (final ones are ignored)."""
    by_queue: dict[str, list[JobRow]] = defaultdict(list)
    for row in rows:
        if row.status == JobStatus.RUNNABLE.value:
            by_queue[row.job_queue_name].append(row)
    positions: dict[str, int] = {}
    for queue_rows in by_queue.values():
        by_share = defaultdict(list)
        for row in queue_rows:
            by_share[row.quota_share_name].append(job_from_row(row))
        for jobs in by_share.values():
            jobs.sort(key=share_order_key)
            positions.update({job.job_id: position for position, job in enumerate(jobs, start=1)})
    return positions


@dataclass(frozen=True, slots=True)
class PreemptionNote:
    """The latest preemption decision that named a job as a victim: by whom, when, under which rule."""

    preempted_by: str | None
    at: datetime
    rule: str | None
    message: str


def latest_preemptions(session: Session, job_ids: Iterable[str]) -> dict[str, PreemptionNote]:
    """For each of ``job_ids`` that was ever preempted, the latest PREEMPTED audit row about it."""
    wanted = list(job_ids)
    notes: dict[str, PreemptionNote] = {}
    if not wanted:
        return notes
    rows = session.scalars(
        select(AuditRow)
        .where(AuditRow.kind == AuditKind.PREEMPTED.value, AuditRow.job_id.in_(wanted))
        .order_by(AuditRow.id)
    )
    for row in rows:
        if row.job_id is not None:
            notes[row.job_id] = PreemptionNote(row.related_job_id, row.at, row.rule, row.message)
    return notes


@dataclass(slots=True)
class LostWork:
    """What the preemptions of one share's jobs on one capacity unit lost over a window."""

    #: GPU-seconds (unit-seconds): the sum of the PREEMPTED audit rows' ``lostUnitSeconds``.
    lost_unit_seconds: float = 0.0
    preemptions: int = 0
    #: Of ``preemptions``, those recorded before lost work was measured (no figure: not in the sum).
    unmeasured: int = 0

    def __add__(self, other: LostWork) -> LostWork:
        """Both together (of two units, or two shares)."""
        return LostWork(
            round(self.lost_unit_seconds + other.lost_unit_seconds, 1),
            self.preemptions + other.preemptions,
            self.unmeasured + other.unmeasured,
        )


def lost_work(
    session: Session, job_queue_name: str, since: datetime | None, until: datetime
) -> dict[tuple[str, str], LostWork]:
    """The work the queue's preemptions decided in ``[since, until]`` (``since`` None: since its first)
    lost, per (capacity unit, quota share of the preempted job): ``lost_work_query``."""
    found: dict[tuple[str, str], LostWork] = {}
    for unit, share, preemptions, measured, total in session.execute(
        lost_work_query(job_queue_name, since, until)
    ):
        found[(str(unit or ""), str(share or ""))] = LostWork(
            round(float(total), 1), int(preemptions), int(preemptions) - int(measured)
        )
    return found


def lost_work_query(job_queue_name: str, since: datetime | None, until: datetime) -> Select[Any]:
    """Per (capacity unit, share of the preempted job): how many preemptions the queue decided in the
    window, how many of them measured their lost work, and the GPU-seconds they lost, summed by the
    database from the PREEMPTED audit rows' details (``lostUnitSeconds``: the victim's units x the seconds
    since its last checkpoint, or its start). It reads the queue's PREEMPTED rows of the window alone (the
    ``quota_audit_log_queue_kind_idx`` index), however long the audit log."""
    details = AuditRow.details
    unit = details["capacityUnit"].as_string()
    lost = details["lostUnitSeconds"].as_float()
    query = select(
        unit, AuditRow.quota_share_name, func.count(), func.count(lost), func.coalesce(func.sum(lost), 0.0)
    ).where(
        AuditRow.job_queue_name == job_queue_name,
        AuditRow.kind == AuditKind.PREEMPTED.value,
        AuditRow.at <= until,
    )
    if since is not None:
        query = query.where(AuditRow.at >= since)
    return query.group_by(unit, AuditRow.quota_share_name)


@dataclass(frozen=True, slots=True)
class AttemptTimes:
    """When a job's current (or, once it has finished, its last) attempt was granted, and when it ended."""

    started_at: datetime | None
    stopped_at: datetime | None


def attempt_times(session: Session, rows: Iterable[JobRow]) -> dict[str, AttemptTimes]:
    """Each job's attempt times. A job row forgets its start when the job ends (the engine's order key is
    cleared), so a finished job's come from the audit log: its last GRANTED row and its SUCCEEDED or FAILED
    row; a finished job without one (a try that handed its capacity over to its retry) stopped at its last
    change, which is when it finished (``JobRow.updated_at``)."""
    jobs = {row.job_id: row for row in rows}
    finished = [job_id for job_id, row in jobs.items() if JobStatus(row.status).is_final]
    finished_ids = set(finished)
    granted: dict[str, datetime] = {}
    ended: dict[str, datetime] = {}
    if finished:
        final_kinds = (AuditKind.SUCCEEDED.value, AuditKind.FAILED.value)
        audit = session.execute(
            select(AuditRow.job_id, AuditRow.kind, AuditRow.at)
            .where(AuditRow.job_id.in_(finished), AuditRow.kind.in_([AuditKind.GRANTED.value, *final_kinds]))
            .order_by(AuditRow.id)
        )
        for job_id, kind, at in audit:
            if job_id is not None:
                (ended if kind in final_kinds else granted)[job_id] = at
    return {
        job_id: AttemptTimes(
            row.started_at or granted.get(job_id),
            ended.get(job_id) or (row.updated_at if job_id in finished_ids else None),
        )
        for job_id, row in jobs.items()
    }


# --- pages of jobs and events, filtered, ordered and limited in SQL ---------------------------------------


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of jobs (by submission: oldest first; by finish: latest first), and how many jobs match the
    filters in all (None: over MAX_TOTAL)."""

    rows: list[JobRow]
    total: int | None


def job_page(
    session: Session,
    *,
    job_queue_name: str | None = None,
    quota_share_name: str | None = None,
    statuses: Collection[str] | None = None,
    limit: int = DEFAULT_JOBS,
    offset: int = 0,
) -> JobPage:
    """The newest ``limit`` jobs that match, after the ``offset`` newest, in submission order.

    The database filters, orders (by submission, newest first, on the ``quota_job_submitted_idx`` and
    ``quota_job_status_submitted_idx`` indexes), cuts the page and counts at most ``MAX_TOTAL + 1`` matches,
    so a page costs about the same with a hundred jobs in the ledger or a million.
    """
    conditions = []
    if job_queue_name is not None:
        conditions.append(JobRow.job_queue_name == job_queue_name)
    if quota_share_name is not None:
        conditions.append(JobRow.quota_share_name == quota_share_name)
    if statuses is not None:
        conditions.append(JobRow.status.in_(sorted(statuses)))
    newest_first = (
        select(JobRow)
        .where(*conditions)
        .order_by(JobRow.submitted_at.desc(), JobRow.submit_seq.desc(), JobRow.job_id.desc())
        .limit(limit)
        .offset(offset)
    )
    rows = list(session.scalars(newest_first))
    matches = select(JobRow.job_id).where(*conditions).limit(MAX_TOTAL + 1).subquery()
    counted = session.scalar(select(func.count()).select_from(matches)) or 0
    return JobPage(rows[::-1], counted if counted <= MAX_TOTAL else None)


def finished_job_page(
    session: Session,
    *,
    job_queue_name: str | None = None,
    quota_share_name: str | None = None,
    statuses: Collection[str] = FINAL_STATUSES,
    limit: int = DEFAULT_JOBS,
    offset: int = 0,
) -> JobPage:
    """The ``limit`` jobs that finished latest, after the ``offset`` latest, latest first (``statuses``:
    final ones, SUCCEEDED and FAILED), and how many match (``finished_jobs_query``). A job submitted long
    ago that finished last comes first, where a page by submission could leave it out."""
    wanted = sorted(set(statuses))
    if not wanted:
        return JobPage([], 0)
    conditions = _job_filters(job_queue_name, quota_share_name)
    page_ids = list(
        session.scalars(finished_jobs_query(job_queue_name, quota_share_name, wanted, limit, offset))
    )
    rows = {row.job_id: row for row in session.scalars(select(JobRow).where(JobRow.job_id.in_(page_ids)))}
    matches = (
        select(JobRow.job_id).where(*conditions, JobRow.status.in_(wanted)).limit(MAX_TOTAL + 1).subquery()
    )
    counted = session.scalar(select(func.count()).select_from(matches)) or 0
    return JobPage(
        [rows[job_id] for job_id in page_ids if job_id in rows], counted if counted <= MAX_TOTAL else None
    )


def finished_jobs_query(
    job_queue_name: str | None,
    quota_share_name: str | None,
    statuses: Sequence[str],
    limit: int,
    offset: int,
) -> Select[str]:
    """The ids of the ``limit`` jobs of ``statuses`` (final ones) that finished latest, after the ``offset``
    latest, latest first: by when each finished (its last change, ``updated_at``: nothing changes a
    finished job), then by job id.

    Each status is read on its own, latest first, on the ``quota_job_status_updated_idx`` index (one index
    scan cannot merge two statuses by time), and the database merges them and cuts the page: a page reads
    about ``offset + limit`` entries of each status however long the history.
    """
    unknown = [status for status in statuses if status not in FINAL_STATUSES]
    if unknown or not statuses:
        raise ValueError(f"only finished jobs have a finish time, not {', '.join(unknown) or 'none'}")
    conditions = _job_filters(job_queue_name, quota_share_name)
    per_status = [
        select(JobRow.job_id, JobRow.updated_at)
        .where(*conditions, JobRow.status == status)
        .order_by(JobRow.updated_at.desc(), JobRow.job_id.desc())
        .limit(offset + limit)
        .subquery()
        for status in statuses
    ]
    branches = [select(branch.c.job_id, branch.c.updated_at) for branch in per_status]
    merged = branches[0].subquery() if len(branches) == 1 else union_all(*branches).subquery()
    return (
        select(merged.c.job_id)
        .order_by(merged.c.updated_at.desc(), merged.c.job_id.desc())
        .limit(limit)
        .offset(offset)
    )


def _job_filters(job_queue_name: str | None, quota_share_name: str | None) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if job_queue_name is not None:
        conditions.append(JobRow.job_queue_name == job_queue_name)
    if quota_share_name is not None:
        conditions.append(JobRow.quota_share_name == quota_share_name)
    return conditions


def runnable_positions(session: Session, job_queue_names: Collection[str] | None = None) -> dict[str, int]:
    """``share_positions`` of the RUNNABLE jobs of these job queues (all when None): the queues' waiting
    jobs only, as many as their queues hold, never their history.
    """
    query = select(JobRow).where(JobRow.status == JobStatus.RUNNABLE.value)
    if job_queue_names is not None:
        if not job_queue_names:
            return {}
        query = query.where(JobRow.job_queue_name.in_(sorted(job_queue_names)))
    return positions_of_rows(session.scalars(query))


def audit_page(
    session: Session,
    *,
    job_queue_name: str | None = None,
    quota_share_name: str | None = None,
    since: datetime | None = None,
    job_id: str | None = None,
    dag_id: str | None = None,
    run_id: str | None = None,
    kinds: Sequence[str] | None = None,
    limit: int = DEFAULT_EVENTS,
    offset: int = 0,
) -> list[AuditRow]:
    """The newest ``limit`` audit rows at or after ``since``, after the ``offset`` newest, oldest first.

    Filters: the job queue, the quota share, ``job_id`` (the job's own rows and those naming it as the
    other job: its preemptions of others), ``dag_id`` and ``run_id`` (the rows of the jobs of that DAG, or
    of that DAG run, read through the jobs' task-instance index), and ``kinds`` (any of them).
    """
    query = select(AuditRow).order_by(AuditRow.id.desc()).limit(limit).offset(offset)
    if job_queue_name is not None:
        query = query.where(AuditRow.job_queue_name == job_queue_name)
    if quota_share_name is not None:
        query = query.where(AuditRow.quota_share_name == quota_share_name)
    if since is not None:
        query = query.where(AuditRow.at >= since)
    if job_id is not None:
        query = query.where(or_(AuditRow.job_id == job_id, AuditRow.related_job_id == job_id))
    if dag_id is not None or run_id is not None:
        jobs = select(JobRow.job_id)
        if dag_id is not None:
            jobs = jobs.where(JobRow.dag_id == dag_id)
        if run_id is not None:
            jobs = jobs.where(JobRow.run_id == run_id)
        query = query.where(AuditRow.job_id.in_(jobs))
    if kinds:
        query = query.where(AuditRow.kind.in_(list(kinds)))
    return list(session.scalars(query))[::-1]


def utc_time(at: datetime) -> datetime:
    """``at`` in UTC (a time without a zone is UTC already); ValueError, saying what to give instead, when
    it has no UTC equivalent (``0001-01-01T00:00:00+14:00`` is in year 0 in UTC).
    """
    if at.tzinfo is None:
        return at.replace(tzinfo=UTC)
    try:
        return at.astimezone(UTC)
    except OverflowError:
        raise ValueError(
            f"{at.isoformat()} is outside the years 1 to 9999 once in UTC: "
            "give a time from 0001-01-02 to 9999-12-30"
        ) from None
