"""An allocator that keeps the queue's state between cycles decides what one reading it whole decides.

On SQLite and on PostgreSQL, a random workload plays Airflow and the tasks (``Driver`` of the concurrency
test: submissions, grants taken, jobs launched and finished, victims stopping and re-deferring with their
stop report), and, between cycles, what else writes the ledger or the task instances: a user clearing a
task, an admin terminating a job or changing its priority, a quota file applied, a second allocator host
committing a cycle, a host whose cycle rolls back whole (its process killed before the commit: it then
restarts with nothing kept) and a queue's part that fails and is rolled back alone.

Before every cycle a host runs, the same cycle, at the same moment, runs first with nothing kept (every
queue read whole, every waiting task read whole) and is rolled back: the kept cycle must then make the
same decisions (grants and their leases, preemptions, stops, finishes, rejections) and end with the same
engine state. Its periodic check (every fourth cycle here) must never find the kept state differing from
the ledger, and most cycles must have used what was kept (else this test would prove nothing).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa

from airflow_quota.allocator import cycle as cycle_module
from airflow_quota.allocator import tasks as tasks_module
from airflow_quota.allocator.cycle import CycleReport, run_allocation_cycle
from airflow_quota.allocator.kept_state import KeptQueues
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.allocator.tasks import WaitingTask
from airflow_quota.engine.config import parse_quota_config
from airflow_quota.engine.model import JobStatus
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.lifecycle import record_priority_change, record_termination
from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.queue_state import load_queue_state
from tests.db.airflow_transitions import cleared_by_user
from tests.db.test_allocator_concurrency import DAG_ID, QUEUE, QUOTAS, RUN_ID, SETTINGS, START, Driver

if TYPE_CHECKING:
    from tests.db.conftest import Database

from tests.db.metadata_rows import reset_for_allocation

pytestmark = pytest.mark.db

CYCLES = 36
#: What happens before some cycles, besides the tasks' own comings and goings.
SCHEDULE = {
    3: "clear",
    5: "second host",
    7: "killed",
    9: "admin",
    11: "apply",
    13: "part fails",
    15: "restart",
    18: "second host",
    20: "clear",
    22: "admin",
    24: "killed",
    26: "apply",
    28: "part fails",
    30: "second host",
    32: "admin",
}
#: The kept host compares what it kept with the queue read whole every this many cycles.
CHECK_EVERY = 4


class Killed(Exception):
    """The host's process died before its cycle committed."""


@pytest.fixture
def db(migrated: Database) -> Iterator[Database]:
    reset_for_allocation(migrated.engine, dag_id=DAG_ID, run_id=RUN_ID, start=START, quotas=QUOTAS)
    yield migrated


class Host:
    """One allocator process: its kept queues, committed or forgotten as ``allocator.host.run_cycle`` does."""

    def __init__(self, db: Database, check_every: int = CHECK_EVERY) -> None:
        self.db = db
        self.kept = KeptQueues(check_every=check_every)
        self.settings = replace(SETTINGS, kept_queues=self.kept)

    def cycle(self, now: datetime, *, killed: bool = False) -> CycleReport | None:
        try:
            with self.db.session() as session, session.begin():
                report = run_allocation_cycle(session, now, self.settings)
                if killed:
                    raise Killed
        except Killed:
            self.kept.forget()
            return None
        self.kept.committed()
        return report

    def restart(self) -> None:
        self.kept = KeptQueues(check_every=CHECK_EVERY)
        self.settings = replace(SETTINGS, kept_queues=self.kept)


def reloading_cycle(db: Database, now: datetime, monkeypatch: pytest.MonkeyPatch) -> CycleReport:
    """The cycle at ``now`` with nothing kept, its own read of the waiting tasks, rolled back."""
    with monkeypatch.context() as patch:
        patch.setattr(tasks_module, "_waiting", tasks_module._WaitingTasks())
        with db.session() as session:
            session.begin()
            report = run_allocation_cycle(session, now, SETTINGS)
            session.rollback()
    return report


def decisions(report: CycleReport) -> dict[str, Any]:
    """What a cycle decided and did, and the engine state it ended with."""
    facts = asdict(report)
    for bookkeeping in ("kept_state_mismatches", "queues_kept", "queues_unchanged", "states"):
        facts.pop(bookkeeping)
    facts["states"] = report.states  # compared as engine states (asdict would turn jobs into dicts too)
    return facts


