"""Two allocator processes on one PostgreSQL database, with tasks coming and going: nothing granted twice.

Two allocator processes (forked: real OS processes, each with its own engine and connections) run
``run_allocation_cycle`` back to back as ``allocator.host.run_cycle`` does (each queue's part committed),
for ~15 s against the same database, while this process plays Airflow and the tasks: it defers new tasks for
admission in four shares (two LEND, two LEND_AND_BORROW; the busy shares alternate every few seconds, so
borrowing, reclaims and in-share preemptions happen; some jobs on ``local-gpu`` get device indices), starts
the tasks it sees resumed with a grant (running in a worker, or deferred on a monitoring trigger),
finishes some at random (success or failed), and stops preemption victims as a task does: it reads the
``task_state_store`` signal (or gets the preempt event) and defers for admission again
(``released_lease_id``, attempt + 1). Those re-deferrals, and some first ones, come from a worker run (pid
set) and wait out a 0.3 s settle time: such a task may be granted while it settles and resumed by a later
cycle, of either process.

What it proves:

* capacity is never granted twice: after every committed cycle (each allocator checks) and at every
  driver step, the ledger's held units per capacity unit <= the queue's capacity and no two holding
  jobs share a device index; so are the units of the tasks actually holding a grant (from their grant
  event until they report stopped or finish), which is what a GPU sees;
* every GRANTED audit row is exactly one resume of that task with that lease (the grants the driver saw,
  by job and attempt, equal the GRANTED rows); no task is resumed with a grant while it holds one;
* no job is lost or duplicated: once quiet, every task instance has exactly one ledger job for its try,
  and each job's state agrees with its task (success -> SUCCEEDED, failed -> FAILED, holding a grant ->
  SCHEDULED/STARTING/RUNNING with that attempt, waiting -> RUNNABLE); every stop report was taken once;
* both processes ran cycles (some skipped because the other held the advisory lock: the counts are
  printed), and no cycle failed.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa
from airflow.models.task_state_store import TaskStateStoreModel
from airflow.models.taskinstance import TaskInstance
from airflow.models.trigger import Trigger
from airflow.sdk.serde import deserialize, serialize
from airflow.utils.state import TaskInstanceState
from sqlalchemy.orm import Session

from airflow_quota.allocator.cycle import CycleReport, run_allocation_cycle
from airflow_quota.allocator.job_ids import job_id_for
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.engine.config import parse_quota_config
from airflow_quota.ledger.models import AuditKind, AuditRow, JobRow
from airflow_quota.protocol import PREEMPT_KEY
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, QuotaAdmissionTrigger

if TYPE_CHECKING:
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Event

    from tests.db.conftest import Database

from tests.db.metadata_rows import insert_deferred_task, reset_for_allocation

pytestmark = [pytest.mark.db, pytest.mark.airflow]  # the slow tier: see tests/conftest.py
POSTGRESQL_ONLY = pytest.mark.parametrize("database", ["postgresql"], indirect=True)

QUEUE = "gpu-training"
DAG_ID = "concurrency"
RUN_ID = "run-1"
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
MONITOR_CLASSPATH = "airflow_quota.triggers.sagemaker.QuotaTrainingJobTrigger"
CAPACITY = {"gpu": 8, "local-gpu": 4}
LENDERS = ("team-a", "team-c")
BORROWERS = ("team-b", "team-d")
QUOTAS = parse_quota_config(
    {
        "jobQueues": [
            {
                "jobQueueName": QUEUE,
                "capacityLimits": [{"capacityUnit": unit, "maxCapacity": n} for unit, n in CAPACITY.items()],
                "quotaShares": [
                    {
                        "quotaShareName": "team-a",
                        "capacityLimits": [
                            {"capacityUnit": "gpu", "maxCapacity": 2},
                            {"capacityUnit": "local-gpu", "maxCapacity": 2},
                        ],
                        "resourceSharingConfiguration": {"strategy": "LEND"},
                        "preemptionConfiguration": {"inSharePreemption": "ENABLED"},
                    },
                    {
                        "quotaShareName": "team-b",
                        "capacityLimits": [
                            {"capacityUnit": "gpu", "maxCapacity": 2},
                            {"capacityUnit": "local-gpu", "maxCapacity": 2},
                        ],
                        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": -1},
                    },
                    {
                        "quotaShareName": "team-c",
                        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
                        "resourceSharingConfiguration": {"strategy": "LEND"},
                        "preemptionConfiguration": {"inSharePreemption": "ENABLED"},
                    },
                    {
                        "quotaShareName": "team-d",
                        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
                        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 4},
                        "preemptionConfiguration": {"inSharePreemption": "ENABLED"},
                    },
                ],
            }
        ]
    },
    "quotas.yaml",
)
DRIVE_S = 15.0
#: On a loaded machine the allocators commit fewer cycles in DRIVE_S: the driver goes on, up to this long,
#: until a reclaim was stopped and reported (what the test is for), so load cannot make it vacuous or fail it.
DRIVE_MAX_S = 90.0
#: The busy shares switch between borrowers and lenders this often (lenders coming back reclaim).
PHASE_S = 3.0
#: A share with this many tasks waiting gets no more for now (so a share coming back can always submit).
MAX_WAITING_PER_SHARE = 5
QUIET_TIMEOUT_S = 10.0
#: Tasks deferred from a worker run (pid set: every stop report, some first deferrals) wait this long
#: before they are resumed; they may be granted meanwhile, and resumed by a later cycle (of either process).
SETTINGS = CycleSettings(settle_time=timedelta(seconds=0.3))
WORKER_PID = 4242
HOLDING = ("SCHEDULED", "STARTING", "RUNNING")
FORK = multiprocessing.get_context("fork")  # the children start at once: airflow is already imported


@pytest.fixture
def db(migrated: Database) -> Iterator[Database]:
    reset_for_allocation(migrated.engine, dag_id=DAG_ID, run_id=RUN_ID, start=START, quotas=QUOTAS)
    yield migrated


# --- checks both sides run ----------------------------------------------------------------------------------


def ledger_overcommit(session: Session) -> list[str]:
    """What the ledger holds beyond the capacity, or twice (device indices), in one snapshot."""
    problems = []
    held = session.execute(
        sa.select(JobRow.held_capacity_unit, sa.func.sum(JobRow.held_instance_count))
        .where(JobRow.status.in_(HOLDING))
        .group_by(JobRow.held_capacity_unit)
    ).all()
    for unit, units in held:
        if units > CAPACITY.get(str(unit), 0):
            problems.append(f"ledger holds {units} {unit}, capacity {CAPACITY.get(str(unit))}")
    devices: Counter[int] = Counter()
    for each in session.scalars(
        sa.select(JobRow.held_devices).where(JobRow.status.in_(HOLDING), JobRow.held_devices.is_not(None))
    ):
        devices.update(each or [])
    problems += [f"local-gpu device {device} held by {n} jobs" for device, n in devices.items() if n > 1]
    return problems


def snapshot(engine: sa.Engine) -> Session:
    session = Session(engine)
    session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    return session


# --- the allocator processes --------------------------------------------------------------------------------


def allocator_process(url: str, stop: Event, committed: Synchronized[int], summary_path: str) -> None:
    """Run cycles until ``stop``; after each committed cycle check the ledger; write a summary (JSON)."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    rng = random.Random()
    summary: dict[str, Any] = {"cycles": 0, "skipped": 0, "grants": 0, "errors": [], "overcommit": []}
    summary["preempted"] = Counter()
    try:
        while not stop.is_set():
            try:
                with Session(engine) as session:  # each queue's part committed, as a host's cycle
                    report = run_allocation_cycle(
                        session, datetime.now(UTC), SETTINGS, commit_each_queue=True
                    )
            except Exception:  # what allocator.host.run_cycle logs and counts; here a finding
                summary["errors"].append(traceback.format_exc(limit=8))
                continue
            if report.skipped:
                summary["skipped"] += 1
            else:
                summary["cycles"] += 1
                summary["grants"] += len(report.granted)
                summary["preempted"].update(report.preempted_by_rule)
                with committed.get_lock():
                    committed.value += 1
                with snapshot(engine) as session:
                    summary["overcommit"] += ledger_overcommit(session)
            time.sleep(rng.uniform(0, 0.01))
    finally:
        Path(summary_path).write_text(json.dumps(summary))


