"""Time the real allocation cycle (``run_allocation_cycle``) against a migrated Airflow metadata DB.

Where ``engine_cycle.py`` times the engine alone, this times what a scheduler loop pays: reading the
waiting task instances (``task_instance`` joined to ``trigger``, claimed), reconciling every open job with
its task instance, ``plan_cycle``, writing the ledger and resuming the granted tasks, and the commit.

Each backend (SQLite file, PostgreSQL database) is migrated once with ``airflow db migrate``; for each size
the job tables are emptied and N task instances are written DEFERRED on the admission trigger, as Airflow
leaves them: one job queue, 20 quota shares (RESERVE, LEND and LEND_AND_BORROW) of 10 GPUs each, 200 GPUs
in all, jobs of 1 to 4 GPUs with mixed priorities. Three cycles are timed (cycle and commit, one session
each, like ``allocator.host.run_cycle``):

* ``first``: every waiting task is new to the ledger: the first batch of submissions recorded (at most
  ``[quota] max_new_requests``, 1,000, the earliest submitted), the queue filled (~100 grants); repeated
  on a freshly written set of task instances;
* ``burst``: all the cycles from the first until the whole burst is recorded (their total, and how many);
* ``steady``: the next cycle, nothing changed: the waiting tasks are read again and the jobs holding
  capacity reconciled again, none can start; from the second such cycle on the queue is found as the last
  one left it and not planned again (docs/allocator.md, step 5; on PostgreSQL after ``ANALYZE``, as
  autovacuum would have run it by then);
* ``churn``: 10 granted tasks succeeded and 10 new tasks deferred since the last cycle: 10 finishes,
  10 submissions, a few grants.

The medians are printed side by side with the PostgreSQL / SQLite ratio and the growth from the smallest
size, so compare within one run (the machines are noisy). Each cycle runs in turn with the garbage
collector as Python leaves it (``default``) and after ``gc.freeze()`` as the hosts call it once started
(``frozen``, ``allocator.host.freeze_startup_objects``), run by run (steady cycles on one state); a last
table gives the ratio.
The goals of issue 16 are printed as met or missed, for each: at 10,000 waiting on PostgreSQL, steady
within 150 ms, churn within 200 ms, first within 1.5 s; SQLite within x2 of PostgreSQL.

Usage::

    .venv/bin/python benchmarks/allocator_cycle.py                       # 1,000 and 10,000, both backends
    .venv/bin/python benchmarks/allocator_cycle.py --sizes 50 --backends sqlite   # smoke run
    .venv/bin/python benchmarks/allocator_cycle.py --gc frozen           # only as the hosts run it
    .venv/bin/python benchmarks/allocator_cycle.py --clock cpu           # CPU time: steadier when loaded

PostgreSQL is reached at ``QUOTA_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432``); the
benchmark creates its own database there and drops it at the end.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# Runnable as a plain script from a checkout: make the package importable without installing it.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Before airflow is imported: never read or write a real Airflow installation.
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="quota-bench-airflow-home-"))
os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)

import sqlalchemy as sa  # noqa: E402
from airflow.models.taskinstance import TaskInstance  # noqa: E402
from airflow.models.trigger import Trigger  # noqa: E402
from airflow.sdk.serde import serialize  # noqa: E402
from airflow.utils.state import TaskInstanceState  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from airflow_quota.allocator.cycle import CycleReport, run_allocation_cycle  # noqa: E402
from airflow_quota.allocator.host import freeze_startup_objects  # noqa: E402
from airflow_quota.allocator.kept_state import KeptQueues  # noqa: E402
from airflow_quota.allocator.settings import CycleSettings  # noqa: E402
from airflow_quota.engine.config import parse_quota_config  # noqa: E402
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, QuotaAdmissionTrigger  # noqa: E402
from tests.databases import airflow_engine, run_migrate  # noqa: E402
from tests.db.metadata_rows import reset_for_allocation  # noqa: E402

TITLE = "Allocation cycle against the metadata DB (run_allocation_cycle + commit)"
POSTGRES_SERVER = os.environ.get("QUOTA_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
QUEUE = "gpu-training"
DAG_ID = "bench"
RUN_ID = "run-1"
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SHARES = 20
GPUS_PER_SHARE = 10
STRATEGIES = ("RESERVE", "LEND", "LEND_AND_BORROW")
SIZES = (1, 2, 4)
SIZE_WEIGHTS = (60, 30, 10)
PRIORITIES = (0, 10, 50, 100)
PRIORITY_WEIGHTS = (60, 20, 15, 5)
#: Per churn cycle: granted tasks that succeed, and new tasks that defer.
CHURN = 10
CYCLES = ("first", "burst", "steady", "churn")
#: How the garbage collector runs: as Python leaves it, or frozen once started as the hosts do.
GC_MODES = ("default", "frozen")
#: Issue 16's goals at GOAL_SIZE waiting jobs on PostgreSQL, median ms per cycle; SQLite within x2.
GOAL_SIZE = 10_000
GOAL_MS = {"first": 1500.0, "steady": 150.0, "churn": 200.0}
GOAL_SQLITE_RATIO = 2.0


def share_document(index: int, name: str) -> dict[str, Any]:
    """Quota share ``index`` of the mix: RESERVE, LEND and LEND_AND_BORROW in turn (borrowLimit 20 or
    unlimited), GPUS_PER_SHARE GPUs, in-share preemption on every fourth."""
    strategy = STRATEGIES[index % len(STRATEGIES)]
    sharing: dict[str, Any] = {"strategy": strategy}
    if strategy == "LEND_AND_BORROW":
        sharing["borrowLimit"] = -1 if index % 2 else 20
    return {
        "quotaShareName": name,
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": GPUS_PER_SHARE}],
        "resourceSharingConfiguration": sharing,
        "preemptionConfiguration": {"inSharePreemption": "ENABLED" if index % 4 == 0 else "DISABLED"},
    }


def quota_document() -> dict[str, Any]:
    """One job queue of 200 GPUs shared by 20 quota shares of 10 (a mix of the three strategies)."""
    shares = [share_document(index, f"share-{index:02d}") for index in range(SHARES)]
    return {
        "jobQueues": [
            {
                "jobQueueName": QUEUE,
                "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": SHARES * GPUS_PER_SHARE}],
                "quotaShares": shares,
            }
        ]
    }


# --- databases ---------------------------------------------------------------------------------------------


@dataclass
class Backend:
    name: str
    url: str
    engine: sa.Engine


@contextmanager
def sqlite_backend() -> Iterator[Backend]:
    home = Path(tempfile.mkdtemp(prefix="quota-bench-sqlite-"))
    url = f"sqlite:///{home / 'airflow.db'}"
    try:
        run_migrate(url, home)
        engine = airflow_engine(url)
        yield Backend("sqlite", url, engine)
        engine.dispose()
    finally:
        shutil.rmtree(home, ignore_errors=True)


@contextmanager
def postgresql_backend() -> Iterator[Backend]:
    server = sa.make_url(POSTGRES_SERVER).set(drivername="postgresql+psycopg2", database="postgres")
    name = f"quota_bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    home = Path(tempfile.mkdtemp(prefix="quota-bench-postgresql-"))
    url = server.set(database=name).render_as_string(hide_password=False)
    try:
        run_migrate(url, home)
        engine = airflow_engine(url)
        yield Backend("postgresql", url, engine)
        engine.dispose()
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
        shutil.rmtree(home, ignore_errors=True)


BACKENDS: dict[str, Callable[[], Any]] = {"sqlite": sqlite_backend, "postgresql": postgresql_backend}


# --- the rows Airflow leaves behind -------------------------------------------------------------------------


def reset(engine: sa.Engine, document: dict[str, Any] | None = None) -> None:
    """Empty the ledger's tables and Airflow's task tables; apply the quota file (``quota_document()``)."""
    if KEPT[0] is not None:
        KEPT[0].forget()  # a new ledger under a running host: what it kept is of another one
    reset_for_allocation(
        engine,
        dag_id=DAG_ID,
        run_id=RUN_ID,
        start=START,
        quotas=parse_quota_config(document or quota_document(), "benchmark"),
        applied_by="benchmark",
        source="benchmark",
    )


def job_request(rng: random.Random, number: int, job_queue: str, share: str, at: datetime) -> dict[str, Any]:
    """The admission trigger's kwargs of job ``number``: 1 to 4 GPUs, mixed priorities, in ``share``."""
    return QuotaAdmissionTrigger(
        job_queue=job_queue,
        job_name=f"job-{number:07d}",
        quota_share_name=share,
        capacity_unit="gpu",
        instance_count=rng.choices(SIZES, SIZE_WEIGHTS)[0],
        scheduling_priority=rng.choices(PRIORITIES, PRIORITY_WEIGHTS)[0],
        submitted_at=at.isoformat(),
    ).serialize()[1]


