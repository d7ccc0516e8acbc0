"""One allocation cycle: reconcile the ledger with task instances, let the engine decide, apply it all.

``run_allocation_cycle`` works in the session it is given and never commits: the caller's transaction
holds the whole cycle (ledger rows, resumed and signalled task instances commit together, or not at all;
a crash anywhere leaves the ledger as the last committed cycle wrote it). Steps:

1. PostgreSQL: ``pg_try_advisory_xact_lock(ALLOCATOR_LOCK_ID)``; when another allocator holds it, skip.
2. Read every open job's task instance and training job record, and the task instances deferred on
   ``QuotaAdmissionTrigger`` with their requests (``tasks.waiting_on``: plain columns, no locks).
3. Per job queue, in a savepoint (a queue whose part raises is rolled back alone, logged and listed in
   ``CycleReport.failed_queues``; the others go on), reconcile each open job with its task instance
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

4. ``plan_cycle``; the task instances of the jobs it grants are claimed (``tasks.claim_waiting``)
   before anything is recorded, and when one cannot be (cleared, resumed or locked by someone else since
   it was read) the queue is planned again without it, as if it had not been waiting. Then
   ``record_cycle``; each grant resumes its task with the lease (``protocol.Grant``), each victim is
   signalled at once. A victim's SageMaker training job is also listed in ``CycleReport.stop_requests``,
   so the stop starts at the decision, not when the victim's task next runs.

The cycle makes no network call: it holds the database (SQLite's write lock, PostgreSQL's row locks)
until its caller commits. Once committed, the host asks each training job in ``stop_requests`` to stop
(``request_stops``, through ``CycleSettings.job_stopper``) and remembers which ones no longer run, for
the next cycle to release their orphans' and victims' capacity; the victims among them are listed in
``CycleReport.victims_found_stopped``, so the host can run that next cycle at once.

Only the task instances a cycle resumes (grants, rejections, preempt events) are claimed and loaded as
ORM objects; the waiting ones are read as plain columns, their trigger kwargs decrypted once per trigger.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import partial
from typing import Any

from airflow.models.taskinstance import TaskInstance
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from airflow_quota.allocator import default_setting
from airflow_quota.allocator.reconcile import (
    TaskOutcome,
    TaskView,
    cleared_by_allocator,
    is_monitoring,
    task_outcome,
)
from airflow_quota.allocator.tasks import (
    WaitingTask,
    claim_deferred,
    claim_waiting,
    clear_unresponsive,
    is_postgres,
    resume,
    task_instances,
    task_views,
    training_records,
    waiting_on,
    write_signal,
)
from airflow_quota.engine.config import JobRequestError, validate_job_request
from airflow_quota.engine.devices import assign_devices
from airflow_quota.engine.model import (
    HOLDING_CAPACITY,
    CyclePlan,
    Grant,
    Job,
    JobRequest,
    JobStatus,
    Preemption,
    QueueState,
)
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.ledger.decisions import record_cycle
from airflow_quota.ledger.errors import AppliedConfigError, LedgerError
from airflow_quota.ledger.job_rows import FINAL_STATUSES, to_engine_time
from airflow_quota.ledger.lifecycle import (
    Submission,
    TaskInstanceRef,
    record_finish,
    record_handover,
    record_status_change,
    record_stop_completed,
    record_submission,
    record_submissions,
    record_termination,
)
from airflow_quota.ledger.models import JOB_ID_LENGTH, NAME_LENGTH, UNIT_LENGTH, JobRow
from airflow_quota.ledger.queue_state import load_queue
from airflow_quota.protocol import LOCAL_UNIT_PREFIX, Preempt, TrainingJobRecord
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, request_document

log = logging.getLogger(__name__)

#: The PostgreSQL advisory lock one cycle holds (int64; b"aqalloc1"). Not Airflow's ``DBLocks`` values.
ALLOCATOR_LOCK_ID = int.from_bytes(b"aqalloc1", "big")

#: Task-instance states of a later try that is on its way (its retry may re-attach to the training job).
_RETRY_ON_ITS_WAY = frozenset({"scheduled", "queued", "running", "deferred"})
#: Seconds past a local job's grace period, counted from the cycle that first saw its task try over,
#: before its orphaned process group is taken as gone. Its watchdog starts the stop (SIGTERM, SIGKILL
#: after the grace period) when the task process dies, which can come after that cycle: a task runner
#: that still lives learns at its next heartbeat (``[workers] min_heartbeat_interval``, 5 s) that its try
#: ended, then SIGTERMs its task process and SIGKILLs it 5 s later. The rest covers the watchdog's poll and
#: the SIGKILLed processes' exit.
LOCAL_KILL_MARGIN_SECONDS = 30.0


class StopAnswer(StrEnum):
    """What a training job's backend answered when the allocator asked it to stop (after a commit)."""

    #: Still running (SageMaker: ``InProgress``, ``Stopping``): asked again after the next cycle.
    RUNNING = "running"
    #: Ended without completing (SageMaker: ``Stopped``, ``Failed``): its capacity is free.
    STOPPED = "stopped"
    #: Completed its work before the stop reached it: free, but a victim's task reports its success.
    COMPLETED = "completed"
    #: No training job of that name: never created, or not yet (its task may be creating it now).
    MISSING = "missing"


#: Asks a training job to stop, without waiting, and says what it found (may be asked again).
JobStopper = Callable[[TrainingJobRecord], StopAnswer]
#: SageMaker's ``TrainingJobStatus`` -> the answer (no job of the name: ``StopAnswer.MISSING``).
_SAGEMAKER_ANSWERS = {
    "InProgress": StopAnswer.RUNNING,
    "Stopping": StopAnswer.RUNNING,
    "Stopped": StopAnswer.STOPPED,
    "Failed": StopAnswer.STOPPED,
    "Completed": StopAnswer.COMPLETED,
}


