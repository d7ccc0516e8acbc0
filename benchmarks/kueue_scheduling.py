"""Kueue's published scheduler benchmark (baseline), replayed in real time on our allocator and ledger.

Kueue's ``test/performance/scheduler`` baseline: 5 cohorts of 6 ClusterQueues (nominal quota 20, borrowing
limit 100, reclaim within cohort Any, preemption within the queue LowerPriority) and per ClusterQueue
350 small workloads (1 unit, 200 ms, priority 50, one every 100 ms), 100 medium (5 units, 500 ms, priority
100, every 500 ms) and 50 large (20 units, 1 s, priority 200, every 1.2 s): 15,000 in all. In our terms:
5 job queues of 120 ``gpu``, each with 6 quota shares of 20, LEND_AND_BORROW with borrowLimit 500 (100
units more), in-share preemption ENABLED (cross-share reclaim is always on).

Two processes run against a fresh, migrated PostgreSQL database (no Airflow scheduler, no tasks):

* the **allocator** calls ``run_allocation_cycle`` in a loop, one transaction per cycle, as
  ``airflow quota allocator`` does (``settle_time`` 0: no task runs in a worker, ``task_instance.pid`` is
  NULL), and records after each commit what every share holds (``usage_of`` the cycle's end state);
* the **runner** (this process) plays Kueue's generator and its runner controller: it writes each job,
  when it is due, as a task instance DEFERRED on ``QuotaAdmissionTrigger`` (``dag_run``,
  ``task_instance`` and ``trigger`` rows, as Airflow leaves a deferred task); it sees a grant when the
  task instance is resumed (``scheduled``), and marks it ``success`` after its running time; a job told
  to stop (its ``task_state_store`` preempt signal) stops at once and defers for admission again with a
  released lease, as the task would after stopping. Like Kueue's runner, a preempted job runs its full
  time again once readmitted.

Reported beside Kueue's published figures (makespan 351 s, usage 55.9% against its 50% threshold, mean
time to admission 16.5 s large, 76.8 s medium, 215 s small) and the physical bound: the makespan no
scheduler can beat, max(work / capacity, the last arrival plus its running time).

Usage is Kueue's definition (its checker): for the class of all ClusterQueues, the quota they held,
integrated over the run, divided by their nominal quota times the run (here the shares' held units from
the ledger, which sum to at most the capacity); ``lowest share`` is the same ratio for the single share
that held least.

Usage::

    .venv/bin/python benchmarks/kueue_scheduling.py --scale 0.1      # 1,500 jobs, about a minute
    .venv/bin/python benchmarks/kueue_scheduling.py                  # 15,000 jobs: minutes, real time
    .venv/bin/python benchmarks/kueue_scheduling.py --scale 0.1 --profile   # cProfile the allocator

PostgreSQL is reached at ``QUOTA_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432``); the
benchmark creates its own database there and drops it at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import multiprocessing
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Event as StopEvent
from pathlib import Path
from typing import Any

# Runnable as a plain script from a checkout: make the package importable without installing it.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Before airflow is imported: never read or write a real Airflow installation. The allocator process
# inherits this home (and so the same Fernet key for the trigger kwargs).
if "QUOTA_BENCH_AIRFLOW_HOME" not in os.environ:
    os.environ["QUOTA_BENCH_AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="quota-kueue-bench-airflow-home-")
    # One Fernet key for every process (trigger kwargs are encrypted by the runner, read by the allocator).
    from cryptography.fernet import Fernet

    os.environ["AIRFLOW__CORE__FERNET_KEY"] = Fernet.generate_key().decode()
os.environ["AIRFLOW_HOME"] = os.environ["QUOTA_BENCH_AIRFLOW_HOME"]

import sqlalchemy as sa  # noqa: E402
from airflow.models.dagrun import DagRun  # noqa: E402
from airflow.models.task_state_store import TaskStateStoreModel  # noqa: E402
from airflow.models.taskinstance import TaskInstance  # noqa: E402
from airflow.models.trigger import Trigger  # noqa: E402
from airflow.sdk.serde import serialize  # noqa: E402
from airflow.utils.state import TaskInstanceState  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from airflow_quota.allocator.cycle import run_allocation_cycle  # noqa: E402
from airflow_quota.allocator.host import freeze_startup_objects  # noqa: E402
from airflow_quota.allocator.kept_state import KeptQueues  # noqa: E402
from airflow_quota.allocator.settings import CycleSettings  # noqa: E402
from airflow_quota.engine.config import parse_quota_config  # noqa: E402
from airflow_quota.engine.model import JobStatus  # noqa: E402
from airflow_quota.engine.usage import usage_of  # noqa: E402
from airflow_quota.ledger.configuration import apply_quota_config  # noqa: E402
from airflow_quota.protocol import PREEMPT_KEY  # noqa: E402
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, QuotaAdmissionTrigger  # noqa: E402
from tests.databases import airflow_engine, run_migrate  # noqa: E402

TITLE = "Kueue's scheduler benchmark (baseline) on our allocator and ledger, PostgreSQL, real time"
POSTGRES_SERVER = os.environ.get("QUOTA_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
DAG_ID = "kueue-bench"
RUN_ID = "run-1"
UNIT = "gpu"
JOB_QUEUES = 5
SHARES_PER_QUEUE = 6
SHARE_UNITS = 20
#: Kueue's borrowingLimit 100 units, as AWS's percentage of the share's own 20.
BORROW_LIMIT_PERCENT = 500
#: How often the runner looks for grants, due completions and preempt signals when idle.
POLL_SECONDS = 0.02


@dataclass(frozen=True)
class JobClass:
    name: str
    count: int
    units: int
    runtime_seconds: float
    priority: int
    interval_seconds: float


#: Per quota share (Kueue: per ClusterQueue), configs/baseline/generator.yaml.
JOB_CLASSES = (
    JobClass("small", 350, 1, 0.2, 50, 0.1),
    JobClass("medium", 100, 5, 0.5, 100, 0.5),
    JobClass("large", 50, 20, 1.0, 200, 1.2),
)


@dataclass(frozen=True)
class KueuePublished:
    """Kueue's published baseline figures (research/quota-semantics.md section 8)."""

    makespan_seconds: float = 351.1
    usage_percent: float = 55.9
    usage_threshold_percent: float = 50.0
    time_to_admission: tuple[tuple[str, float], ...] = (("large", 16.5), ("medium", 76.8), ("small", 215.0))