def write_deferred(engine: sa.Engine, first: int, requests: Sequence[dict[str, Any]], at: datetime) -> None:
    """Task instances ``job-<first>``... DEFERRED on their own admission trigger of ``requests`` (bulk)."""
    if not requests:
        return
    triggers = [
        {"classpath": ADMISSION_CLASSPATH, "kwargs": Trigger.encrypt_kwargs(kwargs), "created_date": at}
        for kwargs in requests
    ]
    table = Trigger.__table__
    with engine.begin() as connection:
        ids = connection.execute(
            sa.insert(table).returning(table.c.id, sort_by_parameter_order=True), triggers
        ).scalars()
        next_kwargs = serialize({})
        connection.execute(
            sa.insert(TaskInstance.__table__),
            [
                {
                    "id": uuid.uuid4(),
                    "dag_id": DAG_ID,
                    "run_id": RUN_ID,
                    "task_id": f"job-{number:07d}",
                    "map_index": -1,
                    "try_number": 1,
                    "pool": "default_pool",
                    "pool_slots": 1,
                    "state": TaskInstanceState.DEFERRED,
                    "trigger_id": trigger_id,
                    "next_method": "on_grant",
                    "next_kwargs": next_kwargs,
                }
                for number, trigger_id in zip(range(first, first + len(requests)), ids, strict=True)
            ],
        )