def quota_file(fewer_gpus: int) -> Any:
    """The concurrency test's quota file with ``fewer_gpus`` fewer GPUs for team-a (a new revision)."""
    document = QUOTAS.model_dump(mode="json", by_alias=True, exclude_none=True)
    team_a = document["jobQueues"][0]["quotaShares"][0]
    team_a["capacityLimits"][0]["maxCapacity"] = 2 - fewer_gpus
    return parse_quota_config(document, "test")


class Outside:
    """What else writes the ledger and the task instances between cycles."""

    def __init__(self, db: Database, driver: Driver, rng: random.Random) -> None:
        self.db, self.driver, self.rng = db, driver, rng
        self.revisions = 0

    def clear_a_task(self) -> None:
        live = [task for task in self.driver.tasks.values() if task.where in ("waiting", "running")]
        if live:
            task = self.rng.choice(live)
            cleared_by_user(self.db.engine, task.task_id)
            task.where, task.grant = "done", None

    def admin(self, now: datetime) -> None:
        with self.db.session() as session, session.begin():
            state = load_queue_state(session, QUEUE)
            open_ids = sorted(state.jobs)
            if not open_ids:
                return
            job_id = self.rng.choice(open_ids)
            if state.jobs[job_id].status is JobStatus.RUNNABLE and self.rng.random() < 0.5:
                record_priority_change(session, state, job_id, self.rng.choice((0, 20, 90)), now)
            else:
                record_termination(session, state, job_id, now, "terminated by the test")

    def apply_quota_file(self) -> None:
        self.revisions += 1
        with self.db.session() as session, session.begin():
            apply_quota_config(
                session, quota_file(self.revisions % 2), applied_by="test", source="quotas.yaml", now=START
            )


