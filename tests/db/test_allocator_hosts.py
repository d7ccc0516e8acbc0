"""The allocator's own process, ``airflow quota allocator``: one cycle, the daemon, and its metrics.

Real ``airflow`` subprocesses against a migrated database with a task instance deferred on the admission
trigger (the daemon, and ``--once`` with its metrics); StatsD metrics are read from a UDP socket the test
listens on (what a StatsD server receives). The command's report and its refusal of a bad interval are
read from the command run through Airflow's CLI parser in this process (``tests/cli/in_process.py``: the
same output and exit status without an ``airflow`` start, about 5 CPU-seconds on a loaded machine).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow import settings as airflow_settings
from airflow.utils.state import TaskInstanceState

from tests.cli.in_process import run_quota
from tests.db.conftest import Database
from tests.db.test_allocator_cycle import START, db, defer, task_instances

pytestmark = [pytest.mark.db, pytest.mark.airflow]  # the slow tier: see tests/conftest.py
__all__ = ["db"]  # the fixture this module borrows

AIRFLOW = str(Path(sys.executable).parent / "airflow")


@pytest.fixture
def statsd() -> Iterator[socket.socket]:
    """A UDP socket standing where a StatsD server would listen."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(0.5)
        yield sock


def received(sock: socket.socket) -> list[str]:
    lines: list[str] = []
    while True:
        try:
            packet = sock.recv(65536)
        except TimeoutError:
            return lines
        lines.extend(packet.decode().splitlines())


def test_allocator_once_grants_a_waiting_task_and_prints_what_it_did(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = defer(db, "job0", deferred_at=START)
    monkeypatch.setattr(airflow_settings, "engine", db.engine)  # the cycle's (allocator/host.py)

    result = run_quota(["allocator", "--once", "-o", "json"], db.engine)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["submitted"], report["granted"], report["skipped"]) == ([job_id], [job_id], False)
    assert task_instances(db)["job0"].state == TaskInstanceState.SCHEDULED


#: The scheduler's side of the executor heartbeat, in a real ``python`` process on the test's database: the
#: hosted allocator runs a cycle, then Airflow's own ``process_executor_events`` reads its event buffer.
HEARTBEAT_THEN_PROCESS_EVENTS = """
import json
from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
from airflow.models.dagbag import DBDagBag
from airflow.utils.session import create_session
from airflow_quota.allocator.executor import QuotaAllocatorExecutor

executor = QuotaAllocatorExecutor()
executor.heartbeat()
events = {key.task_id: state for key, (state, _) in executor.event_buffer.items()}
with create_session() as session:
    counted = SchedulerJobRunner.process_executor_events(
        executor=executor, job_id=None, scheduler_dag_bag=DBDagBag(), session=session
    )
print(json.dumps({"events": events, "counted": counted}))
"""