def defer_many(engine: sa.Engine, rng: random.Random, first: int, count: int, deferred_at: datetime) -> None:
    """Write ``count`` task instances DEFERRED on their own admission trigger, spread over the shares."""
    requests = [
        job_request(rng, number, QUEUE, f"share-{rng.randrange(SHARES):02d}", deferred_at)
        for number in range(first, first + count)
    ]
    write_deferred(engine, first, requests, deferred_at)


def succeed_granted(engine: sa.Engine, rng: random.Random, count: int) -> int:
    """``count`` resumed (granted) tasks ran and succeeded; returns how many there were."""
    ti = TaskInstance.__table__
    with engine.begin() as connection:
        resumed = list(
            connection.execute(sa.select(ti.c.id).where(ti.c.state == TaskInstanceState.SCHEDULED)).scalars()
        )
        chosen = rng.sample(resumed, min(count, len(resumed)))
        if chosen:
            connection.execute(
                sa.update(ti)
                .where(ti.c.id.in_(chosen))
                .values(state=TaskInstanceState.SUCCESS, next_kwargs=None)
            )
    return len(chosen)


# --- timing -------------------------------------------------------------------------------------------------


@dataclass
class Timing:
    backend: str
    waiting: int
    cycle: str
    gc_mode: str = "default"
    times_ms: list[float] = field(default_factory=list)
    grants: list[int] = field(default_factory=list)
    #: Cycles each run took (the burst: until every submission was recorded; the others: 1).
    cycles: list[int] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms)