KUEUE = KueuePublished()


def queue_name(queue: int) -> str:
    return f"cohort-{queue}"


def share_name(queue: int, share: int) -> str:
    return f"cq-{queue}-{share}"


def quota_document() -> dict[str, Any]:
    """5 job queues of 120 gpu, each shared by 6 LEND_AND_BORROW shares of 20 (borrowLimit 500)."""
    return {
        "jobQueues": [
            {
                "jobQueueName": queue_name(queue),
                "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": SHARES_PER_QUEUE * SHARE_UNITS}],
                "quotaShares": [
                    {
                        "quotaShareName": share_name(queue, share),
                        "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": SHARE_UNITS}],
                        "resourceSharingConfiguration": {
                            "strategy": "LEND_AND_BORROW",
                            "borrowLimit": BORROW_LIMIT_PERCENT,
                        },
                        "preemptionConfiguration": {"inSharePreemption": "ENABLED"},
                    }
                    for share in range(SHARES_PER_QUEUE)
                ],
            }
            for queue in range(JOB_QUEUES)
        ]
    }


# --- the jobs -----------------------------------------------------------------------------------------------


@dataclass
class BenchJob:
    """One workload: what it asks for, when it is due, and what the runner saw happen to it."""

    name: str
    queue: str
    share: str
    job_class: JobClass
    due_at: float
    ti_id: str = ""
    created_at: float | None = None
    first_admitted_at: float | None = None
    running_since: float | None = None
    finished_at: float | None = None
    admissions: int = 0
    evictions: int = 0
    #: Seconds it ran, over all its admissions (from the grant seen to its success or its stop).
    ran_seconds: float = 0.0

    @property
    def end_due_at(self) -> float:
        assert self.running_since is not None
        return self.running_since + self.job_class.runtime_seconds


def make_jobs(scale: float) -> list[BenchJob]:
    """Every share's workload sets, ``scale`` of each set's count (at least 1), due at Kueue's intervals."""
    jobs = []
    for queue in range(JOB_QUEUES):
        for share in range(SHARES_PER_QUEUE):
            for job_class in JOB_CLASSES:
                for index in range(max(1, round(job_class.count * scale))):
                    jobs.append(
                        BenchJob(
                            name=f"q{queue}-s{share}-{job_class.name}-{index:04d}",
                            queue=queue_name(queue),
                            share=share_name(queue, share),
                            job_class=job_class,
                            due_at=index * job_class.interval_seconds,
                        )
                    )
    jobs.sort(key=lambda job: (job.due_at, job.name))
    return jobs