# --- the driver: Airflow and the tasks ----------------------------------------------------------------------


@dataclass
class Task:
    """One task instance as the driver (its worker and triggerer) knows it."""

    task_id: str
    ti_id: str
    share: str
    unit: str
    count: int
    priority: int
    retries: int | None
    submitted_at: str
    #: "waiting" (deferred for admission), "running" (in a worker), "monitoring", "done".
    where: str = "waiting"
    #: The admission attempt of its current deferral (+1 per stop report).
    attempt: int = 0
    #: The grant it holds (from its grant event until it reports stopped or ends).
    grant: dict[str, Any] | None = None
    monitor_trigger_id: int | None = None

    @property
    def job_id(self) -> str:
        return job_id_for(DAG_ID, RUN_ID, self.task_id, -1, 1)


@dataclass
class Observed:
    grants: Counter[tuple[str, int]] = field(default_factory=Counter)
    #: When each grant's resume was written (its ``granted_at``), by job and attempt.
    resumed_at: dict[tuple[str, int], datetime] = field(default_factory=dict)
    reattach_grants: int = 0
    grant_while_holding: list[str] = field(default_factory=list)
    bad_grants: list[str] = field(default_factory=list)
    stop_reports: int = 0
    preempt_events: int = 0
    store_signals_obeyed: int = 0
    rejections: Counter[str] = field(default_factory=Counter)
    finished: Counter[str] = field(default_factory=Counter)
    ledger_samples: int = 0
    overcommit: list[str] = field(default_factory=list)
    max_physical: Counter[str] = field(default_factory=Counter)