def part_fails_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next queue's part raises at its very end, after it recorded and applied its plan (its savepoint
    is rolled back). The end, not the recording: a part that finds its queue unchanged records nothing,
    and whether the driver changed anything before the cycle depends on the machine's speed (it submits
    only while a share has room, by a clock-driven phase)."""
    real = cycle_module.keep_for_next_cycle

    def fails(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        monkeypatch.setattr(cycle_module, "keep_for_next_cycle", real)
        raise RuntimeError("the database went away in the middle of the queue's part")

    monkeypatch.setattr(cycle_module, "keep_for_next_cycle", fails)


def test_a_host_keeping_the_queue_decides_what_reading_it_whole_decides(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(f"kept-state-{db.backend}")
    driver = Driver(db.engine, rng)
    outside = Outside(db, driver, rng)
    first, second = Host(db), Host(db)
    kept_cycles = checks = compared = kills = part_failures = unchanged = 0
    now = datetime.now(UTC)

    def quiet_cycles(host: Host, count: int, *, settled: bool) -> None:
        """Cycles with nothing new (no task moves, no one else writes): the second one finds the queue as
        the first left it, after a plan that decided nothing, and plans nothing; it must still do what a
        whole reload does (a job being stopped is signalled again, or cleared past its deadline).

        Only once every waiting task has settled can a queue be found unchanged: ``settled`` first waits
        the settle time out (else, whether the tasks a cycle just resumed have re-deferred long enough
        before depends on how fast the machine runs, and so did how many cycles found it unchanged)."""
        nonlocal now, compared, unchanged, kept_cycles
        if settled:
            time.sleep(SETTINGS.settle_time.total_seconds())
        for _ in range(count):
            now = max(now + timedelta(milliseconds=1), datetime.now(UTC))
            whole = reloading_cycle(db, now, monkeypatch)
            kept = host.cycle(now)
            assert kept is not None and kept.kept_state_mismatches == []
            assert decisions(kept) == decisions(whole), "a cycle with nothing new decided otherwise"
            compared += 1
            kept_cycles += QUEUE in kept.queues_kept
            unchanged += QUEUE in kept.queues_unchanged

    for number in range(CYCLES):
        for _ in range(rng.randint(1, 3)):
            driver.submit()
        driver.take_resumes()
        driver.obey_store_signals(0.6)
        driver.launch_some(0.3)
        if rng.random() < 0.5:
            driver.finish_one()
        event = SCHEDULE.get(number)
        if event == "clear":
            outside.clear_a_task()
        elif event == "admin":
            outside.admin(datetime.now(UTC))
        elif event == "apply":
            outside.apply_quota_file()
        elif event == "restart":
            first.restart()  # killed between cycles: a new process keeps nothing
        now = max(now + timedelta(milliseconds=1), datetime.now(UTC))
        host = second if event == "second host" else first
        whole = reloading_cycle(db, now, monkeypatch)
        if event == "killed":  # this host's process dies before its cycle commits
            assert host.cycle(now, killed=True) is None
            kills += 1
            continue
        if event == "part fails":
            part_fails_once(monkeypatch)
        kept = host.cycle(now)
        assert kept is not None
        assert kept.kept_state_mismatches == [], f"cycle {number}: the kept state differed from the ledger"
        if event == "part fails":
            assert list(kept.failed_queues) == [QUEUE]
            assert QUEUE not in host.kept.kept  # its part rolled back: read whole next time
            part_failures += 1
            continue
        assert decisions(kept) == decisions(whole), f"cycle {number} decided otherwise with its kept state"
        compared += 1
        kept_cycles += QUEUE in kept.queues_kept
        checks += host.kept.checking and QUEUE in host.kept.kept
        if number % 3 == 2:  # then three with nothing new, and the next one's changes after them
            quiet_cycles(host, 3, settled=number % 9 == 8)

    with db.session() as session:
        granted = session.scalar(sa.select(sa.func.max(JobRow.attempt)))
    print(
        f"{db.backend}: {compared} cycles compared, {kept_cycles} of them on a kept state, {kills} killed, "
        f"{part_failures} parts failed, {unchanged} found unchanged, {len(driver.tasks)} tasks, "
        f"most attempts of one job {granted}"
    )
    assert (kills, part_failures, outside.revisions) == (2, 2, 2)
    assert driver.observed.stop_reports, "no victim stopped: the workload preempted nothing"
    assert kept_cycles >= compared // 3, "too few cycles used a kept state for this to prove anything"
    assert checks
    assert unchanged >= 3, "too few cycles found the queue unchanged for this to prove anything"


def test_a_commit_by_someone_else_makes_the_host_read_the_queue_whole(db: Database) -> None:
    """A kept queue is used only while no one else committed a change to it; a termination from the API or
    the CLI (a ledger write outside the allocator) bumps the queue's generation and the next cycle reads
    it whole, so the terminated job is never granted from a stale kept state."""
    driver = Driver(db.engine, random.Random(3))
    for _ in range(12):
        driver.submit()
    host = Host(db)
    now = datetime.now(UTC)
    first = host.cycle(now)
    assert first is not None and first.queues_kept == []
    again = host.cycle(now + timedelta(seconds=1))
    assert again is not None and again.queues_kept == [QUEUE]
    with db.session() as session, session.begin():
        state = load_queue_state(session, QUEUE)
        waiting = sorted(job_id for job_id, job in state.jobs.items() if job.status is JobStatus.RUNNABLE)
        record_termination(session, state, waiting[0], now, "terminated by an admin")

    after = host.cycle(now + timedelta(seconds=2))

    assert after is not None and after.queues_kept == []
    assert waiting[0] in after.rejected or waiting[0] not in {lease.job_id for lease in after.granted}
    with db.session() as session:
        assert session.get(JobRow, waiting[0]).status == "FAILED"  # type: ignore[union-attr]


def test_a_cycle_with_nothing_new_plans_nothing_and_the_next_change_is_planned(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cycle that finds the queue as the last one left it (the same waiting tasks, the same jobs
    holding capacity) after a plan that decided nothing does not plan again; a finish, a new deferral or
    a job moving on in the very next cycle is planned as a whole reload plans it."""
    driver = Driver(db.engine, random.Random(11))
    for _ in range(16):
        driver.submit()
    host = Host(db, check_every=0)  # no periodic whole reads: each cycle here is the kept one
    now = datetime.now(UTC) + timedelta(seconds=1)  # every deferral settled

    def cycle() -> CycleReport:
        nonlocal now
        now += timedelta(seconds=0.1)  # cycles closer together than the settle time (0.3 s)
        whole = reloading_cycle(db, now, monkeypatch)
        kept = host.cycle(now)
        assert kept is not None and decisions(kept) == decisions(whole)
        driver.take_resumes()
        return kept

    def until_unchanged() -> CycleReport:
        for _ in range(8):
            report = cycle()
            if QUEUE in report.queues_unchanged:
                return report
        raise AssertionError("no cycle found the queue unchanged")

    quiet = until_unchanged()
    assert (quiet.granted, quiet.preempted, quiet.submitted, quiet.finished) == ([], {}, [], [])
    assert quiet.states[QUEUE] == host.kept.kept[QUEUE].state
    assert QUEUE in cycle().queues_unchanged  # and again

    driver.finish_one()  # a job holding capacity ends
    after_finish = cycle()
    assert QUEUE not in after_finish.queues_unchanged
    assert len(after_finish.finished) == 1

    until_unchanged()
    driver.submit()  # one new deferral
    after_submit = cycle()
    assert QUEUE not in after_submit.queues_unchanged
    assert len(after_submit.submitted) == 1

    until_unchanged()
    with db.session() as session, session.begin():  # an admin changes a waiting job's priority
        state = load_queue_state(session, QUEUE)
        waiting = sorted(job_id for job_id, job in state.jobs.items() if job.status is JobStatus.RUNNABLE)
        record_priority_change(session, state, waiting[-1], 90, now)
    after_admin = cycle()
    assert QUEUE not in after_admin.queues_unchanged and QUEUE not in after_admin.queues_kept