@dataclass(frozen=True)
class PhysicalBound:
    work_over_capacity: float
    arrival_span: float

    @property
    def makespan(self) -> float:
        return max(self.work_over_capacity, self.arrival_span)


def physical_bound(jobs: Sequence[BenchJob]) -> PhysicalBound:
    """Per job queue: the work over its capacity from each arrival on; and the last arrival's end."""
    capacity = SHARES_PER_QUEUE * SHARE_UNITS
    by_queue: dict[str, list[BenchJob]] = defaultdict(list)
    for job in jobs:
        by_queue[job.queue].append(job)
    work_bound = 0.0
    for queue_jobs in by_queue.values():
        remaining = sum(job.job_class.units * job.job_class.runtime_seconds for job in queue_jobs)
        for job in sorted(queue_jobs, key=lambda each: each.due_at):
            work_bound = max(work_bound, job.due_at + remaining / capacity)
            remaining -= job.job_class.units * job.job_class.runtime_seconds
    arrival_span = max(job.due_at + job.job_class.runtime_seconds for job in jobs)
    return PhysicalBound(work_bound, arrival_span)


# --- the database -------------------------------------------------------------------------------------------


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new PostgreSQL database, migrated (``airflow db migrate``), the quotas applied; dropped after."""
    server = sa.make_url(POSTGRES_SERVER).set(drivername="postgresql+psycopg2", database="postgres")
    name = f"quota_kueue_bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = server.set(database=name).render_as_string(hide_password=False)
    try:
        run_migrate(url, Path(os.environ["AIRFLOW_HOME"]))
        engine = sa.create_engine(url)
        with engine.begin() as connection:
            connection.execute(
                sa.insert(DagRun.__table__).values(
                    dag_id=DAG_ID,
                    run_id=RUN_ID,
                    run_type="manual",
                    run_after=datetime.now(UTC),
                    state="running",
                )
            )
        with Session(engine) as session, session.begin():
            quotas = parse_quota_config(quota_document(), "kueue-baseline")
            apply_quota_config(
                session, quotas, applied_by="benchmark", source="kueue-baseline", now=datetime.now(UTC)
            )
        engine.dispose()
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


# --- the allocator process ----------------------------------------------------------------------------------


@dataclass
class CycleRecord:
    started: float
    committed: float
    granted: int
    preempted: int
    finished: int
    waiting: int
    #: Units each share holds once the cycle committed, by share name.
    held: dict[str, int]


def allocator_loop(
    url: str, ready: StopEvent, stop: StopEvent, out_path: str, interval: float, profile: bool
) -> None:
    """Cycle until told to stop; write every cycle's record (and the profile) to ``out_path`` as JSON."""
    engine = airflow_engine(url)  # a scheduler's engine
    kept = KeptQueues()  # as a host keeps the queues' state between its cycles
    settings = CycleSettings(settle_time=timedelta(0), kept_queues=kept)
    with Session(engine) as session, session.begin():  # warm up: imports, connection, an empty cycle
        warm_up = run_allocation_cycle(session, datetime.now(UTC), settings)
    if not warm_up.skipped:
        kept.committed()
    freeze_startup_objects()  # as a host does once it has started
    ready.set()
    cycles: list[dict[str, Any]] = []
    errors: list[str] = []
    profiler = cProfile.Profile() if profile else None
    while not stop.is_set():
        started = time.time()
        try:
            if profiler is not None:
                profiler.enable()
            with Session(engine, expire_on_commit=False) as session:  # each queue's part commits
                report = run_allocation_cycle(session, datetime.now(UTC), settings, commit_each_queue=True)
        except Exception as error:  # recorded and reported; the loop goes on like the real host
            kept.forget()
            errors.append(repr(error))
            continue
        finally:
            if profiler is not None:
                profiler.disable()
        if not report.skipped:
            kept.committed()
        committed = time.time()
        held: dict[str, int] = {}
        waiting = 0
        for state in report.states.values():
            usage = usage_of(state)
            for share in state.queue.shares:
                held[share.name] = usage.usage(share.name, UNIT)
            waiting += sum(job.status is JobStatus.RUNNABLE for job in state.jobs.values())
        cycles.append(
            {
                "started": started,
                "committed": committed,
                "granted": len(report.granted),
                "preempted": sum(report.preempted_by_rule.values()),
                "finished": len(report.finished),
                "waiting": waiting,
                "held": held,
            }
        )
        if interval > 0:
            stop.wait(interval)
    engine.dispose()
    document: dict[str, Any] = {"cycles": cycles, "errors": errors[:20], "error_count": len(errors)}
    if profiler is not None:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(20)
        document["profile"] = text.getvalue()
    Path(out_path).write_text(json.dumps(document), encoding="utf-8")