class Driver:
    """Defers tasks, starts granted ones, finishes some, stops victims; checks capacity at every step."""

    def __init__(self, engine: sa.Engine, rng: random.Random) -> None:
        self.engine = engine
        self.rng = rng
        self.tasks: dict[str, Task] = {}
        self.observed = Observed()
        self.started = time.monotonic()

    # -- Airflow writes -----------------------------------------------------------------------------------

    def _admission_trigger(self, session: Session, task: Task, released: str | None) -> int:
        kwargs = QuotaAdmissionTrigger(
            job_queue=QUEUE,
            job_name=task.task_id,
            quota_share_name=task.share,
            capacity_unit=task.unit,
            instance_count=task.count,
            scheduling_priority=task.priority,
            preemption_retries_before_termination=task.retries,
            submitted_at=task.submitted_at,
            attempt=task.attempt,
            released_lease_id=released,
        ).serialize()[1]
        trigger = Trigger(ADMISSION_CLASSPATH, kwargs, created_date=datetime.now(UTC))
        session.add(trigger)
        session.flush()
        return int(trigger.id)

    def submit(self) -> None:
        number = len(self.tasks)
        phase = int((time.monotonic() - self.started) / PHASE_S) % 2
        busy, quiet = (BORROWERS, LENDERS) if phase == 0 else (LENDERS, BORROWERS)
        share = self.rng.choice(busy if self.rng.random() < 0.8 else quiet)
        if (
            sum(t.where == "waiting" and t.share == share for t in self.tasks.values())
            >= MAX_WAITING_PER_SHARE
        ):
            return
        local = share in ("team-a", "team-b") and self.rng.random() < 0.25
        task = Task(
            task_id=f"t{number:04d}",
            ti_id=str(uuid.uuid4()),
            share=share,
            unit="local-gpu" if local else "gpu",
            count=1 if local else self.rng.choice((1, 1, 2)),
            priority=self.rng.choice((0, 0, 10, 50)),
            retries=1 if self.rng.random() < 0.2 else None,
            submitted_at=datetime.now(UTC).isoformat(),
        )
        from_worker = self.rng.random() < 0.3
        with Session(self.engine) as session, session.begin():
            trigger_id = self._admission_trigger(session, task, None)
            session.execute(
                sa.insert(TaskInstance.__table__).values(
                    id=uuid.UUID(task.ti_id),
                    dag_id=DAG_ID,
                    run_id=RUN_ID,
                    task_id=task.task_id,
                    map_index=-1,
                    try_number=1,
                    pool="default_pool",
                    pool_slots=1,
                    state=TaskInstanceState.DEFERRED,
                    trigger_id=trigger_id,
                    next_method="on_grant",
                    next_kwargs=serialize({}),
                    pid=WORKER_PID if from_worker else None,
                )
            )
        self.tasks[task.task_id] = task

    def _move(self, session: Session, task: Task, expected: str, **values: Any) -> bool:
        """Change the task instance only if it is still where the driver left it (one row, guarded)."""
        ti = TaskInstance.__table__
        where = [ti.c.id == uuid.UUID(task.ti_id), ti.c.state == expected]
        if expected == TaskInstanceState.DEFERRED:
            where.append(ti.c.trigger_id == task.monitor_trigger_id)
        result = session.execute(sa.update(ti).where(*where).values(**values))
        return bool(getattr(result, "rowcount", 0) == 1)

    def _delete_signal(self, session: Session, task: Task) -> None:
        store = TaskStateStoreModel
        session.execute(
            sa.delete(store).where(
                store.dag_id == DAG_ID,
                store.run_id == RUN_ID,
                store.task_id == task.task_id,
                store.key == PREEMPT_KEY,
            )
        )

    def _redefer_after_stop(self, session: Session, task: Task, expected: str) -> bool:
        """The task stopped its training job: it defers for admission again (its stop report)."""
        assert task.grant is not None
        released = str(task.grant["lease_id"])
        task.attempt += 1
        trigger_id = self._admission_trigger(session, task, released)
        if not self._move(
            session,
            task,
            expected,
            state=TaskInstanceState.DEFERRED,
            trigger_id=trigger_id,
            next_method="on_grant",
            next_kwargs=serialize({}),
            pid=WORKER_PID,
        ):
            task.attempt -= 1  # it moved meanwhile (finished, or resumed): its unused trigger stays, harmless
            return False
        self._delete_signal(session, task)
        return True

    # -- what the tasks do --------------------------------------------------------------------------------

    def take_resumes(self) -> None:
        """Every task instance the allocator resumed: a grant, a rejection or a preempt event."""
        ti = TaskInstance.__table__
        with Session(self.engine) as session:
            resumed = session.execute(
                sa.select(ti.c.task_id, ti.c.id, ti.c.next_kwargs).where(
                    ti.c.state == TaskInstanceState.SCHEDULED
                )
            ).all()
        for task_id, ti_id, next_kwargs in resumed:
            task = self.tasks[task_id]
            event: dict[str, Any] = deserialize(next_kwargs)["event"]  # type: ignore[index]  # a dict we wrote
            with Session(self.engine) as session, session.begin():
                if event.get("rejected"):
                    if self._move(session, task, TaskInstanceState.SCHEDULED, state=TaskInstanceState.FAILED):
                        task.where = "done"
                        reason = str(event["reason"])
                        retries = "preemptionRetriesBeforeTermination" in reason
                        self.observed.rejections["out of retries" if retries else reason] += 1
                elif event.get("preempt"):
                    self.observed.preempt_events += 1
                    if task.grant is not None and event["lease_id"] == task.grant["lease_id"]:
                        if self._redefer_after_stop(session, task, TaskInstanceState.SCHEDULED):
                            self._stopped(task)
                    else:  # a stale signal: back to monitoring
                        self._move(
                            session,
                            task,
                            TaskInstanceState.SCHEDULED,
                            state=TaskInstanceState.DEFERRED,
                            trigger_id=task.monitor_trigger_id,
                        )
                else:
                    self._granted(session, task, str(ti_id), event)

    def _granted(self, session: Session, task: Task, ti_id: str, event: dict[str, Any]) -> None:
        if event.get("reattach"):
            self.observed.reattach_grants += 1
        elif task.grant is not None:
            self.observed.grant_while_holding.append(f"{task.task_id}: {event} while holding {task.grant}")
        attempt = int(event["attempt"])
        if (
            event["ti_id"] != ti_id
            or event["job_id"] != task.job_id
            or event["lease_id"] != f"{task.job_id}#{attempt}"
            or (event["capacityUnit"], event["instanceCount"]) != (task.unit, task.count)
        ):
            self.observed.bad_grants.append(f"{task.task_id}: {event}")
        if self._move(
            session, task, TaskInstanceState.SCHEDULED, state=TaskInstanceState.RUNNING, next_kwargs=None
        ):
            if not event.get("reattach"):
                self.observed.grants[(task.job_id, attempt)] += 1
                self.observed.resumed_at[(task.job_id, attempt)] = datetime.fromisoformat(event["granted_at"])
            task.grant, task.where = event, "running"

    def _stopped(self, task: Task) -> None:
        task.grant, task.where, task.monitor_trigger_id = None, "waiting", None
        self.observed.stop_reports += 1

    def obey_store_signals(self, probability: float) -> None:
        """A task running in a worker polls its ``task_state_store``: a signal for its lease stops it."""
        store = TaskStateStoreModel
        with Session(self.engine) as session:
            signals = session.execute(
                sa.select(store.task_id, store.value).where(store.run_id == RUN_ID, store.key == PREEMPT_KEY)
            ).all()
        for task_id, value in signals:
            task = self.tasks[task_id]
            if task.where != "running" or task.grant is None or self.rng.random() > probability:
                continue
            if json.loads(value)["lease_id"] != task.grant["lease_id"]:
                continue  # stale: for an earlier lease
            with Session(self.engine) as session, session.begin():
                if self._redefer_after_stop(session, task, TaskInstanceState.RUNNING):
                    self._stopped(task)
                    self.observed.store_signals_obeyed += 1

    def launch_some(self, probability: float) -> None:
        """Running tasks launch their training job and defer on its monitoring trigger."""
        for task in [t for t in self.tasks.values() if t.where == "running"]:
            if self.rng.random() > probability:
                continue
            with Session(self.engine) as session, session.begin():
                if self._has_signal(session, task):
                    continue  # checked before deferring: it stops instead (obey_store_signals)
                trigger = Trigger(MONITOR_CLASSPATH, {"training_job_name": task.task_id}, created_date=START)
                session.add(trigger)
                session.flush()
                moved = self._move(
                    session,
                    task,
                    TaskInstanceState.RUNNING,
                    state=TaskInstanceState.DEFERRED,
                    trigger_id=trigger.id,
                    next_method="on_monitor",
                    next_kwargs=serialize({}),
                )
                if moved:
                    task.where, task.monitor_trigger_id = "monitoring", int(trigger.id)

    def _has_signal(self, session: Session, task: Task) -> bool:
        store = TaskStateStoreModel
        value = session.scalar(
            sa.select(store.value).where(
                store.dag_id == DAG_ID,
                store.run_id == RUN_ID,
                store.task_id == task.task_id,
                store.key == PREEMPT_KEY,
            )
        )
        return (
            value is not None
            and task.grant is not None
            and json.loads(value)["lease_id"] == task.grant["lease_id"]
        )

    def finish_one(self) -> None:
        holding = [t for t in self.tasks.values() if t.where in ("running", "monitoring")]
        if not holding:
            return
        task = self.rng.choice(holding)
        outcome = TaskInstanceState.SUCCESS if self.rng.random() < 0.8 else TaskInstanceState.FAILED
        expected = TaskInstanceState.RUNNING if task.where == "running" else TaskInstanceState.DEFERRED
        with Session(self.engine) as session, session.begin():
            if self._move(session, task, expected, state=outcome, trigger_id=None):
                task.grant, task.where = None, "done"
                self.observed.finished[outcome.value] += 1

    # -- checks at every step -----------------------------------------------------------------------------

    def check_capacity(self) -> None:
        physical: Counter[str] = Counter()
        devices: Counter[int] = Counter()
        for task in self.tasks.values():
            if task.grant is not None:
                physical[task.grant["capacityUnit"]] += int(task.grant["instanceCount"])
                devices.update(task.grant.get("devices") or [])
        for unit, units in physical.items():
            self.observed.max_physical[unit] = max(self.observed.max_physical[unit], units)
            if units > CAPACITY[unit]:
                self.observed.overcommit.append(f"tasks hold {units} {unit} under grants: {physical}")
        self.observed.overcommit += [
            f"device {d} granted to {n} running tasks" for d, n in devices.items() if n > 1
        ]
        with snapshot(self.engine) as session:
            self.observed.overcommit += ledger_overcommit(session)
        self.observed.ledger_samples += 1

    def step(self, *, busy: bool) -> None:
        if busy and self.rng.random() < 0.6:
            self.submit()
        self.take_resumes()
        self.obey_store_signals(0.5 if busy else 1.0)
        if busy:
            self.launch_some(0.2)
            if self.rng.random() < 0.45:
                self.finish_one()
        self.check_capacity()