def waiting_task(number: int, deferred_at: datetime, *, from_worker: bool) -> WaitingTask:
    return WaitingTask(
        id=uuid.uuid4(),
        dag_id=DAG_ID,
        run_id=RUN_ID,
        task_id=f"t{number}",
        map_index=-1,
        try_number=1,
        trigger_id=number,
        deferred_at=deferred_at,
        from_worker=from_worker,
        kwargs={"job_queue": QUEUE},
        job_id=f"{DAG_ID}/{RUN_ID}/t{number}/-1/1",
    )


def test_a_host_groups_one_read_of_the_waiting_tasks_once_every_task_has_settled() -> None:
    """The same read of the waiting tasks (the same list) gives the same lists per queue, which is how a
    cycle tells that nothing new waits; a task deferred from a worker run still settling is grouped again
    every cycle until it has settled, so its ``settled`` flag is never stale; another read takes the
    tasks grouped before as they were."""
    settings = CycleSettings(settle_time=timedelta(seconds=5), kept_queues=KeptQueues())
    group = cycle_module._waiting_by_queue
    from_triggerer = [waiting_task(1, START, from_worker=False)]
    first = group(from_triggerer, START, settings)[QUEUE]
    assert group(from_triggerer, START + timedelta(milliseconds=1), settings)[QUEUE] is first
    assert group(list(from_triggerer), START, settings)[QUEUE] is not first  # another read

    from_worker = [*from_triggerer, waiting_task(2, START, from_worker=True)]
    settling = group(from_worker, START + timedelta(seconds=1), settings)[QUEUE]
    assert [each.settled for each in settling] == [True, False]
    again = group(from_worker, START + timedelta(seconds=2), settings)[QUEUE]
    assert again is not settling and [each.settled for each in again] == [True, False]
    settled = group(from_worker, START + timedelta(seconds=5), settings)[QUEUE]
    assert [each.settled for each in settled] == [True, True]
    assert group(from_worker, START + timedelta(seconds=6), settings)[QUEUE] is settled
    # Another read with one more deferral: a new list, the tasks grouped before taken as they were.
    read = [*from_worker, waiting_task(3, START, from_worker=False)]
    regrouped = group(read, START + timedelta(seconds=7), settings)[QUEUE]
    assert regrouped is not settled and regrouped[:2] == settled and regrouped[0] is settled[0]
    # A clock that went back: a worker's deferral is no longer settled, whatever it was.
    assert [each.settled for each in group(list(read), START, settings)[QUEUE]] == [True, False, True]