class StoppedTrainingJobs:
    """The training jobs a host asked to stop after its last committed cycle and found no longer running.

    ``request_stops`` fills it after each committed cycle with that cycle's answers only (so it holds at
    most one cycle's stop requests, and forgets a job as soon as no cycle asks about it); the next cycle
    reads it to release an orphan's or a victim's capacity (``confirmed_since``). What counts as "no
    longer running" depends on who asked: for an orphan any answer but ``RUNNING``, for a victim only
    ``STOPPED`` (``StopRequest.counts``). A host keeps one for as long as its process runs
    (``allocator.host``). Losing it is safe: a restart, or another allocator running the next cycle, only
    means that cycle lists the job again and it is asked to stop once more (or a victim's task reports).
    """

    __slots__ = ("_asked_at",)

    def __init__(self) -> None:
        #: Training job name -> the time (``now``) of the cycle whose stop request it answered.
        self._asked_at: dict[str, datetime] = {}

    def remember(self, names: Iterable[str], asked_at: datetime) -> None:
        """Replace what is remembered with the jobs found stopped when a cycle at ``asked_at`` asked."""
        self._asked_at = dict.fromkeys(names, asked_at)

    def confirmed_since(self, name: str, since: datetime) -> bool:
        """Whether training job ``name`` was found no longer running when asked by a cycle at or after
        ``since`` (an answer from before an orphan was first seen, or before a victim was told to stop,
        does not count: a job asked before it was created answers "not running")."""
        asked_at = self._asked_at.get(name)
        return asked_at is not None and asked_at >= since


@dataclass(frozen=True, slots=True)
class CycleSettings:
    """The allocator's tunables (``[quota]`` in airflow.cfg, read by ``host.cycle_settings``); each
    defaults to the setting's default in the provider info."""

    #: A task that deferred from a worker run less than this ago is not resumed yet: a stale
    #: "defer-exit" executor event can fail a task resumed sooner (apache/airflow#71580, #72716).
    settle_time: timedelta = timedelta(seconds=default_setting("settle_time"))
    #: A job signalled to stop that has not reported stopped after this is cleared (the last resort).
    stop_deadline: timedelta = timedelta(seconds=default_setting("stop_deadline"))
    #: An orphaned training job not confirmed stopped after this has its capacity released anyway.
    orphan_timeout: timedelta = timedelta(seconds=default_setting("orphan_timeout"))
    #: How ``request_stops`` asks training jobs to stop once a cycle has committed (victims and
    #: orphans); by default through their backend (``stop_through_backend``).
    job_stopper: JobStopper | None = None
    #: The host's memory of the training jobs it found stopped, shared by every cycle it runs (a mutable
    #: object in these frozen settings: ``request_stops`` updates it, the cycle reads it). None: nothing
    #: is remembered, so an orphaned SageMaker training job keeps its capacity until ``orphan_timeout``,
    #: and a victim's until its task reports its stop.
    stopped_training_jobs: StoppedTrainingJobs | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """A grant applied: the task instance resumed and the payload its ``next_method`` receives."""

    job_id: str
    ti_id: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StopRequest:
    """A training job the host asks to stop once the cycle has committed, and the job it runs for."""

    job_id: str
    record: TrainingJobRecord
    #: True: a job being stopped (preempted or terminated) whose task goes on and also waits for the
    #: stop; False: an orphan (its task try is over).
    victim: bool

    def counts(self, answer: StopAnswer) -> bool:
        """Whether ``answer`` frees the capacity. A victim's only when its job is found stopped: a job
        that completed first is its task's success to report (not a preemption), and a victim's job
        missing may be one its task is creating right now. An orphan's task is over: any ended job, or
        none, frees it."""
        return answer is StopAnswer.STOPPED if self.victim else answer is not StopAnswer.RUNNING


@dataclass(slots=True)
class CycleReport:
    """What one cycle did. ``skipped`` cycles did nothing (another allocator holds the lock)."""

    skipped: bool = False
    #: The cycle's ``now``; None when it was skipped.
    ran_at: datetime | None = None
    submitted: list[str] = field(default_factory=list)
    granted: list[Lease] = field(default_factory=list)
    #: Victims chosen this cycle, by preemptor.
    preempted: dict[str, list[str]] = field(default_factory=dict)
    #: Preemptions by rule (RECLAIM, IN_SHARE_PRIORITY, ADOPT_STOPPING): victims counted.
    preempted_by_rule: dict[str, int] = field(default_factory=dict)
    #: Jobs told to stop this cycle (victims, terminated jobs, and re-sent signals).
    signalled: list[str] = field(default_factory=list)
    #: SageMaker training jobs the host asks to stop once the cycle has committed (``request_stops``),
    #: every cycle until it finds them stopped: those of jobs being stopped (victims of a preemption or a
    #: termination) from the decision on, so a stop starts at once and the capacity is free as soon as
    #: the allocator finds the job ``Stopped`` (the task also waits for it and reports it, whichever is
    #: first), and those of orphans not yet known to be stopped.
    stop_requests: list[StopRequest] = field(default_factory=list)
    #: Filled by ``request_stops`` after the commit: the victims (job ids) whose training job it found
    #: stopped. The next cycle releases their capacity; a host runs it at once when this is not empty.
    victims_found_stopped: list[str] = field(default_factory=list)
    #: Jobs whose stop completed this cycle (requeued, or failed when out of retries or terminated):
    #: reported by their task, or their training job found stopped by the allocator.
    stopped: list[str] = field(default_factory=list)
    #: Jobs whose task try ended this cycle: finished in the ledger, capacity released.
    finished: list[str] = field(default_factory=list)
    #: Jobs whose task ended while a training job may still run on their capacity: held until it stopped.
    orphans: list[str] = field(default_factory=list)
    #: A try's capacity and training job taken over by its retry: {previous job: retry job}.
    handed_over: dict[str, str] = field(default_factory=dict)
    #: Tasks cleared because they did not stop within the stop deadline.
    cleared: list[str] = field(default_factory=list)
    #: Requests that can never be granted, by job id: why (their task was resumed with a rejection).
    rejected: dict[str, str] = field(default_factory=dict)
    #: Granted but deferred from a worker less than the settle time ago: resumed by a later cycle.
    settling: list[str] = field(default_factory=list)
    #: Granted in the ledger but no claimed task instance to resume (picked up again next cycle).
    unresumed: list[str] = field(default_factory=list)
    #: Job queues whose state the cycle ended with (for metrics).
    states: dict[str, QueueState] = field(default_factory=dict)
    #: Job queues whose part of the cycle failed, and why: rolled back alone (nothing of it was written,
    #: its tasks keep waiting), the other queues' parts kept; the next cycle tries it again.
    failed_queues: dict[str, str] = field(default_factory=dict)

    def undo_to(self, earlier: CycleReport) -> None:
        """Make this report again what ``earlier`` (a copy of it taken before) says."""
        for each in fields(self):
            setattr(self, each.name, getattr(earlier, each.name))

    def add(self, part: CycleReport) -> None:
        """Add one job queue's part of the cycle: its lists and mappings, its preemption counts summed."""
        for each in fields(self):
            mine, theirs = getattr(self, each.name), getattr(part, each.name)
            if isinstance(mine, list):
                mine.extend(theirs)
            elif each.name == "preempted_by_rule":
                for rule, victims in theirs.items():
                    mine[rule] = mine.get(rule, 0) + victims
            elif isinstance(mine, dict):
                mine.update(theirs)