def lease_of(audit: AuditRow) -> tuple[str, int]:
    """The job and attempt of a GRANTED or PREEMPTED audit row."""
    return str(audit.job_id), int((audit.details or {})["attempt"])


def ledger_state(engine: sa.Engine) -> list[tuple[str, str, int, datetime | None]]:
    with Session(engine) as session:
        return [
            (job_id, status, attempt, stop_signalled_at)
            for job_id, status, attempt, stop_signalled_at in session.execute(
                sa.select(JobRow.job_id, JobRow.status, JobRow.attempt, JobRow.stop_signalled_at).order_by(
                    JobRow.job_id
                )
            )
        ]


def reclaims(db: Database) -> int:
    """How many preemptions the allocators have made to give a lender its capacity back."""
    with db.session() as session:
        statement = sa.select(sa.func.count()).where(
            AuditRow.kind == AuditKind.PREEMPTED.value, AuditRow.rule == "RECLAIM"
        )
        return int(session.scalar(statement) or 0)


def settle(driver: Driver, committed: list[Synchronized[int]]) -> bool:
    """Stop making changes; stop victims and take resumes until three cycles in a row change nothing
    (no job being stopped, every job holding capacity has its task resumed)."""
    deadline = time.monotonic() + QUIET_TIMEOUT_S
    last, since, cycles_at = ledger_state(driver.engine), 0, sum(c.value for c in committed)
    while time.monotonic() < deadline:
        driver.step(busy=False)
        time.sleep(0.05)
        now_state, cycles = ledger_state(driver.engine), sum(c.value for c in committed)
        stopping = any(stop is not None for *_, stop in now_state)
        by_job = {task.job_id: task for task in driver.tasks.values()}
        unresumed = any(status in HOLDING and by_job[job].grant is None for job, status, *_ in now_state)
        if now_state != last or stopping or unresumed:
            last, cycles_at = now_state, cycles
            continue
        since = cycles - cycles_at
        if since >= 3:
            return True
    return False