class Clock:
    """The cycles' ``now``: one simulated second per cycle (settle times never matter here)."""

    def __init__(self) -> None:
        self.seconds = 0

    def tick(self) -> datetime:
        self.seconds += 1
        return START + timedelta(seconds=self.seconds)


#: The queues kept between cycles, as a host keeps them (``--state kept``); None: every cycle reads every
#: queue whole (``--state reload``).
KEPT: list[KeptQueues | None] = [KeptQueues()]


#: The clock cycles are timed with: wall-clock (``perf_counter``, the default: what a scheduler loop waits,
#: the database's work included) or this process's CPU time (``--clock cpu``: the allocator's own work,
#: not the database's; on a machine other processes load, it moves far less than the wall clock does).
CLOCK: list[Callable[[], float]] = [time.perf_counter]


def timed_cycle(engine: sa.Engine, now: datetime) -> tuple[float, CycleReport]:
    """One cycle and its commit, as ``allocator.host.run_cycle`` runs it (what it kept is committed)."""
    kept = KEPT[0]
    clock = CLOCK[0]
    started = clock()
    try:
        with Session(engine, expire_on_commit=False) as session:  # each queue's part commits
            report = run_allocation_cycle(
                session, now, CycleSettings(kept_queues=kept), commit_each_queue=True
            )
    except Exception:
        if kept is not None:
            kept.forget()
        raise
    if kept is not None:
        kept.committed()
    return (clock() - started) * 1000.0, report


def analyze(backend: Backend) -> None:
    """PostgreSQL: gather the tables' statistics, as autovacuum does within a minute of the burst (its
    ``autovacuum_naptime``). Without them the planner takes the fresh tables for nearly empty, and the
    steady and churn cycles measured seconds after the burst ran plans no live database runs."""
    if backend.name == "postgresql":
        with backend.engine.begin() as connection:
            connection.exec_driver_sql("ANALYZE")


def set_gc_mode(gc_mode: str) -> None:
    """The collector as Python leaves it (``default``) or frozen as the hosts run it; collected either
    way, outside the timing."""
    gc.unfreeze()
    if gc_mode == "frozen":
        freeze_startup_objects()
    else:
        gc.collect()


def measure(
    backend: Backend,
    waiting: int,
    repeats: int,
    seed: int,
    console: Console,
    gc_modes: Sequence[str] = ("default",),
) -> list[Timing]:
    """The cycles at ``waiting`` jobs, run by run in each of ``gc_modes`` in turn (the order alternates)."""
    try:
        return _measure(backend, waiting, repeats, seed, console, gc_modes)
    finally:
        gc.unfreeze()