def test_the_hosted_allocator_reports_a_granted_task_so_the_scheduler_queues_it_without_sleeping(
    db: Database,
) -> None:
    defer(db, "job0", deferred_at=START)
    defer(db, "job1", deferred_at=START, gpus=2)  # waits: one of the two GPUs is taken

    result = subprocess.run(
        [sys.executable, "-c", HEARTBEAT_THEN_PROCESS_EVENTS],
        env=db.airflow_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    # The granted task, and only it, is reported: the scheduler counts the event, so its loop does not
    # sleep before queueing the task, and leaves the task as the grant left it.
    assert seen == {"events": {"job0": "scheduled"}, "counted": 1}
    states = {task_id: ti.state for task_id, ti in task_instances(db).items()}
    assert states == {"job0": TaskInstanceState.SCHEDULED, "job1": TaskInstanceState.DEFERRED}


FROZEN_BESIDE_A_LOCAL_EXECUTOR = """
import gc, json
from airflow.executors.local_executor import LocalExecutor
from airflow_quota.allocator.executor import QuotaAllocatorExecutor

allocator = QuotaAllocatorExecutor()
allocator.start()
started = gc.get_freeze_count()
local = LocalExecutor(parallelism=2)
local.start()  # forks its workers between gc.freeze() and gc.unfreeze()
thawed = gc.get_freeze_count()
allocator.heartbeat()
after_cycle = gc.get_freeze_count()
print(json.dumps({"started": started, "thawed": thawed, "after_cycle": after_cycle}), flush=True)
# Airflow's LocalExecutor.end() joins its workers without a limit; on an overloaded machine it once never
# returned (CI, 180 s). What this script measures is printed above; the end is bounded and reported.
import os, sys, threading
ending = threading.Thread(target=local.end, daemon=True)
ending.start()
ending.join(60)
if ending.is_alive():
    alive = [pid for pid, worker in local.workers.items() if worker.is_alive()]
    print(f"LocalExecutor.end() did not return within 60 s; workers still alive: {alive}", file=sys.stderr)
    for pid in alive:
        os.kill(pid, 9)
    sys.stdout.flush()
    os._exit(0)
"""


def test_the_hosted_allocator_freezes_the_schedulers_objects_again_after_a_local_executor_forks(
    db: Database,
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", FROZEN_BESIDE_A_LOCAL_EXECUTOR],
        env=db.airflow_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    counts = json.loads(next(line for line in reversed(result.stdout.splitlines()) if line.startswith("{")))
    if "did not return" in result.stderr:
        warnings.warn(result.stderr.strip().splitlines()[-1], stacklevel=1)
    # Airflow's imported objects are out of the cyclic collector's walks from the start (tens of
    # thousands); a LocalExecutor forking its workers thaws them all, and the next cycle freezes them again.
    assert counts["started"] > 10_000, counts
    assert counts["thawed"] == 0, counts
    assert counts["after_cycle"] >= counts["started"], counts


def test_allocator_refuses_a_bad_interval_with_the_reason(db: Database) -> None:
    result = run_quota(["allocator", "--interval", "soon"], db.engine)

    assert result.returncode == 1
    assert "--interval must be a positive number of seconds, not 'soon'" in result.stderr + result.stdout


def test_the_cycle_emits_its_metrics_to_statsd(db: Database, statsd: socket.socket) -> None:
    defer(db, "job0", deferred_at=START)
    defer(db, "job1", deferred_at=START, gpus=2)  # waits: one of the two GPUs is taken
    env = {
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.getsockname()[1]),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
    }

    result = db.airflow("quota", "allocator", "--once", env=env)

    assert result.returncode == 0, result.stderr
    metrics = received(statsd)
    assert "airflow.quota.grants:1|c" in metrics
    assert any(line.startswith("airflow.quota.cycle.duration:") and line.endswith("|ms") for line in metrics)
    assert "airflow.quota.share.usage.gpu-training.team-a.gpu:1|g" in metrics
    assert "airflow.quota.share.idle.gpu-training.team-a.gpu:1|g" in metrics
    assert "airflow.quota.share.runnable.gpu-training.team-a:1|g" in metrics
    assert "airflow.quota.share.running.gpu-training.team-a:1|g" in metrics


def test_the_allocator_daemon_grants_as_tasks_arrive_and_stops_on_sigterm(db: Database) -> None:
    daemon = subprocess.Popen(
        [AIRFLOW, "quota", "allocator", "--interval", "0.2"],
        env=db.airflow_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        defer(db, "job0", deferred_at=START)
        deadline = time.monotonic() + 60
        while task_instances(db)["job0"].state != TaskInstanceState.SCHEDULED:
            assert time.monotonic() < deadline, "the daemon did not grant the waiting task within 60 s"
            assert daemon.poll() is None, daemon.stdout.read() if daemon.stdout else ""
            time.sleep(0.2)
    finally:
        daemon.send_signal(signal.SIGTERM)
        output, _ = daemon.communicate(timeout=30)

    assert daemon.returncode == 0, output
    assert "Quota allocator stopped" in output