@POSTGRESQL_ONLY  # two allocators need the advisory lock and row locks; SQLite runs one scheduler
def test_two_allocator_processes_never_grant_capacity_twice_nor_lose_a_job(
    db: Database, tmp_path: Path
) -> None:
    stop = FORK.Event()
    committed = [FORK.Value("i", 0), FORK.Value("i", 0)]
    summaries = [tmp_path / "allocator-0.json", tmp_path / "allocator-1.json"]
    allocators = [
        FORK.Process(target=allocator_process, args=(db.url, stop, committed[n], str(summaries[n])))
        for n in range(2)
    ]
    for process in allocators:
        process.start()
    driver = Driver(db.engine, random.Random("concurrency"))
    try:
        checked_at = 0.0
        while (elapsed := time.monotonic() - driver.started) < DRIVE_MAX_S:
            if elapsed >= DRIVE_S and elapsed - checked_at >= 1:
                checked_at = elapsed
                if driver.observed.stop_reports > 0 and reclaims(db) > 0:
                    break
            driver.step(busy=True)
            time.sleep(driver.rng.uniform(0.005, 0.04))
        settled = settle(driver, committed)
    finally:
        stop.set()
        for process in allocators:
            process.join(timeout=30)
    assert [process.exitcode for process in allocators] == [0, 0]
    runs = [json.loads(path.read_text()) for path in summaries]
    observed = driver.observed

    with Session(db.engine) as session:
        jobs = {row.job_id: row for row in session.scalars(sa.select(JobRow))}
        tis = {ti.task_id: ti for ti in session.scalars(sa.select(TaskInstance))}
        granted = list(session.scalars(sa.select(AuditRow).where(AuditRow.kind == AuditKind.GRANTED.value)))
        granted_rows = Counter(lease_of(row) for row in granted)
        preempted_leases = {
            lease_of(row)
            for row in session.scalars(sa.select(AuditRow).where(AuditRow.kind == AuditKind.PREEMPTED.value))
        }
        resumed_later = sum(row.at < observed.resumed_at.get(lease_of(row), row.at) for row in granted)
        audit = Counter(session.scalars(sa.select(AuditRow.kind)))
        preempted_by_rule = Counter(
            session.scalars(sa.select(AuditRow.rule).where(AuditRow.kind == AuditKind.PREEMPTED.value))
        )

    print(
        f"\n{len(driver.tasks)} tasks; allocator cycles committed {[r['cycles'] for r in runs]}, skipped "
        f"(lock held by the other) {[r['skipped'] for r in runs]}, grants {[r['grants'] for r in runs]}; "
        f"grants seen {sum(observed.grants.values())} ({resumed_later} resumed by a later cycle), "
        f"stop reports {observed.stop_reports} "
        f"({observed.store_signals_obeyed} via the store, {observed.preempt_events} preempt events), "
        f"finished {dict(observed.finished)}, rejected {sum(observed.rejections.values())}; "
        f"preemptions by rule {dict(preempted_by_rule)}; audit {dict(audit)}; "
        f"max units held by tasks {dict(observed.max_physical)}; ledger sampled by the driver "
        f"{observed.ledger_samples} times; settled {settled}"
    )
    # Capacity never granted twice.
    assert [r["errors"] for r in runs] == [[], []]
    assert [r["overcommit"] for r in runs] == [[], []]
    assert observed.overcommit == []
    assert observed.grant_while_holding == []
    assert observed.bad_grants == []
    assert observed.reattach_grants == 0
    # Each resume of a task is one GRANTED row with that lease; a GRANTED row no task was resumed with is
    # a grant withdrawn before its task heard of it (preempted while the task settled), nothing else.
    assert not +(observed.grants - granted_rows), "a task was resumed with a lease the ledger never granted"
    never_resumed = set(granted_rows - observed.grants)
    assert never_resumed <= preempted_leases, (
        f"GRANTED, never resumed, not preempted: {never_resumed - preempted_leases}"
    )
    # No job lost or duplicated; each in the one state its task says.
    assert settled, "the allocators and tasks did not settle"
    assert set(jobs) == {task.job_id for task in driver.tasks.values()}
    wrong = []
    for task in driver.tasks.values():
        row, ti = jobs[task.job_id], tis[task.task_id]
        if row.ti_id != task.ti_id:
            wrong.append(f"{task.task_id}: ledger ti_id {row.ti_id}")
        if ti.state == TaskInstanceState.SUCCESS:
            expected = {"SUCCEEDED"}
        elif ti.state == TaskInstanceState.FAILED:
            expected = {"FAILED"}
        elif task.grant is not None:
            expected = set(HOLDING)
            if row.attempt != task.grant["attempt"] or row.held_instance_count != task.count:
                wrong.append(f"{task.task_id}: holds {task.grant['lease_id']}, ledger {row.attempt}")
        else:
            expected = {"RUNNABLE"}
        if row.status not in expected:
            wrong.append(
                f"{task.task_id} ({task.where}, task {ti.state}): job {row.status}, expected {expected}"
            )
    assert wrong == []
    out_of_retries = observed.rejections["out of retries"]
    # Every stop report is taken once; the other REQUEUED rows are grants withdrawn before their task
    # heard of them (no stop to report), as many as the GRANTED rows no task was resumed with.
    withdrawn = sum(granted_rows[lease] for lease in never_resumed)
    assert observed.stop_reports + withdrawn == audit[AuditKind.REQUEUED.value] + out_of_retries
    # Both allocators worked; the interesting events happened.
    assert all(r["cycles"] > 0 for r in runs), runs
    assert observed.stop_reports > 0 and preempted_by_rule["RECLAIM"] > 0, preempted_by_rule