def _measure(
    backend: Backend, waiting: int, repeats: int, seed: int, console: Console, gc_modes: Sequence[str]
) -> list[Timing]:
    rng = random.Random(f"{seed}-{waiting}-churn")
    timings = {
        (cycle, mode): Timing(backend.name, waiting, cycle, mode) for mode in gc_modes for cycle in CYCLES
    }

    def in_turn(run: int) -> Sequence[str]:
        return gc_modes if run % 2 == 0 else list(reversed(gc_modes))

    def timed(cycle: str, mode: str, now: datetime) -> CycleReport:
        ms, report = timed_cycle(backend.engine, now)
        timings[(cycle, mode)].times_ms.append(ms)
        timings[(cycle, mode)].grants.append(len(report.granted))
        return report

    clock = Clock()
    for run in range(repeats):
        for mode in in_turn(run):
            reset(backend.engine)
            clock = Clock()
            defer_many(backend.engine, random.Random(f"{seed}-{waiting}"), 0, waiting, START)  # same jobs
            set_gc_mode(mode)
            report = timed("first", mode, clock.tick())
            burst = timings[("burst", mode)]
            recorded, cycles = len(report.submitted), 1
            total_ms, grants = timings[("first", mode)].times_ms[-1], len(report.granted)
            while report.backlog:  # the rest of the burst, one bounded batch a cycle
                ms, report = timed_cycle(backend.engine, clock.tick())
                recorded, total_ms, cycles = recorded + len(report.submitted), total_ms + ms, cycles + 1
                grants += len(report.granted)
            if recorded != waiting:
                raise RuntimeError(f"the burst's cycles recorded {recorded} of {waiting} submissions")
            burst.times_ms.append(total_ms)
            burst.grants.append(grants)
            burst.cycles.append(cycles)
    analyze(backend)
    for run in range(repeats + 2):
        for mode in in_turn(run):  # nothing changes between steady cycles: the modes alternate on one state
            set_gc_mode(mode)
            timed("steady", mode, clock.tick())
    next_number = waiting
    for run in range(repeats + 2):
        for mode in in_turn(run):
            succeed_granted(backend.engine, rng, CHURN)
            defer_many(backend.engine, rng, next_number, CHURN, START + timedelta(seconds=clock.seconds))
            next_number += CHURN
            set_gc_mode(mode)
            timed("churn", mode, clock.tick())
    for timing in timings.values():
        cycles = f" in {'/'.join(map(str, timing.cycles))} cycles" if timing.cycles else ""
        console.print(
            f"[dim]{backend.name} {waiting:,} waiting, gc {timing.gc_mode}, {timing.cycle}: "
            + ", ".join(f"{ms:.0f}" for ms in timing.times_ms)
            + f" ms{cycles}[/dim]"
        )
    return list(timings.values())


def render(results: Sequence[Timing], console: Console) -> None:
    for gc_mode in dict.fromkeys(t.gc_mode for t in results):
        _render_mode([t for t in results if t.gc_mode == gc_mode], gc_mode, console)
    if len({t.gc_mode for t in results}) > 1:
        _render_gc_ratios(results, console)
    for gc_mode in dict.fromkeys(t.gc_mode for t in results):
        _render_goals([t for t in results if t.gc_mode == gc_mode], gc_mode, console)


def _render_mode(results: Sequence[Timing], gc_mode: str, console: Console) -> None:
    by_key = {(t.backend, t.waiting, t.cycle): t for t in results}
    backends = list(dict.fromkeys(t.backend for t in results))
    sizes = sorted({t.waiting for t in results})
    table = Table(title=f"{TITLE}, garbage collector {gc_mode}")
    for column in ("backend", "waiting jobs", "cycle", "runs", "median ms", "min ms", "grants", "growth"):
        table.add_column(column, justify="right")
    if "sqlite" in backends and "postgresql" in backends:
        table.add_column("postgresql / sqlite", justify="right")
    for backend in backends:
        for size in sizes:
            for cycle in CYCLES:
                timing = by_key[(backend, size, cycle)]
                smallest = by_key[(backend, sizes[0], cycle)]
                growth = "" if size == sizes[0] else f"x{timing.median / smallest.median:.1f}"
                row = [
                    backend,
                    f"{size:,}",
                    cycle,
                    str(len(timing.times_ms)),
                    f"{timing.median:.1f}",
                    f"{min(timing.times_ms):.1f}",
                    f"{statistics.median(timing.grants):.0f}",
                    growth,
                ]
                if len(table.columns) > len(row):  # on the PostgreSQL rows only
                    sqlite = by_key[("sqlite", size, cycle)].median
                    row.append(f"x{timing.median / sqlite:.2f}" if backend == "postgresql" else "")
                table.add_row(*row)
    console.print(table)
    if len(sizes) > 1:
        console.print(
            f"growth: median at each size / median at {sizes[0]:,} waiting jobs "
            f"(linear would be x{sizes[-1] / sizes[0]:.0f} at {sizes[-1]:,})"
        )