# --- the runner ---------------------------------------------------------------------------------------------


class Runner:
    """Creates the jobs when due, finishes the granted ones after their time, stops the preempted ones."""

    def __init__(self, engine: sa.Engine, jobs: list[BenchJob], epoch: float) -> None:
        self.engine = engine
        self.jobs = jobs
        self.epoch = epoch
        self.by_task = {job.name: job for job in jobs}
        self.next_due = 0
        self.waiting: dict[str, BenchJob] = {}
        self.running: dict[str, BenchJob] = {}
        self.finished = 0
        self.next_kwargs = serialize({})

    def now(self) -> float:
        return time.time() - self.epoch

    def step(self) -> bool:
        """One pass; True when anything happened."""
        created = self.create_due()
        granted = self.see_grants()
        finished = self.finish_due()
        stopped = self.stop_preempted()
        return bool(created or granted or finished or stopped)

    def create_due(self) -> int:
        now = self.now()
        due = []
        while self.next_due < len(self.jobs) and self.jobs[self.next_due].due_at <= now:
            due.append(self.jobs[self.next_due])
            self.next_due += 1
        if due:
            self.defer(due, new=True)
        return len(due)

    def defer(self, jobs: list[BenchJob], *, new: bool, released: dict[str, str] | None = None) -> None:
        """Write the jobs' task instances DEFERRED on a fresh admission trigger (new rows, or re-deferred)."""
        wall = datetime.now(UTC)
        triggers = []
        for job in jobs:
            first = (
                datetime.fromtimestamp(self.epoch + (job.created_at or self.now()), UTC) if not new else wall
            )
            kwargs = QuotaAdmissionTrigger(
                job_queue=job.queue,
                job_name=job.name,
                quota_share_name=job.share,
                capacity_unit=UNIT,
                instance_count=job.job_class.units,
                scheduling_priority=job.job_class.priority,
                submitted_at=first.isoformat(),
                attempt=job.admissions,
                released_lease_id=(released or {}).get(job.name),
            ).serialize()[1]
            triggers.append(
                {
                    "classpath": ADMISSION_CLASSPATH,
                    "kwargs": Trigger.encrypt_kwargs(kwargs),
                    "created_date": wall,
                }
            )
        trigger_table, ti_table = Trigger.__table__, TaskInstance.__table__
        with self.engine.begin() as connection:
            ids = list(
                connection.execute(
                    sa.insert(trigger_table).returning(trigger_table.c.id, sort_by_parameter_order=True),
                    triggers,
                ).scalars()
            )
            if new:
                rows = []
                for job, trigger_id in zip(jobs, ids, strict=True):
                    job.ti_id = str(uuid.uuid4())
                    rows.append(
                        {
                            "id": uuid.UUID(job.ti_id),
                            "dag_id": DAG_ID,
                            "run_id": RUN_ID,
                            "task_id": job.name,
                            "map_index": -1,
                            "try_number": 1,
                            "pool": "default_pool",
                            "pool_slots": 1,
                            "state": TaskInstanceState.DEFERRED,
                            "trigger_id": trigger_id,
                            "next_method": "on_grant",
                            "next_kwargs": self.next_kwargs,
                        }
                    )
                connection.execute(sa.insert(ti_table), rows)
            else:
                for job, trigger_id in zip(jobs, ids, strict=True):
                    connection.execute(
                        sa.update(ti_table)
                        .where(ti_table.c.id == uuid.UUID(job.ti_id))
                        .values(
                            state=TaskInstanceState.DEFERRED,
                            trigger_id=trigger_id,
                            next_method="on_grant",
                            next_kwargs=self.next_kwargs,
                        )
                    )
                store = TaskStateStoreModel.__table__
                connection.execute(
                    sa.delete(store).where(
                        store.c.dag_id == DAG_ID,
                        store.c.key == PREEMPT_KEY,
                        store.c.task_id.in_([job.name for job in jobs]),
                    )
                )
        now = self.now()
        for job in jobs:
            if new:
                job.created_at = now
            self.waiting[job.ti_id] = job

    def see_grants(self) -> int:
        """Task instances resumed by the allocator (``scheduled``): their jobs start running now."""
        if not self.waiting:
            return 0
        ti = TaskInstance.__table__
        with self.engine.connect() as connection:
            resumed = connection.execute(
                sa.select(ti.c.id).where(ti.c.dag_id == DAG_ID, ti.c.state == TaskInstanceState.SCHEDULED)
            ).scalars()
            granted = [str(ti_id) for ti_id in resumed if str(ti_id) in self.waiting]
        now = self.now()
        for ti_id in granted:
            job = self.waiting.pop(ti_id)
            job.admissions += 1
            if job.first_admitted_at is None:
                job.first_admitted_at = now
            job.running_since = now
            self.running[ti_id] = job
        return len(granted)

    def finish_due(self) -> int:
        now = self.now()
        done = [job for job in self.running.values() if job.end_due_at <= now]
        if not done:
            return 0
        ti = TaskInstance.__table__
        with self.engine.begin() as connection:
            connection.execute(
                sa.update(ti)
                .where(ti.c.id.in_([uuid.UUID(job.ti_id) for job in done]))
                .values(state=TaskInstanceState.SUCCESS, next_kwargs=None)
            )
        now = self.now()
        for job in done:
            job.finished_at = now
            job.ran_seconds += now - (job.running_since or now)
            del self.running[job.ti_id]
        self.finished += len(done)
        return len(done)

    def stop_preempted(self) -> int:
        """Running jobs whose preempt signal arrived stop at once and defer for admission again."""
        if not self.running:
            return 0
        store = TaskStateStoreModel.__table__
        with self.engine.connect() as connection:
            signals = connection.execute(
                sa.select(store.c.task_id, store.c.value).where(
                    store.c.dag_id == DAG_ID, store.c.key == PREEMPT_KEY
                )
            ).all()
        stopping = []
        released: dict[str, str] = {}
        for task_id, value in signals:
            job = self.by_task[task_id]
            if job.ti_id not in self.running:
                continue  # its grant not seen yet (next pass), or it finished meanwhile
            stopping.append(job)
            released[job.name] = str(json.loads(value).get("lease_id"))
        now = self.now()
        for job in stopping:
            del self.running[job.ti_id]
            job.ran_seconds += now - (job.running_since or now)
            job.running_since = None
            job.evictions += 1
        if stopping:
            self.defer(stopping, new=False, released=released)
        return len(stopping)


