"""Crash safety: an allocator killed with SIGKILL at random points of its cycles leaves nothing half-done.

On SQLite and on PostgreSQL, an allocator process (forked, its own engine and connections) runs
``run_allocation_cycle`` back to back, one transaction per cycle as ``allocator.host.run_cycle`` does, on a
queue with ~400 waiting task instances (every cycle claims and reconciles them all: hundreds of ms), and is
killed after a random delay of up to three cycle times, so most kills land inside a cycle, some after a
commit or two (the process logs "begin k" / "commit k"; the test prints where each kill landed). Between
kills the test plays Airflow and the tasks: some granted tasks succeed, new tasks defer for admission.

After every kill, with the process dead, the database must hold exactly what the last committed cycle
wrote (``ledger_problems`` lists every disagreement):

* held units per capacity unit <= the queue's capacity (and per LEND share <= its limit);
* a job holds capacity exactly when its task instance was resumed with the grant of its current lease
  (a grant and its resume commit together): no ledger grant without a resumed task, no resumed task
  without a ledger grant; a job still RUNNABLE has its task still deferred for admission;
* audit rows match the jobs: one SUBMITTED per job, GRANTED rows == the job's attempts, one SUCCEEDED
  per succeeded job;
* every job's status agrees with its held capacity (one state per job).

A restarted allocator then converges: every share holds min(its limit, its open jobs), every deferred
task has its ledger job.
"""

from __future__ import annotations

import multiprocessing
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa
from airflow.models.taskinstance import TaskInstance
from airflow.models.trigger import Trigger
from airflow.sdk.serde import deserialize, serialize
from airflow.utils.state import TaskInstanceState
from sqlalchemy.orm import Session

from airflow_quota.allocator.cycle import run_allocation_cycle
from airflow_quota.allocator.job_ids import job_id_for
from airflow_quota.engine.config import parse_quota_config
from airflow_quota.ledger.models import AuditKind, AuditRow, JobRow
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, QuotaAdmissionTrigger

if TYPE_CHECKING:
    from tests.db.conftest import Database

from tests.db.metadata_rows import reset_for_allocation

pytestmark = [pytest.mark.db, pytest.mark.airflow]  # the slow tier: see tests/conftest.py

QUEUE = "gpu-training"
DAG_ID = "crash"
RUN_ID = "run-1"
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SHARES = ("team-a", "team-b")
SHARE_LIMIT = 100
#: Two LEND shares of 100 on 200 GPUs, one-GPU jobs: no borrowing, so what "fits" is exact per share.
QUOTAS = parse_quota_config(
    {
        "jobQueues": [
            {
                "jobQueueName": QUEUE,
                "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": SHARE_LIMIT * len(SHARES)}],
                "quotaShares": [
                    {
                        "quotaShareName": share,
                        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": SHARE_LIMIT}],
                        "resourceSharingConfiguration": {"strategy": "LEND"},
                    }
                    for share in SHARES
                ],
            }
        ]
    },
    "quotas.yaml",
)
INITIAL_WAITING = 400
#: Per round, before the allocator is started again: granted tasks that succeed, new tasks that defer.
FINISHED_PER_ROUND = 20
DEFERRED_PER_ROUND = 40
KILLS = 6
#: Kill after a uniform delay in [0, this many steady cycle times] from the allocator's start (at most
#: MAX_KILL_DELAY_S, for the suite's time on a slow machine): most kills land inside the first cycles,
#: some after a commit or two.
KILL_WITHIN_CYCLES = 3.0
MAX_KILL_DELAY_S = 2.0
FORK = multiprocessing.get_context("fork")  # the child starts at once: airflow is already imported


@pytest.fixture
def db(migrated: Database) -> Iterator[Database]:
    reset_for_allocation(migrated.engine, dag_id=DAG_ID, run_id=RUN_ID, start=START, quotas=QUOTAS)
    yield migrated


# --- Airflow's side: tasks that defer for admission, are resumed, and succeed -------------------------------


def defer_many(engine: sa.Engine, first: int, count: int, rng: random.Random) -> None:
    """Write ``count`` task instances DEFERRED on their own admission trigger, as Airflow leaves them."""
    now = datetime.now(UTC)
    triggers = [
        {
            "classpath": ADMISSION_CLASSPATH,
            "kwargs": Trigger.encrypt_kwargs(
                QuotaAdmissionTrigger(
                    job_queue=QUEUE,
                    job_name=f"job-{number:05d}",
                    quota_share_name=rng.choice(SHARES),
                    capacity_unit="gpu",
                    instance_count=1,
                    scheduling_priority=rng.choice((0, 0, 10, 50)),
                    submitted_at=now.isoformat(),
                ).serialize()[1]
            ),
            "created_date": now,
        }
        for number in range(first, first + count)
    ]
    table = Trigger.__table__
    with engine.begin() as connection:
        ids = connection.execute(
            sa.insert(table).returning(table.c.id, sort_by_parameter_order=True), triggers
        ).scalars()
        connection.execute(
            sa.insert(TaskInstance.__table__),
            [
                {
                    "id": uuid.uuid4(),
                    "dag_id": DAG_ID,
                    "run_id": RUN_ID,
                    "task_id": f"job-{number:05d}",
                    "map_index": -1,
                    "try_number": 1,
                    "pool": "default_pool",
                    "pool_slots": 1,
                    "state": TaskInstanceState.DEFERRED,
                    "trigger_id": trigger_id,
                    "next_method": "on_grant",
                    "next_kwargs": serialize({}),
                }
                for number, trigger_id in zip(range(first, first + count), ids, strict=True)
            ],
        )