def _render_gc_ratios(results: Sequence[Timing], console: Console) -> None:
    """Default against frozen, per backend, size and cycle (measured one after the other in this run)."""
    by_key = {(t.backend, t.waiting, t.cycle, t.gc_mode): t for t in results}
    table = Table(title="gc.freeze() at start-up: median ms, default / frozen")
    for column in ("backend", "waiting jobs", "cycle", "default", "frozen", "default / frozen"):
        table.add_column(column, justify="right")
    for backend, size, cycle, _ in [key for key in by_key if key[3] == "default"]:
        default, frozen = (
            by_key[(backend, size, cycle, "default")],
            by_key.get((backend, size, cycle, "frozen")),
        )
        if frozen is None:
            continue
        table.add_row(
            backend,
            f"{size:,}",
            cycle,
            f"{default.median:.1f}",
            f"{frozen.median:.1f}",
            f"x{default.median / frozen.median:.2f}",
        )
    console.print(table)


def _render_goals(results: Sequence[Timing], gc_mode: str, console: Console) -> None:
    """Issue 16's goals at GOAL_SIZE waiting jobs, met or missed, for the rows this run has."""
    by_key = {(t.backend, t.waiting, t.cycle): t for t in results}
    for cycle, goal in GOAL_MS.items():
        postgresql = by_key.get(("postgresql", GOAL_SIZE, cycle))
        if postgresql is not None:
            met = postgresql.median <= goal
            console.print(
                f"Goal (gc {gc_mode}): {GOAL_SIZE:,} waiting, PostgreSQL, {cycle} within {goal:.0f} ms: "
                f"{postgresql.median:.0f} ms median, {'met' if met else 'MISSED'}"
            )
        sqlite = by_key.get(("sqlite", GOAL_SIZE, cycle))
        if postgresql is not None and sqlite is not None:
            ratio = sqlite.median / postgresql.median
            console.print(
                f"Goal (gc {gc_mode}): {GOAL_SIZE:,} waiting, SQLite {cycle} within "
                f"x{GOAL_SQLITE_RATIO:.0f} of PostgreSQL: x{ratio:.2f}, "
                f"{'met' if ratio <= GOAL_SQLITE_RATIO else 'MISSED'}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000", help="waiting jobs, comma-separated (1000,10000)")
    parser.add_argument("--backends", default="sqlite,postgresql", help="sqlite,postgresql (both by default)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="first cycles per size; steady and churn get 2 more"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--gc", default=",".join(GC_MODES), help="default,frozen (both by default, one after the other)"
    )
    parser.add_argument(
        "--state",
        choices=("kept", "reload"),
        default="kept",
        help="kept: the queue's state kept between cycles, as the hosts run it (default); reload: every "
        "cycle reads every queue whole",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: wall-clock time of each cycle (default); cpu: this process's CPU time (the allocator's "
        "own work without the database's, steadier on a loaded machine)",
    )
    args = parser.parse_args(argv)
    KEPT[0] = KeptQueues() if args.state == "kept" else None
    CLOCK[0] = time.process_time if args.clock == "cpu" else time.perf_counter
    gc_modes = [mode.strip() for mode in args.gc.split(",")]
    if set(gc_modes) - set(GC_MODES):
        parser.error(f"unknown --gc modes {sorted(set(gc_modes) - set(GC_MODES))}: choose from {GC_MODES}")
    sizes = [int(size) for size in args.sizes.split(",")]
    backends = [name.strip() for name in args.backends.split(",")]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        parser.error(f"unknown backends {sorted(unknown)}: choose from {sorted(BACKENDS)}")
    console = Console(width=140)
    if args.clock == "cpu":
        console.print(
            "[dim]cycles timed in this process's CPU time (--clock cpu): the database's work not "
            "counted[/dim]"
        )
    results: list[Timing] = []
    for name in backends:
        console.print(f"[dim]migrating a fresh {name} database...[/dim]")
        with BACKENDS[name]() as backend:
            # A warm-up (imports, the ORM's compiled statements): the first mode timed must not pay it.
            measure(backend, min(sizes), 1, args.seed, Console(quiet=True))
            for size in sizes:
                results.extend(measure(backend, size, args.repeats, args.seed, console, gc_modes))
    render(results, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