# --- results ------------------------------------------------------------------------------------------------


@dataclass
class Results:
    jobs: list[BenchJob]
    bound: PhysicalBound
    scale: float
    makespan: float | None
    created_span: float
    cycles: list[CycleRecord]
    allocator_errors: list[str]
    allocator_error_count: int
    profile: str | None
    timed_out: bool
    #: First creation to the last success, or to the end of the run when it timed out.
    observed_span: float = 0.0
    #: When the run ended (seconds from the runner's start).
    observed_end: float = 0.0
    share_usage: dict[str, float] = field(default_factory=dict)


def share_usage(cycles: Sequence[CycleRecord], start: float, end: float) -> dict[str, float]:
    """Per share: the units it held (ledger, after each commit) integrated over [start, end], / 20 x span."""
    held_seconds: dict[str, float] = defaultdict(float)
    for current, following in zip(cycles, [*cycles[1:], None], strict=True):
        since = max(current.committed, start)
        until = min(following.committed if following is not None else end, end)
        if until > since:
            for share, units in current.held.items():
                held_seconds[share] += units * (until - since)
    span = end - start
    return {share: seconds / (SHARE_UNITS * span) for share, seconds in sorted(held_seconds.items())}


def render(results: Results, console: Console) -> None:
    jobs, bound = results.jobs, results.bound
    finished = [job for job in jobs if job.finished_at is not None]
    makespan = results.makespan
    table = Table(title=f"{TITLE}: {len(jobs):,} jobs (scale {results.scale:g})")
    for column in ("metric", "ours", "Kueue (published)", "physical bound", "ours / Kueue", "ours / bound"):
        table.add_column(column, justify="right" if column != "metric" else "left")
    full_scale = results.scale == 1
    kueue_makespan = KUEUE.makespan_seconds

    def ratio(value: float | None, reference: float | None) -> str:
        return "-" if value is None or not reference else f"x{value / reference:.2f}"

    def kueue_ratio(value: float | None, reference: float) -> str:
        return ratio(value, reference) if full_scale else "(scale 1 only)"

    table.add_row(
        "makespan (s)",
        _seconds(makespan),
        f"{kueue_makespan:.1f}",
        f"{bound.makespan:.1f}",
        kueue_ratio(makespan, kueue_makespan),
        ratio(makespan, bound.makespan),
    )
    table.add_row("  work / capacity (s)", "", "", f"{bound.work_over_capacity:.1f}", "", "")
    table.add_row(
        "  arrival span (s)", f"{results.created_span:.1f}", "", f"{bound.arrival_span:.1f}", "", ""
    )
    usage = results.share_usage
    all_shares = sum(usage.values()) / len(usage) if usage else None
    table.add_row(
        "usage, all shares (Kueue's definition)",
        _percent(all_shares),
        f"{KUEUE.usage_percent:.1f}% (threshold {KUEUE.usage_threshold_percent:.0f}%)",
        "100%",
        kueue_ratio(all_shares, KUEUE.usage_percent / 100),
        "",
    )
    lowest = min(usage.items(), key=lambda item: item[1]) if usage else None
    highest = max(usage.items(), key=lambda item: item[1]) if usage else None
    table.add_row(
        "usage, lowest share (highest)",
        "-" if lowest is None or highest is None else f"{_percent(lowest[1])} ({_percent(highest[1])})",
        "-",
        "100%",
        "",
        "",
    )
    capacity = JOB_QUEUES * SHARES_PER_QUEUE * SHARE_UNITS
    span = makespan if makespan is not None else results.observed_span
    ran = sum(job.job_class.units * job.ran_seconds for job in jobs)
    needed = sum(job.job_class.units * job.job_class.runtime_seconds for job in jobs)
    table.add_row(
        "running work: unit-seconds run / (capacity x makespan)",
        _percent(ran / (capacity * span)) if span else "-",
        "-",
        _percent(needed / (capacity * bound.makespan)),
        "",
        "",
    )
    for class_name, kueue_seconds in KUEUE.time_to_admission:
        of_class = [job for job in jobs if job.job_class.name == class_name and job.created_at is not None]
        waits = [
            job.first_admitted_at - (job.created_at or 0.0)
            for job in of_class
            if job.first_admitted_at is not None
        ]
        ours = statistics.mean(waits) if waits else None
        label = f"mean time to admission, {class_name} (s)"
        if len(waits) < len(of_class):  # stopped early: those never admitted waited at least to the end
            censored = [
                (job.first_admitted_at if job.first_admitted_at is not None else results.observed_end)
                - (job.created_at or 0.0)
                for job in of_class
            ]
            label += f": {len(waits):,} of {len(of_class):,} admitted (all, waits cut at the end)"
            shown = f"{_seconds(ours)} (>= {statistics.mean(censored):.1f})"
        else:
            shown = _seconds(ours)
        table.add_row(
            label,
            shown,
            f"{kueue_seconds:.1f}",
            "0",
            kueue_ratio(ours, kueue_seconds) if not results.timed_out else "",
            "",
        )
    table.add_row("jobs finished", f"{len(finished):,} of {len(jobs):,}", "", "", "", "")
    table.add_row("preemptions (evictions)", f"{sum(job.evictions for job in jobs):,}", "", "0", "", "")
    console.print(table)
    durations = [(cycle.committed - cycle.started) * 1000 for cycle in results.cycles]
    if durations:
        ordered = sorted(durations)
        p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
        waiting = max(cycle.waiting for cycle in results.cycles)
        console.print(
            f"allocator: {len(durations):,} cycles, {sum(c.granted for c in results.cycles):,} grants; "
            f"cycle ms median {statistics.median(durations):.0f}, p95 {p95:.0f}, max {max(durations):.0f}; "
            f"most jobs RUNNABLE at once {waiting:,}; {results.allocator_error_count} failed cycles"
        )
        classes = {each.name: each for each in JOB_CLASSES}
        for name, phase in _phases(results).items():
            console.print(
                f"phase, {name}: {phase.start:.1f} to {phase.end:.1f} s, the capacity running completed "
                f"work {100 * phase.running:.0f}% of the time: between one job's end and the next one's "
                f"start on its capacity about {phase.turnover_ms(classes[name]):.0f} ms",
                soft_wrap=True,  # one line per class, for a reader's grep
            )
    for error in results.allocator_errors[:3]:
        console.print(f"[red]allocator error: {error}[/red]")
    if results.timed_out:
        console.print("[red]stopped at --timeout before every job finished: figures are partial[/red]")
    console.print(
        "time to admission: creation (the deferred task instance committed) to the runner seeing it resumed; "
        "makespan: first creation to last job success; usage: capacity the ledger holds for granted jobs "
        "until the cycle after their success; Kueue's figures are for scale 1"
    )
    if results.profile:
        console.print(results.profile)


