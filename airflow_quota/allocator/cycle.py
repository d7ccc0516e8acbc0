"""One allocation cycle: reconcile the ledger with task instances, let the engine decide, apply it all.

``run_allocation_cycle`` works in the session it is given. By default it never commits: the caller's
transaction holds the whole cycle. A host's cycle (``commit_each_queue``) commits each job queue's part as
it ends instead, so a queue's grants reach their tasks without waiting for the other queues' parts
(Kueue's benchmark, five queues: the capacity idles about half as long between two medium or small
jobs). Either way a queue's part (its ledger rows, resumed and signalled task instances) commits together,
or not at all, and a crash anywhere leaves the ledger as the last commit wrote it. Steps:

1. PostgreSQL: ``pg_try_advisory_xact_lock(ALLOCATOR_LOCK_ID)``; when another allocator holds it, skip.
   With ``commit_each_queue`` each queue's part takes it again in its own transaction; when another
   allocator took it in between, the cycle ends there (that allocator's cycle runs the other queues,
   reading them afresh; the tasks this cycle read at its start and did not act on are only read).
2. Read the task instances deferred on ``QuotaAdmissionTrigger`` with their requests
   (``tasks.waiting_on``: plain columns, no locks).
3. Per job queue, in a savepoint (a queue whose part raises is rolled back alone, logged and listed in
   ``CycleReport.failed_queues``; the others go on; a part that met SQLite's "database is locked" is
   rolled back and tried again after a short pause, ``SQLITE_BUSY_PAUSES``, and logged, as a warning,
   only when the lock persists), read its open jobs' task instances and training job
   records (at the part's start: what its tasks did while the parts before it ran counts in this cycle),
   and reconcile each open job with its task instance
   (``reconcile.task_outcome``):

   - the try is over: a waiting job ends; a job holding capacity releases it, unless a training job
     may still run on it (its record says ``launched``): that orphan keeps its capacity until its
     training job is known to be stopped. A local process group is stopped by its own watchdog, its
     devices free at ``local_devices_free_at`` (counted from the cycle that first saw the try over, never
     from a preemption decision); a SageMaker job is listed in ``CycleReport.stop_requests`` every cycle
     until the host, asking it to stop after the commit, finds it no longer running
     (``StoppedTrainingJobs``), or for ``orphan_timeout``;
   - the task goes on: a granted job moves SCHEDULED -> STARTING -> RUNNING as its task starts and
     launches; a job being stopped is signalled (``task_state_store`` signal, and a preempt event when
     it is deferred on its monitoring trigger); one that does not stop within ``stop_deadline`` is
     cleared, the last resort. Its SageMaker training job is listed in ``stop_requests`` every cycle
     until the host, asking after a commit since the job was told to stop, finds it ``Stopped``: then
     the stop is complete (REQUEUED, or FAILED), and the capacity free for this cycle's plan;
   - the task deferred for admission again: if it was being stopped, that is its stop report
     (REQUEUED at its place, or FAILED out of preemption retries); a job the allocator already found
     stopped is an ordinary waiting request (or rejected, when FAILED); a new request is recorded; a
     request that can never be granted, or that the ledger refuses to record, resumes its task with a
     rejection, so only that task fails;
   - the try of a job that holds nothing (waiting, or a victim already requeued) is over: it FAILS.
     A task that deferred from a worker run is resumed only once it has settled (``settle_time``):
     it may be granted and preempt before, its capacity held for it meanwhile.

   At most ``max_new_requests`` requests new to the ledger are taken per job queue and cycle, the
   earliest submitted first (``_within_batch``); the others wait deferred for the next cycles.
4. ``plan_cycle``; the task instances of the jobs it grants are claimed (``tasks.claim_waiting``)
   before anything is recorded, and when one cannot be (cleared, resumed or locked by someone else since
   it was read) the queue is planned again without it, as if it had not been waiting. Then
   ``record_cycle``; each grant resumes its task with the lease (``protocol.Grant``), each victim is
   signalled at once. A victim's SageMaker training job is also listed in ``CycleReport.stop_requests``,
   so the stop starts at the decision, not when the victim's task next runs.

The cycle makes no network call: it holds the database (SQLite's write lock, PostgreSQL's row locks)
until its caller commits (with ``commit_each_queue``, until each queue's part ends). Once the cycle has
committed, the host asks each training job in ``stop_requests`` to stop (``request_stops``, through
``CycleSettings.job_stopper``) and remembers which ones no longer run, for the next cycle to release
their orphans' and victims' capacity; the victims among them are listed in
``CycleReport.victims_found_stopped``, so the host can run that next cycle at once.

Only the task instances a cycle resumes (grants, rejections, preempt events) are claimed and loaded as
ORM objects; the waiting ones are read as plain columns, their trigger kwargs decrypted once per trigger.
The job rows a queue's part changes are written in bulk (``ledger.job_rows.job_rows_in_bulk``), before the
part's next query and at its end.

This module holds the cycle's transaction, its per-queue savepoints and the order of a queue's steps;
the steps are ``open_jobs`` (reconcile), ``admission`` (requests), ``decisions`` (grants, preemptions,
stop signals) and ``orphans``, over one ``queue_part.QueuePart``; ``stops`` is what the host asks after
the commit; ``job_ids`` names jobs and leases.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime
from itertools import compress, repeat
from operator import attrgetter, is_, itemgetter
from typing import cast

from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from airflow_quota.allocator.admission import admit, reject, submitted_at_of
from airflow_quota.allocator.aws_batch_queues import hand_over_to_aws_batch
from airflow_quota.allocator.decisions import grant, preempt
from airflow_quota.allocator.kept_state import GroupedWaiting, keep_for_next_cycle, load_for_cycle
from airflow_quota.allocator.open_jobs import reconcile_open_jobs
from airflow_quota.allocator.queue_part import QueuePart, Waiting
from airflow_quota.allocator.report import CycleReport, first_line
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.allocator.stops import ask_to_stop
from airflow_quota.allocator.tasks import (
    WaitingTask,
    is_postgres,
    task_views,
    training_records,
    waiting_on,
    write_resumed,
)
from airflow_quota.allocator.time_limits import apply_time_limits
from airflow_quota.engine.model import CyclePlan, Grant, JobStatus, Preemption, QueueState, decided_job
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.ledger.decisions import record_cycle
from airflow_quota.ledger.errors import AppliedConfigError, LedgerError
from airflow_quota.ledger.job_rows import OPEN_STATUSES, job_rows_in_bulk, to_engine_time
from airflow_quota.ledger.models import JobRow
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH

__all__ = ["ALLOCATOR_LOCK_ID", "CycleReport", "request_stops", "run_allocation_cycle"]

log = logging.getLogger(__name__)

#: The PostgreSQL advisory lock one cycle holds (int64; b"aqalloc1"). Not Airflow's ``DBLocks`` values.
ALLOCATOR_LOCK_ID = int.from_bytes(b"aqalloc1", "big")


def run_allocation_cycle(
    session: Session, now: datetime, settings: CycleSettings | None = None, *, commit_each_queue: bool = False
) -> CycleReport:
    """Run one allocation cycle at ``now`` (timezone-aware) in ``session``; the caller commits.

    ``commit_each_queue`` (a host's cycles): each job queue's part is committed as it ends, so its grants
    reach their tasks without waiting for the other queues' parts, and nothing is left for the caller to
    commit (``session`` must not be in a ``session.begin()`` block). Each part holds the allocator's lock
    in its own transaction; when another allocator takes it between two parts, the cycle ends there and
    that allocator's cycle runs the rest."""
    settings = settings or CycleSettings()
    if not _take_cycle_lock(session):
        return CycleReport(skipped=True)
    if settings.kept_queues is not None:
        settings.kept_queues.start_cycle()
    report = CycleReport(ran_at=now)
    waiting_by_queue = _waiting_by_queue(waiting_on(session, ADMISSION_CLASSPATH), now, settings)
    open_queues = session.scalars(
        select(JobRow.job_queue_name).where(JobRow.status.in_(OPEN_STATUSES)).distinct()
    )
    for index, queue_name in enumerate(sorted(set(open_queues) | set(waiting_by_queue))):
        if commit_each_queue and index:
            session.commit()  # the parts before this one
            if not _take_cycle_lock(session):
                break  # another allocator's cycle runs the rest
        for pause in (*SQLITE_BUSY_PAUSES, None):
            part = CycleReport(ran_at=now)
            try:
                # A savepoint: a failure rolls back this queue's part alone. Its job rows are written in bulk.
                with session.begin_nested(), job_rows_in_bulk(session):
                    # What the queue's tasks did until its part starts (the parts before it may have
                    # committed: ``commit_each_queue``), and their training jobs. A RUNNABLE job's task is
                    # read only when it is not waiting (``_view_not_waiting``).
                    views = task_views(session, waiting_too=False, job_queue_name=queue_name)
                    records = training_records(session, job_queue_name=queue_name)
                    queue_part = QueuePart(session, now, settings, views, records, part)
                    _allocate_queue(queue_part, queue_name, waiting_by_queue.get(queue_name, []))
            except Exception as error:  # whatever it was, the other queues go on
                if settings.kept_queues is not None:
                    settings.kept_queues.pending.pop(queue_name, None)  # rolled back: read whole next time
                if pause is not None and is_sqlite_busy(error):
                    # Another process holds SQLite's write lock: try the part again in a moment, in a new
                    # transaction where this one holds nothing but this part (it would wait on itself).
                    time.sleep(pause)
                    if commit_each_queue:
                        session.rollback()
                        _take_cycle_lock(session)
                    continue
                _log_failed_part(queue_name, error)
                report.failed_queues[queue_name] = first_line(error)
                break
            report.add(part)
            break
    if commit_each_queue:
        session.commit()
    return report


#: Pauses (seconds) before a job queue's part that met SQLite's "database is locked" (another process,
#: the api-server or the triggerer, holds its write lock) is tried again; only when it persists through
#: them all is it logged, once, as a warning (the next cycle tries again). About a second in all.
SQLITE_BUSY_PAUSES = (0.05, 0.1, 0.2, 0.4)


def is_sqlite_busy(error: BaseException) -> bool:
    """Whether ``error`` is SQLite's "database is locked" (or "is busy"): another connection holds the
    write lock; trying again in a moment is all there is to do."""
    if not isinstance(error, OperationalError):
        return False
    message = str(error.orig).lower()
    return "database is locked" in message or "database is busy" in message


def _log_failed_part(queue_name: str, error: Exception) -> None:
    if is_sqlite_busy(error):
        log.warning(
            "Job queue %s: the SQLite database stayed locked by another process through %d tries (%s); "
            "its part of this allocation cycle was rolled back and the next cycle tries it again",
            queue_name,
            len(SQLITE_BUSY_PAUSES) + 1,
            first_line(error),
        )
        return
    log.exception(
        "Job queue %s: its part of the allocation cycle failed and was rolled back; "
        "the other job queues go on, and the next cycle tries it again",
        queue_name,
    )


def _waiting_by_queue(
    tasks: list[WaitingTask], now: datetime, settings: CycleSettings
) -> dict[str, list[Waiting]]:
    """The waiting tasks by job queue. A host (``kept_queues``) groups the same read of them once: while
    ``waiting_on`` returns the same list and every task in it has settled, the same lists are returned.
    For another read it takes again the ``Waiting`` of each task it grouped before (the same object,
    still settled), so a cycle pays for the new deferrals only: the tasks grouped before are found in C,
    and only the new ones and those that were still settling are looked at one by one (each task when
    the clock went back since)."""
    settled_by = now - settings.settle_time
    kept_queues = settings.kept_queues
    grouped = None if kept_queues is None else kept_queues.waiting
    if (
        grouped is not None
        and grouped.tasks is tasks
        and grouped.all_settled
        and (grouped.settled_from is None or grouped.settled_from <= settled_by)
    ):
        return grouped.by_queue
    keys = list(map(id, tasks))  # ``grouped``'s tasks are alive (``grouped.tasks``): no other has their id
    if grouped is None or settled_by < grouped.settled_by:  # the clock went back: each task looked at
        entries = _group_each(tasks, {} if grouped is None else grouped.of_task, settled_by)
        todo: Sequence[int] = range(len(tasks))
    else:  # a task settled before is settled still
        found = list(map(grouped.of_task.get, keys))
        redo = list(compress(range(len(tasks)), map(is_, found, repeat(None))))  # the new ones
        if grouped.settling:
            redo.extend(compress(range(len(tasks)), map(grouped.settling.__contains__, keys)))
        for at in redo:
            found[at] = _grouped(tasks[at], settled_by)
        entries = cast("list[tuple[str, Waiting]]", found)  # each one found, or grouped now
        todo = redo
    settling = {keys[at] for at in todo if not entries[at][1].settled}
    waiting = list(map(_WAITING, entries))
    from_worker = compress(tasks, map(_FROM_WORKER, tasks))
    latest = max(map(_DEFERRED_AT, from_worker), default=None)  # the latest deferral from a worker run
    names = list(map(_QUEUE, entries))
    queues = dict.fromkeys(names)
    if len(queues) == 1:
        by_queue = dict.fromkeys(queues, waiting)
    else:
        by_queue = {queue: list(compress(waiting, map(queue.__eq__, names))) for queue in queues}
    if kept_queues is not None:
        of_task = dict(zip(keys, entries, strict=True))
        kept_queues.waiting = GroupedWaiting(
            tasks, latest, by_queue, of_task, not settling, settled_by, settling
        )
    return by_queue


def _group_each(
    tasks: list[WaitingTask], before: dict[int, tuple[str, Waiting]], settled_by: datetime
) -> list[tuple[str, Waiting]]:
    """Each task's job queue and ``Waiting``, the one grouped ``before`` taken again while it is settled."""
    entries: list[tuple[str, Waiting]] = []
    for task in tasks:
        found = before.get(id(task))
        if found is None or found[1].task is not task or not found[1].settled:
            found = _grouped(task, settled_by)
        elif task.from_worker and task.deferred_at > settled_by:  # settled before: the clock went back
            found = (found[0], Waiting(task.job_id, task, False))
        entries.append(found)
    return entries


def _grouped(task: WaitingTask, settled_by: datetime) -> tuple[str, Waiting]:
    """A task's job queue and ``Waiting``: settled unless it deferred from a worker run (pid set; only such
    a task can get the stale executor event) after ``settled_by``."""
    settled = not task.from_worker or task.deferred_at <= settled_by
    return str(task.kwargs.get("job_queue")), Waiting(task.job_id, task, settled)


_QUEUE, _WAITING = itemgetter(0), itemgetter(1)
_FROM_WORKER, _DEFERRED_AT = attrgetter("from_worker"), attrgetter("deferred_at")


def _take_cycle_lock(session: Session) -> bool:
    if not is_postgres(session):
        _begin_sqlite_transaction(session)
        return True  # SQLite runs one scheduler; the claims take its write lock
    return bool(session.scalar(text("SELECT pg_try_advisory_xact_lock(:id)"), {"id": ALLOCATOR_LOCK_ID}))


def _begin_sqlite_transaction(session: Session) -> None:
    """Open the cycle's SQLite transaction now: pysqlite opens it lazily, at the first write, so the first
    queue's SAVEPOINT would open it instead, and releasing that savepoint would commit."""
    connection = session.connection().connection.dbapi_connection
    if not getattr(connection, "in_transaction", True):
        session.execute(text("BEGIN"))


def _allocate_queue(part: QueuePart, queue_name: str, waiting: list[Waiting]) -> None:
    """One job queue's part of the cycle, in order: reconcile its open jobs, admit its requests, plan,
    record the plan, apply its decisions."""
    try:
        state = load_for_cycle(part, queue_name)
    except AppliedConfigError:
        raise  # the queue's part fails (logged, counted); its jobs wait for a valid quota file
    except LedgerError as error:  # not applied: no job of it can ever be granted
        part.claim(waiting)
        for each in waiting:
            reject(part, each, str(error))
        return
    given = waiting
    unchanged = _unchanged(part, state, waiting)
    if unchanged:
        # The same waiting tasks, each RUNNABLE and known: none new, none to hand over or claim now; the
        # jobs not waiting are those the cycle read again (``part.rows``).
        not_waiting = sorted(part.rows)
    else:
        waiting = hand_over_to_aws_batch(part, queue_name, waiting)  # an AWS Batch queue: its new ones
        waiting = _claim_acted_on(part, state, _within_batch(part, waiting))
        not_waiting = sorted(state.jobs.keys() - part.ids(waiting)[1])
    part.preload(not_waiting)
    _view_not_waiting(part, not_waiting)
    started_from = state
    state = reconcile_open_jobs(part, state, not_waiting)
    state = apply_time_limits(part, state)  # before the shortcut: a limit may come due in a quiet queue
    if unchanged and state is started_from:
        # Nothing changed since the last cycle, whose plan over this very state decided nothing and left
        # every statusReason as the engine words it: planned again, it decides nothing and rewords
        # nothing (the plan reads no clock unless it grants). Nothing to record or apply.
        part.report.states[queue_name] = state
        part.report.queues_unchanged.append(queue_name)
        keep_for_next_cycle(part, queue_name, state, quiet=given)
        return
    state, grantable = admit(part, state, waiting)
    planning, plan = _plan(part, state, grantable)
    part.rows.update(record_cycle(part.session, planning, plan, part.now))
    granted = [grantable.get(decision.job_id) for decision in plan.decisions if isinstance(decision, Grant)]
    part.load([each for each in granted if each is not None and each.settled])  # one query for all
    for decision in plan.decisions:  # the jobs they name are in ``plan.decided`` as decided
        if isinstance(decision, Grant):
            grant(part, plan.decided, decision, grantable.get(decision.job_id))
        elif isinstance(decision, Preemption):
            preempt(part, plan.decided, decision)
        # (A promise changes its job's row alone, written with the cycle's other changes.)
    write_resumed(part.session, list(part.task_instances.values()))  # the tasks the grants resumed
    part.report.states[queue_name] = plan.decided
    after = QueueState(state.queue, {**state.jobs, **plan.state.jobs})
    quiet = given if _decided_nothing(state, planning, plan) and _all_waiting(after, given) else None
    keep_for_next_cycle(part, queue_name, after, quiet=quiet)


def _unchanged(part: QueuePart, state: QueueState, waiting: list[Waiting]) -> bool:
    """Whether the queue's part starts where the last cycle left it: its state as kept (``part.kept``,
    whose RUNNABLE jobs are every waiting task's) and the same list of waiting tasks (the same read of
    them, ``_waiting_by_queue``), and that cycle's plan decided nothing (``KeptQueue.quiet``)."""
    kept = part.kept
    if kept is None or kept.quiet is None or state is not kept.state:
        return False
    return kept.quiet is waiting or not (kept.quiet or waiting)


def _decided_nothing(state: QueueState, planning: QueueState, plan: CyclePlan) -> bool:
    """Whether the plan was made over every job of ``state`` and decided nothing (no job copied: none
    granted and taken back either)."""
    return not plan.decisions and plan.decided is planning and len(planning.jobs) == len(state.jobs)


def _all_waiting(state: QueueState, waiting: list[Waiting]) -> bool:
    """Whether the RUNNABLE jobs of ``state`` are exactly the jobs of ``waiting`` (each once)."""
    runnable = {job_id for job_id, job in state.jobs.items() if job.status is JobStatus.RUNNABLE}
    return len(runnable) == len(waiting) and runnable == {each.job_id for each in waiting}


def _view_not_waiting(part: QueuePart, job_ids: list[str]) -> None:
    """Read the task instances of the jobs among ``job_ids`` that the cycle's ``task_views`` left out:
    RUNNABLE jobs whose task is not among the waiting ones (cleared, failed, running again, or not
    claimed)."""
    missing = [job_id for job_id in job_ids if job_id not in part.views]
    if missing:
        part.views.update(task_views(part.session, job_ids=missing))


def _within_batch(part: QueuePart, waiting: list[Waiting]) -> list[Waiting]:
    """The waiting tasks this cycle takes: every request the ledger knows, and of those new to it at most
    ``max_new_requests``, the earliest submitted first; the others stay deferred, neither read further
    nor locked, and are listed in ``CycleReport.backlog`` (a burst is admitted in bounded batches)."""
    limit = part.settings.max_new_requests
    new_ids = part.ids(waiting)[1] - part.open_ids
    if limit <= 0 or len(new_ids) <= limit:
        return waiting
    new = part.only(waiting, new_ids)
    new.sort(key=lambda each: (submitted_at_of(each), each.job_id))
    part.report.backlog += [each.job_id for each in new[limit:]]
    later = {each.job_id for each in new[limit:]}
    return [each for each in waiting if each.job_id not in later]


def _claim_acted_on(part: QueuePart, state: QueueState, waiting: list[Waiting]) -> list[Waiting]:
    """Claim the waiting jobs the cycle acts on whatever it plans (new requests, stop reports, jobs
    granted or finished in the ledger); those that cannot be claimed are left out, as not waiting.

    A job that only waits (RUNNABLE in the ledger) is claimed once the plan names it (``_plan``).
    """
    acted_on = part.only(waiting, part.ids(waiting)[1] - part.runnable)  # ``state`` as loaded: ``runnable``
    part.claim(acted_on)
    if not any(claimed is False for claimed in part.claims.values()):
        return waiting  # every one claimed (or not to be claimed now)
    return [each for each in waiting if part.claims.get(each.job_id, True)]


def _plan(part: QueuePart, state: QueueState, grantable: dict[str, Waiting]) -> tuple[QueueState, CyclePlan]:
    """Plan the queue, then claim the waiting jobs the plan grants or lets preempt; when one cannot
    be claimed, plan again without it (nothing is recorded before)."""
    runnable = part.runnable_ids(state)
    while True:
        planning = _planning_state(state, runnable, grantable)
        plan = plan_cycle(planning, to_engine_time(part.now))
        named = [
            grantable[job_id]
            for job_id in (decided_job(decision) for decision in plan.decisions)
            if job_id in grantable
        ]
        part.claim(named)
        lost = [each.job_id for each in named if not part.claims[each.job_id]]
        if not lost:
            return planning, plan
        for job_id in lost:
            del grantable[job_id]


def _planning_state(state: QueueState, runnable: set[str], grantable: dict[str, Waiting]) -> QueueState:
    """The queue without waiting jobs whose task is not claimed now (locked elsewhere, or gone).
    ``runnable``: the RUNNABLE jobs of ``state`` (job ids).

    A job whose task still settles is planned: it may be granted (its capacity is held for it and
    its task resumed by the first cycle after it settled), and it may preempt.

    Jobs holding capacity, being stopped or holding a reservation stay: they count in the usage.
    """
    jobs = dict(state.jobs)  # in C; then the few left out are taken out, the others keeping their order
    for job_id in runnable - grantable.keys():
        if not jobs[job_id].holds_reservation:
            del jobs[job_id]
    return QueueState(state.queue, jobs)


def request_stops(report: CycleReport, settings: CycleSettings | None = None) -> None:
    """After a cycle has committed: ask each training job in its ``stop_requests`` to stop (no wait),
    remember in ``settings.stopped_training_jobs`` the ones that no longer run (``StopRequest.counts``),
    and list the victims among them in ``report.victims_found_stopped`` (the next cycle releases them).

    Best effort: a victim's task stops its job itself when it runs (and waits for ``Stopped`` either
    way), an orphan's or a victim's job is listed again by the next cycle until it is found stopped.
    Never call it for a cycle that rolled back: its decisions did not happen.
    """
    if report.ran_at is None:  # skipped: another allocator ran the cycle and asks
        return
    settings = settings or CycleSettings()
    stopped: list[str] = []
    for request in report.stop_requests:
        if request.counts(ask_to_stop(settings.job_stopper, request.record)):
            stopped.append(request.record.get("name", ""))
            if request.victim:
                report.victims_found_stopped.append(request.job_id)
    if settings.stopped_training_jobs is not None:
        settings.stopped_training_jobs.remember(stopped, asked_at=report.ran_at)