# --- found by the test above --------------------------------------------------------------------------------


def defer_for_admission(db: Database, task_id: str, priority: int, at: datetime, **request: Any) -> str:
    """A task deferred for admission at ``at`` (two GPUs of team-a); return its job id."""
    pid = WORKER_PID if request.pop("from_worker", False) else None
    kwargs = QuotaAdmissionTrigger(
        job_queue=QUEUE,
        job_name=task_id,
        quota_share_name="team-a",
        capacity_unit="gpu",
        instance_count=2,
        scheduling_priority=priority,
        submitted_at=at.isoformat(),
        **request,
    ).serialize()[1]
    with db.session() as session, session.begin():
        return insert_deferred_task(
            session, kwargs, dag_id=DAG_ID, run_id=RUN_ID, task_id=task_id, deferred_at=at, pid=pid
        )


@POSTGRESQL_ONLY  # the same on SQLite; one backend keeps the suite short
def test_a_grant_preempted_before_its_task_was_resumed_is_not_a_preempted_attempt(db: Database) -> None:
    """A task deferred from a worker is granted while it settles (its resume waits for the settle time);
    a higher-priority job of its share comes. The settling task never got its lease, never ran and never
    reported a stop, so it must not end up counted as preempted, nor failed for it when its
    preemptionRetriesBeforeTermination is 0.

    What happens: the next cycle preempts it (IN_SHARE_PRIORITY), and the cycle after takes its still
    waiting deferral (no ``released_lease_id``) as the stop report of a lease it never received:
    preempted_attempt_count 1, FAILED "preempted 1 time(s), more than preemptionRetriesBeforeTermination=0",
    and the task that never ran is resumed with that rejection (without retries set: REQUEUED, and a GRANTED
    audit row no task was ever resumed with). The concurrency test above hits this at random.
    """
    start = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    settings = CycleSettings(settle_time=timedelta(seconds=10))

    def cycle(seconds: float) -> CycleReport:
        with db.session() as session, session.begin():
            return run_allocation_cycle(session, start + timedelta(seconds=seconds), settings)

    settling = defer_for_admission(
        db, "settling", 0, start, preemption_retries_before_termination=0, from_worker=True
    )
    first = cycle(1)
    assert (first.settling, first.granted) == ([settling], [])  # granted in the ledger, not resumed yet
    defer_for_admission(db, "urgent", 50, start + timedelta(seconds=1.5))

    reports = [cycle(2), cycle(3)]

    with db.session() as session:
        row = session.get(JobRow, settling)
        assert row is not None
        rejected = {
            reason for report in reports for job_id, reason in report.rejected.items() if job_id == settling
        }
        assert rejected == set()
        assert row.status != "FAILED" and row.preempted_attempt_count == 0, (row.status, row.status_reason)