@dataclass(frozen=True, slots=True)
class _Waiting:
    """One task instance deferred on the admission trigger, as read (claimed only to be resumed)."""

    job_id: str
    task: WaitingTask
    settled: bool

    @property
    def kwargs(self) -> dict[str, Any]:
        return self.task.kwargs


#: When a whole job id would not fit its column, each id part longer than this is cut (see ``job_id_for``).
JOB_ID_PART_LENGTH = 160
_JOB_ID_DIGEST_LENGTH = 16


def local_devices_free_at(seen_over: datetime, grace_period: float) -> datetime:
    """When the devices of a local job whose try was first seen over at ``seen_over``, with a training
    that may still run, are free: ``grace_period`` + ``LOCAL_KILL_MARGIN_SECONDS`` later.

    Its process group is stopped by its watchdog once the task process is dead (SIGTERM, SIGKILL after
    the grace period). That process is dead when its try is seen over, or dies seconds later (a live task
    runner kills it once told its try ended); never counted from a preemption decision.
    """
    return seen_over + timedelta(seconds=grace_period + LOCAL_KILL_MARGIN_SECONDS)


def job_id_for(dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> str:
    """A task instance's job id: one job per try; a requeued job keeps it, a retry or clear is a new job.

    ``<dag_id>/<run_id>/<task_id>/<map_index>/<try_number>``, always within the ledger's ``JOB_ID_LENGTH``:
    Airflow allows 250 characters for each id, and anyone who triggers a run may choose its run id. When the
    whole would not fit, each part longer than ``JOB_ID_PART_LENGTH`` keeps its beginning and ends with
    ``~`` and 16 hex digits of its SHA-256: the id stays readable, unique and the same in every cycle.
    """
    job_id = f"{dag_id}/{run_id}/{task_id}/{map_index}/{try_number}"
    if len(job_id) <= JOB_ID_LENGTH:
        return job_id
    dag_id, run_id, task_id = (_bounded_id_part(part) for part in (dag_id, run_id, task_id))
    return f"{dag_id}/{run_id}/{task_id}/{map_index}/{try_number}"


def _bounded_id_part(part: str) -> str:
    if len(part) <= JOB_ID_PART_LENGTH:
        return part
    digest = hashlib.sha256(part.encode()).hexdigest()[:_JOB_ID_DIGEST_LENGTH]
    return f"{part[: JOB_ID_PART_LENGTH - _JOB_ID_DIGEST_LENGTH - 1]}~{digest}"


def lease_id_of(row: JobRow) -> str:
    """The lease of a job's current (or last) grant: its job id and attempt."""
    return f"{row.job_id}#{row.attempt}"


def run_allocation_cycle(
    session: Session, now: datetime, settings: CycleSettings | None = None
) -> CycleReport:
    """Run one allocation cycle at ``now`` (timezone-aware) in ``session``; the caller commits."""
    settings = settings or CycleSettings()
    if not _take_cycle_lock(session):
        return CycleReport(skipped=True)
    report = CycleReport(ran_at=now)
    views = task_views(session)
    records = training_records(session)
    waiting_by_queue: dict[str, list[_Waiting]] = defaultdict(list)
    for task in waiting_on(session, ADMISSION_CLASSPATH):
        job_id = job_id_for(task.dag_id, task.run_id, task.task_id, task.map_index, task.try_number)
        # Only a task deferred from a worker run (pid set) can get the stale executor event.
        settled = not task.from_worker or task.deferred_at <= now - settings.settle_time
        waiting_by_queue[str(task.kwargs.get("job_queue"))].append(_Waiting(job_id, task, settled))
    open_queues = session.scalars(
        select(JobRow.job_queue_name).where(JobRow.status.not_in(FINAL_STATUSES)).distinct()
    )
    for queue_name in sorted(set(open_queues) | set(waiting_by_queue)):
        part = CycleReport(ran_at=now)
        try:
            with session.begin_nested():  # a savepoint: a failure rolls back this queue's part alone
                _Cycle(session, now, settings, views, records, part).allocate_queue(
                    queue_name, waiting_by_queue.get(queue_name, [])
                )
        except Exception as error:  # whatever it was, the other queues go on
            log.exception(
                "Job queue %s: its part of the allocation cycle failed and was rolled back; "
                "the other job queues go on, and the next cycle tries it again",
                queue_name,
            )
            report.failed_queues[queue_name] = _first_line(error)
            continue
        report.add(part)
    return report


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


def _first_line(error: BaseException) -> str:
    """What went wrong, in one line: a database error's own message, without the statement and its
    parameters (SQLAlchemy adds them, and they can be long), else the exception's type and message."""
    cause = getattr(error, "orig", None) or error
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0] if lines else ''}"[:500]


