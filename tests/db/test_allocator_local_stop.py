"""A preempted local job's devices are never granted again while its training may still run on them.

Two local victims (1 GPU each) whose training ignores SIGTERM (``stop_grace_period`` 60 s) are preempted
by a 2-GPU job at T=3. Then their task runner dies, or the scheduler (and its allocator host), or both,
at each step of the stop. The training process group is stopped by the task while its task process lives,
else by its watchdog, which starts SIGTERM -> grace period -> SIGKILL only once the task process is dead.
So the training may run until the task process died + the grace period, and that death is never earlier
than the cycle that first sees the try over can tell: the preemptor must not get the devices before that
cycle's time + grace period + ``LOCAL_KILL_MARGIN_SECONDS`` (issue 18: it got them at the decision + 70 s
while the victims' trainings ran 10 s longer).

Against a real, migrated metadata DB (SQLite and PostgreSQL); the task instances end the way Airflow ends
them, with Airflow's own code (``tests.db.airflow_transitions``); a scheduler restart is a new host whose
cycles read only the ledger.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from airflow.jobs.job import Job
from airflow.models.log import Log
from airflow.models.taskinstancehistory import TaskInstanceHistory

from airflow_quota.allocator.cycle import CycleReport
from airflow_quota.allocator.orphans import LOCAL_KILL_MARGIN_SECONDS
from airflow_quota.backends.local_watchdog import group_alive
from airflow_quota.ledger.models import JobRow
from airflow_quota.protocol import TRAINING_JOB_KEY
from tests.db.airflow_transitions import (
    a_scheduler_job,
    heartbeat_timed_out,
    run_in_worker,
    scheduler_restarted,
)
from tests.db.conftest import Database
from tests.db.test_allocator_cycle import db, defer, job
from tests.db.test_allocator_lifecycle import at, cycle, store_set, teams

pytestmark = pytest.mark.db
__all__ = ["db", "teams"]  # the fixtures this module borrows

GRACE = 60.0
#: The decision's time, and how long the scheduler stays down after it was killed (issue 18: 35 s).
DECIDED = 3.0
SCHEDULER_DOWN = 35.0
#: [scheduler] task_instance_heartbeat_timeout in this story.
HEARTBEAT_TIMEOUT = 30.0
#: How long a live task runner takes to kill its task process once its try ended in the database: its
#: next heartbeat ([workers] min_heartbeat_interval, 5 s) is refused, SIGTERM, SIGKILL 5 s later.
RUNNER_REACTION = 10.0
VICTIMS = ("victim-1", "victim-2")


@pytest.fixture
def local(teams: Database) -> Iterator[Database]:
    """Airflow's history of earlier tests' tries is gone too (the same task ids and try numbers)."""
    with teams.engine.begin() as connection:
        for model in (Log, TaskInstanceHistory, Job):
            connection.execute(sa.delete(model.__table__))
    yield teams


@dataclass(frozen=True)
class Step:
    """Where the stop was when the kill came: seconds after the start, and whether the task had recorded
    its training ended (the local backend's own evidence that its devices are free)."""

    killed_at: float
    recorded_ended: bool = False


STEPS = {
    "decided, its task not yet signalled": Step(DECIDED + 0.5),
    "signalled: its task read the signal, not yet stopping": Step(DECIDED + 1.5),
    "signalled, its task stopping the training (grace period running)": Step(20.0),
    "the training stopped, not yet recorded by its task": Step(40.0),
    "the training stopped and recorded ended, the stop not yet reported": Step(40.0, recorded_ended=True),
}


def victims_preempted(db: Database) -> tuple[list[str], str, int]:
    """Two local 1-GPU victims run their trainings on devices 0 and 1; a 2-GPU job preempts both."""
    victims = [
        defer(db, task_id, gpus=1, quota_share_name="team-a", capacity_unit="local-gpu")
        for task_id in VICTIMS
    ]
    assert sorted(lease.job_id for lease in cycle(db, 1).granted) == sorted(victims)
    scheduler = a_scheduler_job(db.engine)
    for task_id, job_id in zip(VICTIMS, victims, strict=True):
        run_in_worker(db.engine, task_id, scheduler)
        record = {"backend": "local", "name": f"{task_id}-a1", "attempt": 1, "lease_id": f"{job_id}#1"}
        store_set(db, task_id, TRAINING_JOB_KEY, record | {"state": "launched", "grace_period": GRACE})
    cycle(db, 2)
    preemptor = defer(
        db,
        "preemptor",
        gpus=2,
        priority=10,
        quota_share_name="team-a",
        capacity_unit="local-gpu",
        deferred_at=at(DECIDED),
    )
    assert sorted(cycle(db, DECIDED).preempted[preemptor]) == victims
    return victims, preemptor, scheduler


def record_ended(db: Database, victims: list[str]) -> None:
    for task_id, job_id in zip(VICTIMS, victims, strict=True):
        record = {"backend": "local", "name": f"{task_id}-a1", "attempt": 1, "lease_id": f"{job_id}#1"}
        store_set(db, task_id, TRAINING_JOB_KEY, record | {"state": "ended", "grace_period": GRACE})


def granted(report: CycleReport) -> list[str]:
    return [lease.job_id for lease in report.granted]


def devices_held(db: Database) -> dict[str, list[int]]:
    with db.session() as session:
        rows = session.scalars(sa.select(JobRow).where(JobRow.held_devices.is_not(None)))
        return {row.task_id: list(row.held_devices) for row in rows if row.held_devices}


def kill_task_runners(db: Database, step: Step) -> tuple[float, float]:
    """The victims' task runners die at ``killed_at`` (their watchdogs start the stop at once); the host
    goes on. The scheduler fails the tries once the heartbeat timeout has passed. Returns (when the
    allocator first sees the tries over, the latest time the trainings may still run)."""
    assert granted(cycle(db, step.killed_at + 1)) == []  # the tries are still RUNNING to Airflow
    seen = step.killed_at + HEARTBEAT_TIMEOUT
    for task_id in VICTIMS:
        heartbeat_timed_out(db.engine, task_id)
    return seen, step.killed_at + GRACE


def kill_scheduler(db: Database, step: Step, scheduler: int) -> tuple[float, float]:
    """The scheduler and its allocator host die at ``killed_at``; the task runners live. A new scheduler
    starts ``SCHEDULER_DOWN`` later and resets the tries (a new host: only the ledger is left); each task
    runner's next heartbeat is refused, it kills its task process, and the watchdog starts the stop."""
    restarted = step.killed_at + SCHEDULER_DOWN
    scheduler_restarted(db.engine, scheduler)
    return restarted, restarted + RUNNER_REACTION + GRACE


def kill_both(db: Database, step: Step, scheduler: int) -> tuple[float, float]:
    """Task runners and scheduler die at ``killed_at``; the new scheduler resets the tries."""
    restarted = step.killed_at + SCHEDULER_DOWN
    scheduler_restarted(db.engine, scheduler)
    return restarted, step.killed_at + GRACE


@pytest.mark.parametrize("step_name", list(STEPS))
@pytest.mark.parametrize("kill", ["task runners", "scheduler", "task runners and scheduler"])
def test_a_preempted_local_jobs_devices_are_granted_only_once_its_training_is_known_gone(
    local: Database, kill: str, step_name: str
) -> None:
    step = STEPS[step_name]
    victims, preemptor, scheduler = victims_preempted(local)
    if step.recorded_ended:
        record_ended(local, victims)

    if kill == "task runners":
        seen, training_may_run_until = kill_task_runners(local, step)
    elif kill == "scheduler":
        seen, training_may_run_until = kill_scheduler(local, step, scheduler)
    else:
        seen, training_may_run_until = kill_both(local, step, scheduler)

    first = cycle(local, seen)
    if step.recorded_ended:  # the task said its training ended: nothing can run on the devices
        assert granted(first) == [preemptor]
        assert devices_held(local) == {"preemptor": [0, 1]}
        return
    assert granted(first) == []
    released_at = seen + GRACE + LOCAL_KILL_MARGIN_SECONDS
    assert released_at > training_may_run_until
    assert granted(cycle(local, training_may_run_until)) == []
    assert devices_held(local) == {"victim-1": [0], "victim-2": [1]}
    assert granted(cycle(local, released_at - 0.5)) == []

    assert granted(cycle(local, released_at)) == [preemptor]
    assert devices_held(local) == {"preemptor": [0, 1]}
    assert all(job(local, victim).status == "FAILED" for victim in victims)


def test_the_bound_counts_from_when_the_try_was_first_seen_over_even_across_a_host_restart(
    local: Database,
) -> None:
    """A new host reads when the try was first seen over from the ledger, not from its own memory."""
    victims, preemptor, _ = victims_preempted(local)
    for task_id in VICTIMS:
        heartbeat_timed_out(local.engine, task_id)
    assert granted(cycle(local, 10)) == []
    seen = [job(local, victim).task_ended_seen_at for victim in victims]
    assert seen == [at(10), at(10)]

    assert granted(cycle(local, 10 + GRACE + LOCAL_KILL_MARGIN_SECONDS - 0.5)) == []
    assert granted(cycle(local, 10 + GRACE + LOCAL_KILL_MARGIN_SECONDS)) == [preemptor]


def test_a_victim_cleared_by_the_allocator_counts_from_the_clear_not_the_decision(local: Database) -> None:
    """A victim whose task does not stop is cleared at the stop deadline; its try is over from then."""
    deadline = timedelta(seconds=100)
    victims, preemptor, _ = victims_preempted(local)

    report = cycle(local, DECIDED + 100, stop_deadline=deadline)

    assert sorted(report.cleared) == sorted(victims)
    seen = DECIDED + 101
    assert granted(cycle(local, seen, stop_deadline=deadline)) == []
    assert granted(cycle(local, seen + GRACE + LOCAL_KILL_MARGIN_SECONDS - 0.5, stop_deadline=deadline)) == []
    assert granted(cycle(local, seen + GRACE + LOCAL_KILL_MARGIN_SECONDS, stop_deadline=deadline)) == [
        preemptor
    ]
    assert job(local, victims[0]).status_reason == (
        "Its task try 1 was cleared by the quota allocator: it had not stopped within 100 s of being told to "
        "(stop_deadline)"
    )


# --- released on the host's own evidence --------------------------------------------------------------

#: A training that, once told to stop (its watchdog's SIGTERM), saves its checkpoint until the test lets
#: it finish (the file ``release`` appears).
SAVING_TRAINING = """
    import os, signal, sys, time
    from pathlib import Path

    def save_then_exit(*_):
        while not Path(sys.argv[1], "release").exists():
            time.sleep(0.05)
        sys.exit(143)

    signal.signal(signal.SIGTERM, save_then_exit)
    Path(sys.argv[1], f"ready-{os.getpid()}").touch()
    while True:
        time.sleep(0.05)
"""

#: The task process of a victim: starts its training with the local backend (and so its real watchdog),
#: prints the evidence its record keeps, and waits to be killed.
TASK = """
    import json, os, sys
    from pathlib import Path
    from airflow_quota.backends.local import LocalTrainingJob, LocalTrainingRun
    from airflow_quota.backends.local_evidence import launch_evidence
    tmp, name = Path(sys.argv[1]), sys.argv[2]
    job = LocalTrainingJob(
        name=name, command=[sys.executable, str(tmp / "train.py"), str(tmp)], devices=[0],
        checkpoint_dir=tmp / name / "checkpoints", model_dir=tmp / name / "model",
        output_data_dir=tmp / name / "output", grace_period=60.0,
    )
    run = LocalTrainingRun.start(job, lambda line: None)
    os.write(1, (json.dumps(launch_evidence(run.pid)) + "\\n").encode())
    sys.stdin.readline()
"""


def test_a_dead_victims_devices_are_released_once_its_host_sees_its_training_gone(
    local: Database, tmp_path: Path
) -> None:
    """The victims' task processes die mid-stop (SIGKILL, as their task runners die): their watchdogs stop
    the trainings, and once this host sees each training's process group and task process gone, the
    preemptor gets the devices, without waiting for Airflow's heartbeat timeout (issue 34: 53 s idle)."""
    (tmp_path / "train.py").write_text(textwrap.dedent(SAVING_TRAINING))
    victims, preemptor, _ = victims_preempted(local)
    tasks, groups = [], []
    try:
        for task_id, job_id in zip(VICTIMS, victims, strict=True):
            task = subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(TASK), str(tmp_path), f"{task_id}-a1"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            tasks.append(task)
            assert task.stdout is not None
            evidence = json.loads(task.stdout.readline())
            groups.append(evidence["pgid"])
            record = {"backend": "local", "name": f"{task_id}-a1", "attempt": 1, "lease_id": f"{job_id}#1"}
            store_set(
                local,
                task_id,
                TRAINING_JOB_KEY,
                record | {"state": "launched", "grace_period": GRACE, "process": evidence},
            )
        assert granted(cycle(local, DECIDED + 1)) == []  # the tasks live: they stop their trainings
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"ready-{pgid}").exists() for pgid in groups):
            assert time.monotonic() < deadline, "the trainings did not start"
            time.sleep(0.05)

        for task in tasks:
            os.kill(task.pid, signal.SIGKILL)
            task.wait()
        assert granted(cycle(local, DECIDED + 2)) == []  # the trainings still save their checkpoints
        assert all(group_alive(pgid) for pgid in groups)
        assert devices_held(local) == {"victim-1": [0], "victim-2": [1]}

        (tmp_path / "release").touch()
        deadline = time.monotonic() + 30
        while any(group_alive(pgid) for pgid in groups):
            assert time.monotonic() < deadline, "the watchdogs did not stop the trainings"
            time.sleep(0.05)
        released = cycle(local, DECIDED + 3)  # to Airflow the tries still run: no heartbeat timeout yet

        assert granted(released) == [preemptor]
        assert devices_held(local) == {"preemptor": [0, 1]}
        assert sorted(released.stopped) == sorted(victims)
        for task_id in VICTIMS:  # Airflow notices the dead tasks later: the victims, waiting, fail
            heartbeat_timed_out(local.engine, task_id)
        cycle(local, DECIDED + HEARTBEAT_TIMEOUT)
        assert all(job(local, victim).status == "FAILED" for victim in victims)
    finally:
        (tmp_path / "release").touch()
        for task in tasks:
            if task.poll() is None:
                task.kill()
                task.wait()
        for pgid in groups:
            if group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
