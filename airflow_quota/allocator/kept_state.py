"""The queue's state kept between cycles (``KeptQueues``), so that a steady cycle reads what changed only.

A host keeps, per job queue, what its last committed cycle left of it: the applied configuration and the
RUNNABLE jobs as the engine sees them (at 10,000 waiting, nearly all the queue), with the revision and
generation the ledger had then (``ledger.generation``). The next cycle reads the queue's mark first
(locked on PostgreSQL until it commits, so no one else writes the queue meanwhile) and trusts what it kept
only when the mark is the same: then it reads only the queue's other open jobs (those holding capacity:
few, and the ones the allocator itself changes outside the engine), and the RUNNABLE rows that the cycle
touches, when it touches them. Anything else reads the whole queue (``load_queue``), as every cycle did
before: a new host, another host's or the API's commit, a quota file applied, a cycle or a queue's part
that rolled back (what it kept is dropped), a restart (nothing kept).

Every ``check_every`` cycles a queue kept is read whole anyway and compared with what was kept; a
difference is logged, listed in ``CycleReport.kept_state_mismatches`` (the host counts it in the
``quota.kept_state.mismatches`` metric) and repaired, since the cycle goes on with what it read.

What is kept becomes the truth of the next cycle only once the cycle that kept it has committed
(``committed``); the ledger stays the only truth: a crash loses what is kept, never what is recorded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from operator import attrgetter, le
from typing import NamedTuple

from sqlalchemy import select

from airflow_quota.allocator.queue_part import QueuePart, Waiting
from airflow_quota.allocator.tasks import WaitingTask, is_postgres
from airflow_quota.engine.model import Job, JobQueue, JobStatus, QueueState
from airflow_quota.ledger.generation import QueueMark, mark_written, read_mark
from airflow_quota.ledger.job_rows import job_from_row
from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.queue_state import load_queue

log = logging.getLogger(__name__)

#: A queue kept is read whole and compared every so many cycles of its host.
CHECK_EVERY = 100

#: The open jobs read every cycle even with a kept state: all but the RUNNABLE ones.
_READ_EVERY_CYCLE = [
    status.value for status in JobStatus if status is not JobStatus.RUNNABLE and not status.is_final
]


@dataclass(frozen=True, slots=True)
class KeptQueue:
    """One job queue as a committed cycle left it, and its mark."""

    mark: QueueMark
    #: Its configuration and open jobs, in the ledger's order (``load_queue``: first submitted first).
    state: QueueState
    #: Its jobs other than the RUNNABLE ones (holding capacity or being stopped), by job id: what the
    #: next cycle reads again and compares (when they are the same, it starts from ``state`` itself).
    others: dict[str, Job]
    #: The queue's waiting tasks (``cycle``'s list of them) when the cycle that kept it planned every
    #: RUNNABLE job, each one waiting, and its plan decided nothing: a cycle that starts from the same
    #: ``state`` with the same list plans the same and decides nothing again (``cycle._allocate_queue``).
    quiet: list[Waiting] | None = None

    @property
    def queue(self) -> JobQueue:
        return self.state.queue

    @property
    def runnable(self) -> dict[str, Job]:
        return {job_id: job for job_id, job in self.state.jobs.items() if job.status is JobStatus.RUNNABLE}


class GroupedWaiting(NamedTuple):
    """One read of the waiting tasks (``tasks.waiting_on``) grouped by job queue (``cycle``): a later
    cycle given the same list, once every task is settled, groups it the same."""

    tasks: list[WaitingTask]
    #: The latest deferral from a worker run (None: none; every task settled from the start).
    settled_from: datetime | None
    by_queue: dict[str, list[Waiting]]
    #: Each task's job queue and ``Waiting``, by the task's ``id()`` (``tasks`` keeps them alive).
    of_task: dict[int, tuple[str, Waiting]]
    #: Whether every task had settled when grouped.
    all_settled: bool
    #: When it was grouped, the latest deferral that had settled (a task settled then is settled at any
    #: later time), and the tasks still settling then, by ``id()``.
    settled_by: datetime
    settling: set[int]


class KeptQueues:
    """A host's kept queues (``kept``), those its running cycle will keep once it commits (``pending``),
    and its latest grouping of the waiting tasks (``waiting``)."""

    def __init__(self, check_every: int = CHECK_EVERY) -> None:
        self.check_every = check_every
        self.kept: dict[str, KeptQueue] = {}
        self.pending: dict[str, KeptQueue] = {}
        self.cycles = 0
        self.waiting: GroupedWaiting | None = None

    def start_cycle(self) -> None:
        """A cycle starts (it holds the allocator's lock): nothing of it is kept yet."""
        self.pending = {}
        self.cycles += 1

    @property
    def checking(self) -> bool:
        """Whether this cycle reads every queue whole and compares it with what was kept."""
        return self.check_every > 0 and self.cycles % self.check_every == 0

    def committed(self) -> None:
        """The cycle committed: what it kept is the queues' state now; a queue it did not keep is dropped."""
        self.kept, self.pending = self.pending, {}

    def forget(self) -> None:
        """The cycle rolled back (or its outcome is unknown): keep nothing, the next one reads everything."""
        self.kept, self.pending = {}, {}


def load_for_cycle(part: QueuePart, queue_name: str) -> QueueState:
    """The queue as the engine sees it, for this part of the cycle: kept, or read whole from the ledger.

    Fills ``part.rows`` (the rows read), ``part.open_ids`` and ``part.mark``. Raises what ``load_queue``
    raises (the queue not applied, or its configuration no longer valid).
    """
    kept_queues = part.settings.kept_queues
    if kept_queues is None:
        return _load_whole(part, queue_name)
    part.mark = read_mark(part.session, queue_name, lock=is_postgres(part.session))
    kept = kept_queues.kept.get(queue_name)
    if kept is None or kept.mark != part.mark:
        return _load_whole(part, queue_name)
    rows = _rows_read_every_cycle(part, queue_name)
    kept_jobs, others = kept.state.jobs, kept.others
    if kept_queues.checking or any(job_id in kept_jobs and job_id not in others for job_id in rows):
        state = _load_whole(part, queue_name)
        _compare(part, queue_name, kept, state)
        return state
    part.rows = rows
    part.report.queues_kept.append(queue_name)
    read = {job_id: job_from_row(row) for job_id, row in rows.items()}
    if read == others:  # the usual cycle: the queue is as the last cycle left it (``part.kept``)
        state = kept.state
        part.kept = kept
    else:
        jobs = sorted([*kept.runnable.values(), *read.values()], key=_ORDER)
        state = QueueState(kept.queue, {job.job_id: job for job in jobs})
    part.open_ids = set(state.jobs)
    part.runnable = part.open_ids - read.keys()  # ``read``: every open job that is not RUNNABLE
    return state


def keep_for_next_cycle(
    part: QueuePart, queue_name: str, state: QueueState, quiet: list[Waiting] | None = None
) -> None:
    """At the end of the queue's part: keep ``state`` (the queue as the part leaves it) for the next
    cycle, once this one has committed, with the queue's mark now (``mark_written``, not read again: its
    own job writes bumped it; no one else's could, the row being locked, or on SQLite the database). A
    part that changed no job leaves the mark as it was, so another host's kept state stays good too.
    ``quiet``: see ``KeptQueue``."""
    kept_queues = part.settings.kept_queues
    if kept_queues is None or part.mark is None:
        return
    mark = mark_written(part.session, queue_name, part.mark)
    if part.kept is not None and state is part.kept.state:  # the state it started from, unchanged
        kept_queues.pending[queue_name] = KeptQueue(mark, state, part.kept.others, quiet)
        return
    jobs = state.jobs
    order = list(map(_ORDER, jobs.values()))
    if all(map(le, order, islice(order, 1, None))):  # nearly always in this order already (checked in C)
        ordered = state
    else:
        ordered = QueueState(state.queue, {job.job_id: job for job in sorted(jobs.values(), key=_ORDER)})
    # The jobs that are not RUNNABLE: the part's own RUNNABLE jobs (``QueuePart.runnable``) are so still
    # unless its plan changed them, and every job the plan changed has its row in ``part.rows``.
    maybe = (jobs.keys() - part.runnable) | (part.runnable & part.rows.keys())
    others: dict[str, Job] = {}
    for job_id in maybe:
        job = jobs.get(job_id)
        if job is not None and job.status is not JobStatus.RUNNABLE:
            others[job_id] = job
    kept_queues.pending[queue_name] = KeptQueue(mark, ordered, others, quiet)


#: The ledger's order of a queue's jobs (``load_queue``: first submitted first).
_ORDER = attrgetter("submitted")


def _load_whole(part: QueuePart, queue_name: str) -> QueueState:
    state, part.rows = load_queue(part.session, queue_name)
    part.open_ids = set(state.jobs)
    runnable = JobStatus.RUNNABLE
    part.runnable = {job_id for job_id, job in state.jobs.items() if job.status is runnable}
    return state


def _rows_read_every_cycle(part: QueuePart, queue_name: str) -> dict[str, JobRow]:
    query = select(JobRow).where(JobRow.job_queue_name == queue_name, JobRow.status.in_(_READ_EVERY_CYCLE))
    return {row.job_id: row for row in part.session.scalars(query)}


def _compare(part: QueuePart, queue_name: str, kept: KeptQueue, state: QueueState) -> None:
    """Log and report a difference between what was kept and the queue read whole (``state``)."""
    runnable = {job_id: job for job_id, job in state.jobs.items() if job.status is JobStatus.RUNNABLE}
    if kept.queue == state.queue and kept.runnable == runnable:
        return
    ids = kept.runnable.keys() | runnable.keys()
    differing = sorted(job_id for job_id in ids if kept.runnable.get(job_id) != runnable.get(job_id))
    log.warning(
        "Job queue %s: the state kept since the last cycle differs from the ledger (%s%d RUNNABLE jobs "
        "differ, first %s); it is read whole again",
        queue_name,
        "" if kept.queue == state.queue else "its configuration, ",
        len(differing),
        differing[:3],
    )
    part.report.kept_state_mismatches.append(queue_name)