@dataclass(slots=True)
class _Cycle:
    """One job queue's part of a cycle: the cycle's inputs, the steps it runs and the report of that part."""

    session: Session
    now: datetime
    settings: CycleSettings
    views: dict[str, TaskView]
    records: dict[str, TrainingJobRecord]
    report: CycleReport
    #: The rows of the queue being allocated, read once (``_row`` adds the ones read later).
    rows: dict[str, JobRow] = field(default_factory=dict)
    #: Waiting jobs whose task instance this cycle claimed (True) or could not claim (False), by job id.
    claims: dict[str, bool] = field(default_factory=dict)
    #: The claimed task instances loaded to be resumed, by job id.
    task_instances: dict[str, TaskInstance] = field(default_factory=dict)
    #: Jobs whose training job this cycle listed in ``report.stop_requests`` (each once).
    listed: set[str] = field(default_factory=set)

    def allocate_queue(self, queue_name: str, waiting: list[_Waiting]) -> None:
        try:
            state, self.rows = load_queue(self.session, queue_name)
        except AppliedConfigError:
            raise  # the queue's part fails (logged, counted); its jobs wait for a valid quota file
        except LedgerError as error:  # not applied: no job of it can ever be granted
            self._claim(waiting)
            for each in waiting:
                self._reject(each, str(error))
            return
        waiting = self._claim_acted_on(state, waiting)
        waiting_ids = {each.job_id for each in waiting}
        for job_id in sorted(state.jobs):
            if job_id not in waiting_ids:
                state = self._reconcile(state, job_id)
        state, grantable = self._admit(state, waiting)
        planning, plan = self._plan(state, grantable)
        record_cycle(self.session, planning, plan, self.now)
        granted = [
            grantable.get(decision.job_id) for decision in plan.decisions if isinstance(decision, Grant)
        ]
        self._load([each for each in granted if each is not None and each.settled])  # one query for all
        for decision in plan.decisions:
            if isinstance(decision, Grant):
                self._grant(plan.state, decision, grantable.get(decision.job_id))
            else:
                self._preempt(plan.state, decision)
        self.report.states[queue_name] = plan.state

    def _claim_acted_on(self, state: QueueState, waiting: list[_Waiting]) -> list[_Waiting]:
        """Claim the waiting jobs the cycle acts on whatever it plans (new requests, stop reports, jobs
        granted or finished in the ledger); those that cannot be claimed are left out, as not waiting.

        A job that only waits (RUNNABLE in the ledger) is claimed once the plan names it (``_plan``).
        """
        acted_on = []
        for each in waiting:
            job = state.jobs.get(each.job_id)
            if job is None or job.status is not JobStatus.RUNNABLE:
                acted_on.append(each)
        self._claim(acted_on)
        return [each for each in waiting if self.claims.get(each.job_id, True)]

    def _plan(self, state: QueueState, grantable: dict[str, _Waiting]) -> tuple[QueueState, CyclePlan]:
        """Plan the queue, then claim the waiting jobs the plan grants or lets preempt; when one cannot
        be claimed, plan again without it (nothing is recorded before)."""
        while True:
            planning = _planning_state(state, grantable)
            plan = plan_cycle(planning, to_engine_time(self.now))
            named = [
                grantable[job_id]
                for job_id in (
                    decision.job_id if isinstance(decision, Grant) else decision.preemptor_id
                    for decision in plan.decisions
                )
                if job_id in grantable
            ]
            self._claim(named)
            lost = [each.job_id for each in named if not self.claims[each.job_id]]
            if not lost:
                return planning, plan
            for job_id in lost:
                del grantable[job_id]

    def _claim(self, waiting: list[_Waiting]) -> None:
        """Claim the task instances of ``waiting`` not claimed yet this cycle (``claims``)."""
        todo = [each for each in waiting if each.job_id not in self.claims]
        if not todo:
            return
        claimed = claim_waiting(self.session, [each.task for each in todo])
        for each in todo:
            self.claims[each.job_id] = each.task.id in claimed

    def _load(self, waiting: list[_Waiting]) -> None:
        """Load the claimed task instances of ``waiting`` that are to be resumed (``task_instances``)."""
        todo = [each for each in waiting if each.job_id not in self.task_instances]
        if not todo:
            return
        loaded = task_instances(self.session, [each.task.id for each in todo])
        for each in todo:
            self.task_instances[each.job_id] = loaded[each.task.id]

    def _task_instance(self, waiting: _Waiting) -> TaskInstance:
        """The task instance of a claimed waiting job, to resume it."""
        self._load([waiting])
        return self.task_instances[waiting.job_id]

    # --- 3. reconcile ----------------------------------------------------------------------------------

    def _reconcile(self, state: QueueState, job_id: str) -> QueueState:
        job, row = state.jobs[job_id], self._row(job_id)
        view = self.views.get(job_id)
        outcome = task_outcome(row.try_number, row.ti_id, view)
        if outcome.cleared and self._past_stop_deadline(job, row):  # ``_signal_if_due`` cleared it
            outcome = cleared_by_allocator(row.try_number, self.settings.stop_deadline)
        if outcome.outcome is TaskOutcome.ACTIVE:
            if not job.status.holds_capacity:
                return state
            state = self._follow_progress(state, job, row, view)
            if job.is_stopping:
                if self._victim_found_stopped(row):
                    # Its capacity is free now, for its preemptor in this very cycle; its task still
                    # reports the stop later, by then an ordinary request (or rejected when final).
                    self.report.stopped.append(job_id)
                    return record_stop_completed(self.session, state, job_id, self.now, started=True)
                self._signal_if_due(state.jobs[job_id], row, view)
                self._list_victim(row)
            return state
        if not job.status.holds_capacity:  # a waiting job (or a victim already requeued) holds nothing
            self.report.finished.append(job_id)
            reason = f"{outcome.reason} while it waited for quota"
            return record_termination(self.session, state, job_id, self.now, reason)
        if self._held_for_retry(row, view):
            held = (
                f"its training job keeps its {row.held_instance_count} {row.held_capacity_unit} for the retry"
            )
            if not row.status_reason.endswith(held):
                row.status_reason = f"{outcome.reason}; {held}"
            return state
        if not self._orphan_stopped(row, outcome.reason):
            return state
        record = self._note_training_job(row)  # a job that ended in its launching run was never seen RUNNING
        self.report.finished.append(job_id)
        reason = outcome.reason
        if record is not None and record.get("ended_as"):  # what the task saw its training job do
            reason += f"; its training job {record.get('name')} ended {record.get('ended_as')}"
        return record_finish(
            self.session,
            state,
            job_id,
            self.now,
            succeeded=outcome.outcome is TaskOutcome.SUCCEEDED,
            reason=reason,
        )

    def _note_training_job(self, row: JobRow) -> TrainingJobRecord | None:
        """Copy the training job the task recorded for the job's current lease onto its row (for the API
        and UI); return that record, or None when the task recorded none for this lease."""
        record = self._current_record(row)
        if record is None:
            return None
        noted = {"backend": record.get("backend"), "name": record.get("name"), "state": record.get("state")}
        if row.training_job != noted:
            row.training_job = noted
        return record

    def _follow_progress(self, state: QueueState, job: Job, row: JobRow, view: TaskView | None) -> QueueState:
        record = self._note_training_job(row)
        if job.is_stopping:
            return state
        launched = record is not None and record.get("state") == "launched"
        if launched or is_monitoring(view, ADMISSION_CLASSPATH):
            target = JobStatus.RUNNING
        elif view is not None and view.state in ("queued", "running"):
            target = JobStatus.STARTING
        else:
            return state
        order = (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)
        if order.index(target) <= order.index(job.status):
            return state
        return record_status_change(self.session, state, job.job_id, target, self.now)

    def _signal_if_due(self, job: Job, row: JobRow, view: TaskView | None) -> None:
        signalled = row.stop_signalled_at
        if signalled is None or is_monitoring(view, ADMISSION_CLASSPATH):
            self._signal(job, row, view)
            return
        if self._past_stop_deadline(job, row) and view is not None:
            log.warning(
                "Job %s did not stop within %s of being told to; clearing its task",
                job.job_id,
                self.settings.stop_deadline,
            )
            if clear_unresponsive(self.session, view.ti_id):
                self.report.cleared.append(job.job_id)

    def _past_stop_deadline(self, job: Job, row: JobRow) -> bool:
        """Whether a job being stopped was told to stop ``stop_deadline`` ago or more."""
        told = row.stop_signalled_at
        return job.is_stopping and told is not None and self.now - told >= self.settings.stop_deadline

    def _victim_found_stopped(self, row: JobRow) -> bool:
        """Whether the training job of a job being stopped (its task still active) was found ``Stopped``
        by the host when asked after a cycle since the job was told to stop (``stop_signalled_at``, set
        at the decision, or when a termination is first signalled: an earlier answer never counts).

        SageMaker only: a local job is a process of its task's worker, which alone can tell it stopped.
        """
        stopped = self.settings.stopped_training_jobs
        record = self._launched(row)
        return (
            stopped is not None
            and record is not None
            and record.get("backend") == "sagemaker"
            and row.stop_signalled_at is not None
            and stopped.confirmed_since(record.get("name", ""), row.stop_signalled_at)
        )

    def _list_victim(self, row: JobRow) -> None:
        """List a told-to-stop job's SageMaker training job in ``stop_requests`` (every cycle while it
        is being stopped, from its decision on), for the host to ask and describe after the commit."""
        record = self._launched(row)
        if row.stop_signalled_at is None or record is None or record.get("backend") != "sagemaker":
            return
        self._list_stop(StopRequest(row.job_id, record, victim=True))

    def _list_stop(self, request: StopRequest) -> None:
        """Add ``request`` to ``report.stop_requests`` unless its job is listed already this cycle."""
        if request.job_id not in self.listed:
            self.listed.add(request.job_id)
            self.report.stop_requests.append(request)

    def _current_record(self, row: JobRow) -> TrainingJobRecord | None:
        """What the task recorded about its training job under the job's current lease, if anything."""
        record = self.records.get(row.job_id)
        return record if record is not None and record.get("lease_id") == lease_id_of(row) else None

    def _launched(self, row: JobRow) -> TrainingJobRecord | None:
        """The training job the task launched on the job's current lease, when it may still run."""
        record = self._current_record(row)
        return record if record is not None and record.get("state") == "launched" else None

    def _held_for_retry(self, row: JobRow, view: TaskView | None) -> bool:
        """A try that ended with its training job running keeps its capacity while a retry is coming.

        The retry re-attaches to the training job instead of launching a second one (its request
        then takes the capacity over, ``record_handover``); the job is not stopped meanwhile. A job
        already told to stop keeps nothing for a retry: its training job is being stopped (an orphan
        whose retry asked for other capacity, ``_submit_retry``, or a victim), and is released once stopped.
        """
        if view is None or row.stop_signalled_at is not None or self._launched(row) is None:
            return False
        retry_coming = view.try_number > row.try_number and view.state in _RETRY_ON_ITS_WAY
        return view.state == "up_for_retry" or retry_coming

    def _orphan_stopped(self, row: JobRow, reason: str) -> bool:
        """Whether the ended job's capacity is free: no training job of its lease can still run.

        An orphaned SageMaker training job not known to be stopped yet is listed in ``stop_requests``
        (every cycle until it is); the host asks it to stop once this cycle has committed.
        """
        record = self._launched(row)
        if record is None:  # none launched, or its task recorded it ended: nothing runs on the capacity
            return True
        if row.task_ended_seen_at is None:  # a local group's stop counts from now (``_orphan_gone``)
            row.task_ended_seen_at = self.now
        if row.stop_signalled_at is None:  # not a victim: the orphan_timeout counts from now
            row.stop_signalled_at = self.now
            row.status_reason = (
                f"Stopping: {reason}; its training job {record.get('name')} may still run and is being "
                "stopped before its capacity is released"
            )
        if self._orphan_gone(record, row.task_ended_seen_at, row.stop_signalled_at):
            return True
        if record.get("backend") == "local":  # its bound is known: no orphan_timeout
            self.report.orphans.append(row.job_id)
            return False
        self._list_stop(StopRequest(row.job_id, record, victim=False))  # asked after the commit
        if self.now - row.stop_signalled_at < self.settings.orphan_timeout:
            self.report.orphans.append(row.job_id)
            return False
        log.warning(
            "Training job %s of job %s not confirmed stopped after %s; releasing its capacity",
            record.get("name"),
            row.job_id,
            self.settings.orphan_timeout,
        )
        return True

    def _orphan_gone(self, record: TrainingJobRecord, seen_over: datetime, told_to_stop: datetime) -> bool:
        """Whether the training job of a job whose try was first seen over at ``seen_over`` (and told to
        stop at ``told_to_stop``: its preemption decision, or the same moment) is known to no longer run.

        A local process group is gone by ``local_devices_free_at``. A SageMaker job is gone once the
        host, asking it to stop after a cycle since ``told_to_stop``, found it no longer running.
        """
        if record.get("backend") == "local":
            return self.now >= local_devices_free_at(seen_over, float(record.get("grace_period", 120.0)))
        stopped = self.settings.stopped_training_jobs
        return stopped is not None and stopped.confirmed_since(record.get("name", ""), told_to_stop)

    # --- 3. admission requests -------------------------------------------------------------------------

    def _admit(self, state: QueueState, waiting: list[_Waiting]) -> tuple[QueueState, dict[str, _Waiting]]:
        grantable: dict[str, _Waiting] = {}
        state, admitted = self._submit_new(state, waiting)
        for each in admitted:
            job = state.jobs.get(each.job_id)
            if job is not None and job.status.holds_capacity:
                if not job.is_stopping:  # granted while it settled (or its resume was lost): resume it
                    self._resume_grant(each, self._row(each.job_id))
                    continue
                # Its deferral is the stop report of the lease it names; a task that never received
                # its grant names none (preempted while it settled): the grant is only withdrawn.
                started = each.kwargs.get("released_lease_id") == lease_id_of(self._row(each.job_id))
                state = record_stop_completed(self.session, state, each.job_id, self.now, started=started)
                self.report.stopped.append(each.job_id)
                job = state.jobs.get(each.job_id)
            if job is None:  # final: refused at submission, out of preemption retries, terminated
                self._reject(each, self._row(each.job_id).status_reason)
                continue
            # RUNNABLE: an ordinary request, at its original place. That includes a victim whose stop
            # the allocator completed before its task reported it (``_victim_found_stopped``): the
            # ``released_lease_id`` it names was released already and counts no second preemption.
            grantable[each.job_id] = each
        return state, grantable

    def _submit_new(self, state: QueueState, waiting: list[_Waiting]) -> tuple[QueueState, list[_Waiting]]:
        """Record the requests the ledger has not seen (all at once); return the waiting it knows now.

        An invalid request is rejected and left out, and so is one the ledger cannot record
        (``_record_new``, ``_record_alone``); a retry's request may take over what its previous try still
        holds (``_submit_retry``).
        """
        unknown_ids = [each.job_id for each in waiting if each.job_id not in self.rows]
        finished = (
            set(self.session.scalars(select(JobRow.job_id).where(JobRow.job_id.in_(unknown_ids))))
            if unknown_ids
            else set()
        )
        holding = self._holding_by_task(state)
        batch: list[tuple[_Waiting, Submission]] = []
        admitted: list[_Waiting] = []
        submitted: list[str] = []
        refused: set[str] = set()
        for each in waiting:
            if each.job_id in self.rows or each.job_id in finished:
                admitted.append(each)
                continue
            request = self._request(each)
            if request is None:
                continue
            admitted.append(each)
            submitted.append(each.job_id)
            task = each.task
            previous = holding.get((task.dag_id, task.run_id, task.task_id, task.map_index))
            if previous is not None and self._row(previous.job_id).try_number < task.try_number:
                retried = self._record_alone(
                    each, partial(self._submit_retry, state, each, request, previous)
                )
                if retried is None:
                    refused.add(each.job_id)
                else:
                    state = retried
            else:
                submitted_at = _submitted_at(each)
                batch.append((each, Submission(each.job_id, request, _task_ref(task), submitted_at)))
        state, refused_new = self._record_new(state, batch)
        refused |= refused_new
        self.report.submitted += [job_id for job_id in submitted if job_id not in refused]
        return state, [each for each in admitted if each.job_id not in refused]

    def _record_new(
        self, state: QueueState, batch: list[tuple[_Waiting, Submission]]
    ) -> tuple[QueueState, set[str]]:
        """Record new requests at once; when the ledger refuses that, one by one, and reject each one it
        refuses (a value beyond its columns) on its own task. The new state, and the job ids refused."""
        if not batch:
            return state, set()
        try:
            with self.session.begin_nested():  # flushed before it ends: a refusal shows here
                return record_submissions(self.session, state, [job for _, job in batch], self.now), set()
        except Exception:  # one of them (or more): found below, where each is recorded or refused alone
            log.debug("Recording %d new requests at once failed; recording them one by one", len(batch))
        refused: set[str] = set()
        for each, submission in batch:
            recorded = self._record_alone(
                each, partial(record_submissions, self.session, state, [submission], self.now)
            )
            if recorded is None:
                refused.add(each.job_id)
            else:
                state = recorded
        return state, refused

    def _record_alone(self, waiting: _Waiting, record: Callable[[], QueueState]) -> QueueState | None:
        """``record()`` (what a request changes in the ledger) in a savepoint: the new state, or None when
        the ledger refused it; then the savepoint and what it added to the report are undone, and the
        request is rejected on its own task."""
        report, listed = copy.deepcopy(self.report), set(self.listed)  # as they were, to undo
        try:
            with self.session.begin_nested():  # flushed before it ends: a refusal shows here
                return record()
        except Exception as error:
            log.warning(
                "Job %s: its request could not be recorded; rejecting it", waiting.job_id, exc_info=True
            )
            self.report.undo_to(report)
            self.listed = listed
            self._reject(waiting, _unrecordable(error))
            return None

    def _holding_by_task(self, state: QueueState) -> dict[tuple[str, str, str, int], Job]:
        """Jobs holding capacity they could hand over to a retry, by task instance."""
        holding: dict[tuple[str, str, str, int], Job] = {}
        for job_id, job in state.jobs.items():
            if job.status.holds_capacity and not job.is_stopping:
                row = self._row(job_id)
                holding[(row.dag_id, row.run_id, row.task_id, row.map_index)] = job
        return holding

    def _submit_retry(
        self, state: QueueState, waiting: _Waiting, request: JobRequest, previous: Job
    ) -> QueueState:
        """A retry takes over its previous try's capacity and training job when it asks for the same;
        else it waits as a new job, and the previous try's training job is an orphan: its capacity is
        released once that job is stopped (``_orphan_stopped``; later cycles follow it in ``_reconcile``)."""
        held = previous.request
        if (held.quota_share_name, held.capacity_unit, held.instance_count) == (
            request.quota_share_name,
            request.capacity_unit,
            request.instance_count,
        ):
            self.report.handed_over[previous.job_id] = waiting.job_id
            task = _task_ref(waiting.task)
            return record_handover(
                self.session, state, previous.job_id, waiting.job_id, request, task, self.now
            )
        reason = f"Its retry {waiting.job_id} asks for other capacity"
        if self._orphan_stopped(self._row(previous.job_id), reason):
            self.report.finished.append(previous.job_id)
            state = record_finish(
                self.session, state, previous.job_id, self.now, succeeded=False, reason=reason
            )
        return record_submission(
            self.session,
            state,
            waiting.job_id,
            request,
            _task_ref(waiting.task),
            self.now,
            submitted_at=_submitted_at(waiting),
        )

    def _request(self, waiting: _Waiting) -> JobRequest | None:
        try:
            return validate_job_request(request_document(waiting.kwargs), source=waiting.job_id)
        except JobRequestError as error:
            self._reject(waiting, str(error))
            return None

    def _reject(self, waiting: _Waiting, reason: str) -> None:
        """Resume the task with a rejection (a job whose task cannot be claimed stays for a later cycle)."""
        self._claim([waiting])
        if not self.claims[waiting.job_id]:
            return
        self.report.rejected[waiting.job_id] = reason
        resume(
            self.session,
            self._task_instance(waiting),
            {"rejected": True, "job_id": waiting.job_id, "reason": reason},
        )

    # --- 4. decisions ----------------------------------------------------------------------------------

    def _grant(self, state: QueueState, grant: Grant, waiting: _Waiting | None) -> None:
        row = self._row(grant.job_id)
        if grant.capacity_unit.startswith(LOCAL_UNIT_PREFIX):
            row.held_devices = self._devices_for(state, row, grant)
        if waiting is None:
            self.report.unresumed.append(grant.job_id)
            return
        self._resume_grant(waiting, row)

    def _devices_for(self, state: QueueState, row: JobRow, grant: Grant) -> list[int]:
        """The grant's device indices: the lowest that no job holds among the unit's ``0..maxCapacity-1``.

        The host's GPUs are one set of indices: the jobs holding devices of any local unit, in any job
        queue, are counted (a quota file names one local unit, ``engine.config``; a ledger applied before
        that rule may hold two, and their jobs must not share a GPU either).
        """
        held = self.session.scalars(
            select(JobRow.held_devices).where(
                JobRow.status.in_([status.value for status in HOLDING_CAPACITY]),
                JobRow.held_capacity_unit.is_not(None),
                JobRow.job_id != row.job_id,
            )
        )
        total = state.queue.capacity.get(grant.capacity_unit, 0)
        devices = assign_devices(total, [list(each) for each in held if each], grant.instance_count)
        if devices is None:  # the engine counted room: some other queue or unit holds the indices
            raise LedgerError(
                f"no free {grant.capacity_unit} device indices among 0..{total - 1} for {grant.job_id} in "
                f"job queue {state.queue.name}: jobs of another job queue or local unit hold them. The "
                "host's GPUs are one set of indices, which a quota file gives to one local unit of one job "
                "queue: apply one that does (split the GPUs between teams with quota shares)"
            )
        return devices

    def _resume_grant(self, waiting: _Waiting, row: JobRow) -> None:
        """Resume the granted task, once it has settled (else a later cycle resumes it)."""
        if not waiting.settled:
            self.report.settling.append(row.job_id)
            return
        ti = self._task_instance(waiting)
        payload: dict[str, Any] = {
            "lease_id": lease_id_of(row),
            "job_id": row.job_id,
            "ti_id": str(ti.id),
            "try_number": ti.try_number,
            "attempt": row.attempt,
            "capacityUnit": row.held_capacity_unit,
            "instanceCount": row.held_instance_count,
            "borrowed": row.borrowed_instance_count,
            "granted_at": self.now.astimezone(UTC).isoformat(),
            "submitted_at": row.submitted_at.astimezone(UTC).isoformat(),
        }
        if row.held_devices is not None:
            payload["devices"] = list(row.held_devices)
        if row.job_id in self.report.handed_over.values():
            payload["reattach"] = True
        resume(self.session, ti, payload)
        self.report.granted.append(Lease(row.job_id, str(ti.id), payload))

    def _preempt(self, state: QueueState, preemption: Preemption) -> None:
        self.report.preempted.setdefault(preemption.preemptor_id, []).extend(preemption.victim_ids)
        rule = preemption.rule.value
        self.report.preempted_by_rule[rule] = self.report.preempted_by_rule.get(rule, 0) + len(
            preemption.victim_ids
        )
        for victim_id in preemption.victim_ids:
            row = self._row(victim_id)
            self._signal(state.jobs[victim_id], row, self.views.get(victim_id))
            self._list_victim(row)  # the stop starts at the decision, not when its task next runs

    def _signal(self, job: Job, row: JobRow, view: TaskView | None) -> None:
        """Tell a job's task to stop: the store signal always, a preempt event when it is monitoring."""
        signal: Preempt = {
            "preempt": True,
            "lease_id": lease_id_of(row),
            "job_id": job.job_id,
            "preempted_by": job.preempted_by,
            "rule": row.preemption_rule or (None if job.stop_cause is None else job.stop_cause.value),
            "reason": job.status_reason,
            "at": self.now.astimezone(UTC).isoformat(),
        }
        first = row.stop_signalled_at is None
        write_signal(self.session, row, dict(signal))
        resumed = False
        # A task that just deferred from a worker run gets the event once it has settled (the stale
        # executor event again); meanwhile the store signal is there, and this is re-sent each cycle.
        if (
            is_monitoring(view, ADMISSION_CLASSPATH)
            and view is not None
            and view.settled(self.now, self.settings.settle_time)
        ):
            ti = claim_deferred(self.session, view.ti_id)
            if ti is not None:
                resume(self.session, ti, dict(signal))
                resumed = True
        if first:
            row.stop_signalled_at = self.now
        if first or resumed:
            self.report.signalled.append(job.job_id)

    def _row(self, job_id: str) -> JobRow:
        row = self.rows.get(job_id) or self.session.get(JobRow, job_id)
        if row is None:
            raise LedgerError(f"job {job_id} is not in the quota ledger")
        self.rows[job_id] = row
        return row


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
        if request.counts(_ask_to_stop(settings, request.record)):
            stopped.append(request.record.get("name", ""))
            if request.victim:
                report.victims_found_stopped.append(request.job_id)
    if settings.stopped_training_jobs is not None:
        settings.stopped_training_jobs.remember(stopped, asked_at=report.ran_at)