@dataclass(frozen=True)
class Phase:
    """When one job class ran (from the last start of its 2nd percentile to its last success), and how much
    of the capacity ran work that completed meanwhile (a run that was preempted counts as idle)."""

    start: float
    end: float
    running: float

    def turnover_ms(self, job_class: JobClass) -> float:
        """The capacity idle per job of ``job_class``, were the phase this class's alone: between one job's
        end and the next one's start on its capacity."""
        return 1000 * job_class.runtime_seconds * (1 / self.running - 1) if self.running else math.inf


def _phases(results: Results) -> dict[str, Phase]:
    """Per job class, its ``Phase``: where the capacity idles between two jobs (Kueue's runner starts a job
    the moment it is admitted; here a success waits for its queue's part of a cycle to see it, and a grant
    for that part to commit)."""
    capacity = JOB_QUEUES * SHARES_PER_QUEUE * SHARE_UNITS
    runs = [
        (job.finished_at - job.job_class.runtime_seconds, job.finished_at, job.job_class.units, job.job_class)
        for job in results.jobs
        if job.finished_at is not None
    ]
    phases: dict[str, Phase] = {}
    for each in reversed(JOB_CLASSES):
        own = [(start, end) for start, end, _, job_class in runs if job_class is each]
        if not own:
            continue
        # From the start of its 50th in 1,000 (a few of a class fill gaps long before its turn).
        starts = sorted(run[0] for run in own)
        start, end = starts[len(starts) // 50], max(run[1] for run in own)
        if end <= start:
            continue
        ran = sum(units * max(0.0, min(end, until) - max(start, since)) for since, until, units, _ in runs)
        phases[each.name] = Phase(start, end, ran / (capacity * (end - start)))
    return phases


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def run_benchmark(args: argparse.Namespace, console: Console) -> Results:
    jobs = make_jobs(args.scale)
    bound = physical_bound(jobs)
    console.print(f"[dim]migrating a fresh PostgreSQL database; {len(jobs):,} jobs to run...[/dim]")
    with fresh_database() as url, tempfile.TemporaryDirectory(prefix="quota-kueue-bench-") as folder:
        out_path = str(Path(folder) / "allocator.json")
        context = multiprocessing.get_context("spawn")
        ready, stop = context.Event(), context.Event()
        allocator = context.Process(
            target=allocator_loop, args=(url, ready, stop, out_path, args.interval, args.profile), daemon=True
        )
        allocator.start()
        engine = sa.create_engine(url)
        if not ready.wait(timeout=300):
            raise RuntimeError("the allocator process did not start")
        epoch = time.time()
        runner = Runner(engine, jobs, epoch)
        timed_out = False
        try:
            while runner.finished < len(jobs):
                if runner.now() > args.timeout:
                    timed_out = True
                    break
                if not runner.step():
                    time.sleep(POLL_SECONDS)
        finally:
            stop.set()
            allocator.join(timeout=120)
            engine.dispose()
        document = json.loads(Path(out_path).read_text(encoding="utf-8")) if Path(out_path).exists() else {}
    cycles = [
        CycleRecord(
            started=c["started"] - epoch,
            committed=c["committed"] - epoch,
            granted=c["granted"],
            preempted=c["preempted"],
            finished=c["finished"],
            waiting=c["waiting"],
            held=c["held"],
        )
        for c in document.get("cycles", [])
    ]
    created = [job.created_at for job in jobs if job.created_at is not None]
    ends = [job.finished_at for job in jobs if job.finished_at is not None]
    start = min(created) if created else 0.0
    makespan = max(ends) - start if ends and not timed_out else None
    end = runner.now() if timed_out or not ends else max(ends)
    results = Results(
        jobs=jobs,
        bound=bound,
        scale=args.scale,
        makespan=makespan,
        created_span=(max(created) - start) if created else 0.0,
        cycles=cycles,
        allocator_errors=document.get("errors", []),
        allocator_error_count=document.get("error_count", 0),
        profile=document.get("profile"),
        timed_out=timed_out,
    )
    results.share_usage = share_usage(cycles, start, end)
    results.observed_span = end - start
    results.observed_end = end
    return results


def save(results: Results, path: Path) -> None:
    """The raw measurements (times in seconds from the runner's start), to look into a run afterwards."""
    document = {
        "scale": results.scale,
        "makespan": results.makespan,
        "timedOut": results.timed_out,
        "jobs": [
            {
                "name": job.name,
                "class": job.job_class.name,
                "createdAt": job.created_at,
                "firstAdmittedAt": job.first_admitted_at,
                "finishedAt": job.finished_at,
                "evictions": job.evictions,
                "ranSeconds": job.ran_seconds,
            }
            for job in results.jobs
        ],
        "cycles": [vars(cycle) for cycle in results.cycles],
        "shareUsage": results.share_usage,
        "observedSpan": results.observed_span,
        "observedEnd": results.observed_end,
        "allocatorErrors": results.allocator_errors,
        "allocatorErrorCount": results.allocator_error_count,
    }
    path.write_text(json.dumps(document), encoding="utf-8")


def load_saved(path: Path) -> Results:
    """Results written by ``--save``, to render them again."""
    document = json.loads(path.read_text(encoding="utf-8"))
    classes = {job_class.name: job_class for job_class in JOB_CLASSES}
    jobs = make_jobs(document["scale"])
    by_name = {job.name: job for job in jobs}
    for saved in document["jobs"]:
        job = by_name[saved["name"]]
        assert job.job_class is classes[saved["class"]]
        job.created_at = saved["createdAt"]
        job.first_admitted_at = saved["firstAdmittedAt"]
        job.finished_at = saved["finishedAt"]
        job.evictions = saved["evictions"]
        job.ran_seconds = saved["ranSeconds"]
    cycles = [CycleRecord(**cycle) for cycle in document["cycles"]]
    created = [job.created_at for job in jobs if job.created_at is not None]
    times = [t for job in jobs for t in (job.finished_at, job.first_admitted_at) if t is not None]
    observed_end = document.get("observedEnd") or max([*times, *(c.committed for c in cycles)])
    start = min(created) if created else 0.0
    return Results(
        jobs=jobs,
        bound=physical_bound(jobs),
        scale=document["scale"],
        makespan=document["makespan"],
        created_span=(max(created) - start) if created else 0.0,
        cycles=cycles,
        allocator_errors=document.get("allocatorErrors", []),
        allocator_error_count=document.get("allocatorErrorCount", 0),
        profile=None,
        timed_out=document["timedOut"],
        observed_span=document.get("observedSpan") or observed_end - start,
        observed_end=observed_end,
        share_usage=document["shareUsage"],
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="fraction of each workload set (1 = Kueue's 15,000 jobs)"
    )
    parser.add_argument(
        "--interval", type=float, default=0.0, help="seconds between allocator cycles (0: back to back)"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="give up after this many seconds")
    parser.add_argument("--profile", action="store_true", help="cProfile the allocator's cycles")
    parser.add_argument("--save", metavar="JSON", help="also write every job's and cycle's measurements here")
    parser.add_argument(
        "--show", metavar="JSON", help="print the tables of a run saved with --save; run nothing"
    )
    args = parser.parse_args(argv)
    if not 0 < args.scale <= 1:
        parser.error("--scale must be in (0, 1]")
    console = Console(width=150)
    if args.show:
        render(load_saved(Path(args.show)), console)
        return 0
    try:
        results = run_benchmark(args, console)
    finally:
        shutil.rmtree(os.environ["QUOTA_BENCH_AIRFLOW_HOME"], ignore_errors=True)
    if args.save:
        save(results, Path(args.save))
    render(results, console)
    return 0 if results.allocator_error_count == 0 and not results.timed_out else 1


if __name__ == "__main__":
    sys.exit(main())