def succeed_some_granted(engine: sa.Engine, count: int, rng: random.Random) -> int:
    """``count`` resumed tasks ran and succeeded (their grant event stays in ``next_kwargs``)."""
    table = TaskInstance.__table__
    with engine.begin() as connection:
        resumed = list(
            connection.execute(
                sa.select(table.c.id).where(table.c.state == TaskInstanceState.SCHEDULED)
            ).scalars()
        )
        chosen = rng.sample(resumed, min(count, len(resumed)))
        if chosen:
            connection.execute(
                sa.update(table).where(table.c.id.in_(chosen)).values(state=TaskInstanceState.SUCCESS)
            )
    return len(chosen)


# --- the allocator process ----------------------------------------------------------------------------------


def allocator_process(url: str, progress: str, quiet_cycles_to_stop: int | None) -> None:
    """Run cycles back to back, logging each one's start and commit (line-buffered: the log is exact at a
    kill); with ``quiet_cycles_to_stop``, exit after that many cycles in a row that changed nothing."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    quiet = 0
    with open(progress, "a", buffering=1) as log:
        log.write("ready\n")
        for number in range(1, 10_000):
            log.write(f"begin {number}\n")
            with Session(engine) as session, session.begin():
                report = run_allocation_cycle(session, datetime.now(UTC))
            changed = len(report.submitted) + len(report.granted) + len(report.finished)
            log.write(f"commit {number} skipped={report.skipped} changed={changed}\n")
            quiet = quiet + 1 if changed == 0 and not report.skipped else 0
            if quiet_cycles_to_stop is not None and quiet >= quiet_cycles_to_stop:
                return


@dataclass(frozen=True)
class Kill:
    delay_s: float
    committed: int  # cycles this process committed before it died
    landed: str  # "mid-cycle" (after a "begin" without its "commit"), "between cycles", "before any cycle"


def kill_after(url: str, progress: Path, delay: float) -> Kill:
    process = FORK.Process(target=allocator_process, args=(url, str(progress), None))
    process.start()
    time.sleep(delay)
    process.kill()  # SIGKILL: no rollback, no cleanup, no commit of anything in flight
    process.join(timeout=30)
    assert process.exitcode == -9, f"the allocator ended on its own (exit code {process.exitcode})"
    lines = progress.read_text().splitlines() if progress.exists() else []  # killed before it opened it
    committed = sum(line.startswith("commit") for line in lines)
    last = lines[-1] if lines else ""
    landed = (
        "mid-cycle" if last.startswith("begin") else "between cycles" if committed else "before any cycle"
    )
    return Kill(delay, committed, landed)


# --- what must hold after any crash -------------------------------------------------------------------------


def grant_event(ti: TaskInstance) -> dict[str, Any] | None:
    """The grant a task instance was resumed with, if any."""
    document = deserialize(ti.next_kwargs) if ti.next_kwargs else None
    event = document.get("event") if isinstance(document, dict) else None
    return event if isinstance(event, dict) and "lease_id" in event else None


def ledger_problems(engine: sa.Engine) -> list[str]:
    """Every way the ledger, the audit log and the task instances disagree (one snapshot)."""
    problems: list[str] = []
    with Session(engine, expire_on_commit=False) as session, session.begin():
        if engine.dialect.name == "postgresql":
            session.execute(sa.text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        jobs = {row.job_id: row for row in session.scalars(sa.select(JobRow))}
        tis = list(session.scalars(sa.select(TaskInstance)))
        triggers = dict(session.execute(sa.select(Trigger.id, Trigger.classpath)).all())
        audit = Counter(
            (kind, job_id) for kind, job_id in session.execute(sa.select(AuditRow.kind, AuditRow.job_id))
        )
    held_by_unit: Counter[str] = Counter()
    held_by_share: Counter[str] = Counter()
    for row in jobs.values():
        holds = row.status in ("SCHEDULED", "STARTING", "RUNNING")
        if holds != (row.held_instance_count > 0 and row.held_capacity_unit is not None):
            problems.append(f"{row.job_id}: status {row.status} but holds {row.held_instance_count}")
        if holds:
            held_by_unit[str(row.held_capacity_unit)] += row.held_instance_count
            held_by_share[row.quota_share_name] += row.held_instance_count
        if audit[(AuditKind.SUBMITTED.value, row.job_id)] != 1:
            problems.append(f"{row.job_id}: {audit[(AuditKind.SUBMITTED.value, row.job_id)]} SUBMITTED rows")
        if audit[(AuditKind.GRANTED.value, row.job_id)] != row.attempt:
            granted = audit[(AuditKind.GRANTED.value, row.job_id)]
            problems.append(f"{row.job_id}: attempt {row.attempt} but {granted} GRANTED rows")
        if row.status == "SUCCEEDED" and audit[(AuditKind.SUCCEEDED.value, row.job_id)] != 1:
            problems.append(f"{row.job_id}: SUCCEEDED without exactly one SUCCEEDED audit row")
    capacity = SHARE_LIMIT * len(SHARES)
    if held_by_unit["gpu"] > capacity:
        problems.append(f"{held_by_unit['gpu']} gpu held, capacity {capacity}")
    problems += [
        f"{share} holds {n} > {SHARE_LIMIT}" for share, n in held_by_share.items() if n > SHARE_LIMIT
    ]
    audited_jobs = {job_id for (_, job_id) in audit if job_id is not None}
    problems += [
        f"audit rows for {job_id}, which is not in the ledger" for job_id in audited_jobs - set(jobs)
    ]
    seen: set[str] = set()
    for ti in tis:
        job_id = job_id_for(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number)
        seen.add(job_id)
        job, event = jobs.get(job_id), grant_event(ti)
        on_trigger = None if ti.trigger_id is None else triggers.get(ti.trigger_id)
        deferred = ti.state == TaskInstanceState.DEFERRED and on_trigger == ADMISSION_CLASSPATH
        if job is None:
            if not deferred or event is not None:
                problems.append(f"{job_id}: task {ti.state} (event {event}) but no ledger job")
            continue
        if job.ti_id != str(ti.id):
            problems.append(f"{job_id}: ledger ti_id {job.ti_id} is not the task instance {ti.id}")
        if job.status == "RUNNABLE" and not deferred:
            problems.append(f"{job_id}: RUNNABLE but its task is {ti.state} (event {event})")
        if job.status in ("SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"):
            lease = f"{job_id}#{job.attempt}"
            if event is None or event.get("lease_id") != lease or ti.state == TaskInstanceState.DEFERRED:
                problems.append(
                    f"{job_id}: {job.status} (lease {lease}) but its task is {ti.state}, event {event}"
                )
        if event is not None and job.attempt < 1:
            problems.append(
                f"{job_id}: task resumed with {event['lease_id']} but the ledger never granted it"
            )
    problems += [f"{job_id}: ledger job without a task instance" for job_id in set(jobs) - seen]
    return problems


def held_and_open_by_share(engine: sa.Engine) -> dict[str, tuple[int, int]]:
    """Per share: units held, and jobs not final (held or waiting)."""
    result: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    with Session(engine) as session:
        for row in session.scalars(sa.select(JobRow).where(JobRow.status.not_in(("SUCCEEDED", "FAILED")))):
            result[row.quota_share_name][0] += row.held_instance_count
            result[row.quota_share_name][1] += 1
    return {share: (held, count) for share, (held, count) in result.items()}


def test_an_allocator_killed_at_random_points_leaves_a_consistent_ledger_and_a_restart_converges(
    db: Database, tmp_path: Path
) -> None:
    rng = random.Random(f"crash-{db.backend}")
    defer_many(db.engine, 0, INITIAL_WAITING, rng)
    with db.session() as session, session.begin():  # the first, biggest cycle is not the one killed
        run_allocation_cycle(session, datetime.now(UTC))
    started = time.perf_counter()
    with db.session() as session, session.begin():
        run_allocation_cycle(session, datetime.now(UTC))
    cycle_s = time.perf_counter() - started
    assert ledger_problems(db.engine) == []
    next_number = INITIAL_WAITING
    kills: list[Kill] = []
    for round_number in range(KILLS):
        succeed_some_granted(db.engine, FINISHED_PER_ROUND, rng)
        defer_many(db.engine, next_number, DEFERRED_PER_ROUND, rng)
        next_number += DEFERRED_PER_ROUND

        kill = kill_after(
            db.url,
            tmp_path / f"round-{round_number}.log",
            rng.uniform(0.0, min(KILL_WITHIN_CYCLES * cycle_s, MAX_KILL_DELAY_S)),
        )
        kills.append(kill)

        assert ledger_problems(db.engine) == [], f"after kill {round_number} ({kill})"

    restart = FORK.Process(target=allocator_process, args=(db.url, str(tmp_path / "restart.log"), 2))
    restart.start()
    restart.join(timeout=60)
    assert restart.exitcode == 0, (tmp_path / "restart.log").read_text()[-2000:]

    assert ledger_problems(db.engine) == []
    per_share = held_and_open_by_share(db.engine)
    assert per_share == {share: (min(SHARE_LIMIT, count), count) for share, (_, count) in per_share.items()}
    landed = Counter(kill.landed for kill in kills)
    print(
        f"\n{db.backend}: steady cycle {cycle_s * 1000:.0f} ms, {len(kills)} kills: "
        + ", ".join(f"{kill.delay_s:.2f}s/{kill.committed} committed/{kill.landed}" for kill in kills)
        + f"; landed {dict(landed)}; after restart (held, open) by share {per_share}"
    )
    # Cycles run back to back, so most kills land inside one (the rest still prove a clean restart).
    assert landed["mid-cycle"] >= len(kills) // 2, kills