def _ask_to_stop(settings: CycleSettings, record: TrainingJobRecord) -> StopAnswer:
    """Ask a training job to stop through ``settings.job_stopper``; what it found."""
    stopper = settings.job_stopper or stop_through_backend
    try:
        return stopper(record)
    except Exception:  # an unreachable backend must not stop the host; asked again later or by the task
        log.exception("Could not ask training job %s to stop", record.get("name"))
        return StopAnswer.RUNNING


def stop_through_backend(record: TrainingJobRecord) -> StopAnswer:
    """Ask a SageMaker training job to stop (no wait) through the process's cached client; what it found."""
    if record.get("backend") != "sagemaker":
        return StopAnswer.MISSING  # only SageMaker jobs are listed: nothing the allocator could stop
    from airflow_quota.backends.sagemaker import request_training_job_stop

    status = request_training_job_stop(record.get("aws_conn_id"), record.get("region_name"), record["name"])
    if status is None:
        return StopAnswer.MISSING
    return _SAGEMAKER_ANSWERS.get(status, StopAnswer.RUNNING)


def _unrecordable(error: BaseException) -> str:
    """Why a request the ledger cannot record is rejected, with the ledger's limits."""
    return (
        f"Its request could not be recorded in the quota ledger ({_first_line(error)}). The ledger stores "
        f"names up to {NAME_LENGTH} characters, a capacityUnit up to {UNIT_LENGTH}, a job id "
        f"(dag_id/run_id/task_id/map_index/try_number) up to {JOB_ID_LENGTH} and numbers up to "
        f"{2**31 - 1} (its INTEGER columns): make the value that is beyond them smaller"
    )


def _task_ref(task: WaitingTask) -> TaskInstanceRef:
    return TaskInstanceRef(
        task.dag_id, task.run_id, task.task_id, task.map_index, task.try_number, str(task.id)
    )


def _submitted_at(waiting: _Waiting) -> datetime:
    """The request's first submission: what its kwargs say, else when it deferred (a task that waits from
    the triggerer learns its submission time from its grant, so its first request names none)."""
    value = waiting.kwargs.get("submitted_at")
    try:
        at = datetime.fromisoformat(value) if isinstance(value, str) else waiting.task.deferred_at
    except ValueError:
        at = waiting.task.deferred_at
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _planning_state(state: QueueState, grantable: dict[str, _Waiting]) -> QueueState:
    """The queue without waiting jobs whose task is not claimed now (locked elsewhere, or gone).

    A job whose task still settles is planned: it may be granted (its capacity is held for it and
    its task resumed by the first cycle after it settled), and it may preempt.

    Jobs holding capacity, being stopped or holding a reservation stay: they count in the usage.
    """
    jobs = {
        job_id: job
        for job_id, job in state.jobs.items()
        if job.status is not JobStatus.RUNNABLE or job.holds_reservation or job_id in grantable
    }
    return QueueState(state.queue, jobs)
