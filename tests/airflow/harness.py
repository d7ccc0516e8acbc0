"""Real Airflow processes for tests: scheduler, dag processor, triggerer and api-server on one database.

``AirflowProcesses`` makes an ``AIRFLOW_HOME`` in a temporary folder, migrates the database (SQLite
file, or a fresh PostgreSQL database), and starts each component as its own ``airflow ...`` process with
LocalExecutor and the quota allocator hosted beside it. Logs go to ``<home>/logs/<component>.log``; a
test that fails prints their tails. Nothing here is mocked: this is what a user runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import requests
import sqlalchemy as sa
from sqlalchemy.orm import Session

from airflow_quota.config_file import load_quota_design
from airflow_quota.ledger.configuration import apply_quota_config
from tests.databases import migrate_fresh

#: Seconds a gracefully stopped scheduler may outlive its last running task before it is signalled again
#: (``AirflowProcesses.stop_gracefully``): it exits within a few once they are done.
_LOCAL_EXECUTOR_HANG = 30

AIRFLOW = str(Path(sys.executable).parent / "airflow")
DAGS = Path(__file__).parent / "dags"
ALLOCATOR_EXECUTOR = "airflow_quota.allocator.executor.QuotaAllocatorExecutor"
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")

T = TypeVar("T")
#: Under pytest-xdist, at most this many Airflow installations run at once, whichever workers start them:
#: more on a 2-core machine starve each other (heartbeats, api-server calls time out) and fail for that.
#: As many as scripts/test.sh's four workers. With three (the whole suite, 2026-12-03), the fourth worker
#: waited 166 s at the start for a slot while the cores were half idle (the first stories, the soaks and the
#: demo wait on their trainings' timers): 593 -> 546 s of pytest with four. Five workers with four slots
#: starved the tests that need no Airflow (measured 2026-12-03).
AIRFLOW_SLOTS = int(os.environ.get("QUOTA_TEST_AIRFLOW_SLOTS", "4"))
SLOTS = Path(tempfile.gettempdir()) / "airflow-quota-test-slots"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def take_airflow_slot() -> IO[str] | None:
    """Wait for one of the ``AIRFLOW_SLOTS`` (a file lock, held until the returned file is closed); None,
    at once, outside pytest-xdist's workers."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    SLOTS.mkdir(exist_ok=True)
    while True:
        for number in range(AIRFLOW_SLOTS):
            slot = (SLOTS / f"slot-{number}.lock").open("w")
            try:
                fcntl.flock(slot, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return slot
            except BlockingIOError:
                slot.close()
        time.sleep(0.5)


@contextlib.contextmanager
def airflow_slot() -> Iterator[None]:
    """Hold one of the ``AIRFLOW_SLOTS`` while an Airflow started otherwise (``scripts/demo.sh``) runs."""
    slot = take_airflow_slot()
    try:
        yield
    finally:
        if slot is not None:
            slot.close()


@dataclass
class AirflowProcesses:
    home: Path
    database_url: str
    parallelism: int = 4
    extra_env: dict[str, str] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    slot: IO[str] | None = None

    def __post_init__(self) -> None:
        self.api_port = free_port()
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(exist_ok=True)
        # The configuration is the environment below. A process that finds no airflow.cfg writes one with a
        # Fernet key of its own: components started at once each did, and a trigger's kwargs encrypted
        # by the api-server could not be read by the triggerer, which died (JSONDecodeError).
        (self.home / "airflow.cfg").touch()
        self.engine = sa.create_engine(self.database_url)

    @property
    def env(self) -> dict[str, str]:
        base_url = self.base_url
        return {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_url,
            "AIRFLOW__CORE__EXECUTOR": f"LocalExecutor,{ALLOCATOR_EXECUTOR}",
            "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__BASE_URL": base_url,
            "AIRFLOW__API__WORKERS": "1",
            # Three installations share two cores in the suite: an api-server call can take over the
            # default 5 s, and a task whose deferral call times out fails without its own code running.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
            "AIRFLOW__API_AUTH__JWT_SECRET": "quota-tests-jwt-secret",
            "AIRFLOW__CORE__FERNET_KEY": "YWlyZmxvdy1xdW90YSB0ZXN0IGZlcm5ldCBrZXkgMzI=",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # The tests' DAG files never change while Airflow runs: parsed once (and again if one is
            # written), not every 30 s, which cost each idle installation a parse process every 30 s.
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            # Airflow's default (1 s) between idle scheduler loops, as users run it: 0.5 s cost an idle
            # scheduler 4.6 to 5.0 CPU-seconds a minute against 2.9 (measured side by side, 2026-12-01),
            # and a loop that granted something does not sleep (allocator/executor.py).
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1",
            "AIRFLOW__QUOTA__ALLOCATION_INTERVAL": "0.5",
            **self.extra_env,
        }

    def airflow(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def migrate(self) -> None:
        """Migrate the fresh database: a copy of one ``airflow db migrate`` made (tests/databases.py)."""
        self.engine.dispose()
        migrate_fresh(self.database_url)

    def apply_quotas(self, path: Path | str) -> None:
        """Apply a quota file to the ledger as ``airflow quota apply -f PATH`` does, in this process: the
        command costs an Airflow start (about 5 CPU-seconds) and is tested on its own (tests/cli, and the
        demo's script runs it)."""
        with Session(self.engine) as session:
            config = load_quota_design([str(path)]).config
            apply_quota_config(session, config, applied_by="tests", source=str(path))
            session.commit()

    def start(self, *components: str) -> None:
        """Start Airflow components (default: api-server, scheduler, dag-processor, triggerer)."""
        for component in components or COMPONENTS:
            self.start_process(component, component.split())
            if component == "api-server":
                threading.Thread(target=self._build_task_api, daemon=True).start()

    def _build_task_api(self) -> None:
        """Make the api-server's first task-API request as soon as it answers: Airflow builds that API on its
        first request (8 to 10 CPU-seconds, answering nothing meanwhile), and a task whose calls wait for it
        under load can time out and fail before its own code runs. ``scripts/demo.sh`` does the same."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{self.base_url}/execution/health", timeout=120).status_code == 200:
                    return
            time.sleep(0.5)

    def start_process(self, name: str, argv: list[str], **env: str) -> None:
        """Start ``airflow <argv>`` as the process called ``name`` (logs in ``logs/<name>.log``)."""
        if self.slot is None:
            self.slot = take_airflow_slot()
        log = (self.home / "logs" / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [AIRFLOW, *argv],
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL, timeout: float = 30) -> None:
        """Kill a component's whole process group (its workers and supervisors too) with ``sig``."""
        process = self.processes.pop(name)
        os.killpg(process.pid, sig)
        process.wait(timeout)

    def stop_gracefully(self, name: str, timeout: float = 300) -> None:
        """SIGTERM a component's main process only, as an init system does, and wait for it to exit.

        A scheduler's LocalExecutor waits for its running tasks first. Airflow 3.3's then joins its
        workers without reading their results, which can leave it waiting for ever once they have all
        finished (apache/airflow#67870, fixed upstream by #67881; seen once here in 2026-12, every
        trial done at 16:39:44 and the scheduler still there five minutes later): when no task instance
        has been running for ``_LOCAL_EXECUTOR_HANG`` seconds, it is signalled again, as its own log
        says to ("Signal again if you don't want to wait"), which then waits for nothing."""
        process = self.processes.pop(name)
        process.send_signal(signal.SIGTERM)
        deadline, idle_since, signalled_again = time.monotonic() + timeout, None, False
        while process.poll() is None:
            now = time.monotonic()
            if now > deadline:
                self.processes[name] = process  # stop() kills it
                raise AssertionError(
                    f"airflow {name} did not exit within {timeout:.0f} s of SIGTERM\n{self.log_tails()}"
                )
            if name == "scheduler" and not signalled_again:
                idle_since = (idle_since or now) if not self.task_instances_running() else None
                if idle_since is not None and now - idle_since > _LOCAL_EXECUTOR_HANG:
                    process.send_signal(signal.SIGTERM)
                    signalled_again = True
            time.sleep(0.5)

    def task_instances_running(self) -> bool:
        """Whether a task instance of any DAG is running."""
        with self.engine.connect() as connection:
            return bool(
                connection.execute(
                    sa.text("SELECT 1 FROM task_instance WHERE state = 'running' LIMIT 1")
                ).first()
            )

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()
        self.engine.dispose()
        if self.slot is not None:
            self.slot.close()
            self.slot = None

    def log_tails(self, lines: int = 40) -> str:
        tails = []
        for path in sorted((self.home / "logs").glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {path.name} ---\n" + "\n".join(text))
        return "\n".join(tails)

    def task_log_folder(self, dag_id: str, run_id: str, task_id: str) -> Path:
        """Where one task instance's logs are: each try's, and its triggers' beside them."""
        return self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        """Every log file of one task instance (all tries), as the worker wrote them."""
        folder = self.task_log_folder(dag_id, run_id, task_id)
        return "\n".join(path.read_text(errors="replace") for path in sorted(folder.rglob("*.log")))

    def session(self) -> Session:
        return Session(self.engine)

    def wait_for(self, what: str, probe: Callable[[], T | None], timeout: float = 120) -> T:
        """Poll ``probe`` until it returns something truthy; fail with the logs after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise AssertionError(f"airflow {name} exited ({process.returncode})\n{self.log_tails()}")
            result = probe()
            if result:
                return result
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.log_tails()}")

    def wait_for_ledger_to_settle(
        self, *job_ids: str, job_queue_name: str | None = None, timeout: float = 60
    ) -> None:
        """Wait until the quota ledger has recorded the end of ``job_ids`` (default: every job, or every job
        of ``job_queue_name``). The allocator records it in the cycle after the job's task ended, so a test
        that just saw its DAG runs finish waits for that cycle before it reads the ledger."""
        self.wait_for(
            "the quota ledger to record the jobs' end",
            lambda: ledger_settled(self.engine, *job_ids, job_queue_name=job_queue_name),
            timeout,
        )

    def wait_for_dag(self, dag_id: str, timeout: float = 120) -> None:
        def parsed() -> bool:
            with self.engine.connect() as connection:
                rows = connection.execute(
                    sa.text("SELECT 1 FROM serialized_dag WHERE dag_id = :d"), {"d": dag_id}
                )
                return rows.first() is not None

        self.wait_for(f"DAG {dag_id} to be parsed", parsed, timeout)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def api_token(self, timeout: float = 120) -> str:
        """An admin's token from the api-server (``auth/token``), waiting until it answers."""

        def token() -> str | None:
            try:
                answer = requests.post(
                    f"{self.base_url}/auth/token", json={"username": "admin", "password": "admin"}, timeout=30
                )
            # Not answering yet, or busy: its one worker builds the task API on its first request (8 to 10
            # CPU-seconds; over 30 s on a loaded machine), and a token request waits behind it.
            except (requests.ConnectionError, requests.Timeout):
                return None
            assert answer.status_code == 201, answer.text
            return str(answer.json()["access_token"])

        return self.wait_for("the api-server to answer", token, timeout)

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any] | None = None) -> None:
        """Trigger a DAG run through the REST API, as the UI does (an ``airflow dags trigger`` process
        would cost seconds of CPU at each call).

        Tried again when SQLite was busy: with many tasks deferring and resuming at once, the api-server's
        write can wait past SQLite's lock timeout and answer 500 "Database error" (the run may have been
        created all the same)."""
        for tries_left in (2, 1, 0):
            answer = requests.post(
                f"{self.base_url}/api/v2/dags/{dag_id}/dagRuns",
                json={"dag_run_id": run_id, "logical_date": None, "conf": conf or {}},
                headers={"Authorization": f"Bearer {self.api_token()}"},
                timeout=60,
            )
            if answer.status_code == 200:
                return
            if tries_left and "Database error" in answer.text:
                if self.run_state(dag_id, run_id) is not None:
                    return
                time.sleep(1)
                continue
            raise AssertionError(f"triggering {dag_id}: {answer.status_code} {answer.text}")

    def task_states(self, dag_id: str, run_id: str) -> dict[str, tuple[str | None, int]]:
        return task_states(self.engine, dag_id, run_id)

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        return run_state(self.engine, dag_id, run_id)


def task_states(engine: sa.Engine, dag_id: str, run_id: str) -> dict[str, tuple[str | None, int]]:
    """``{task_id: (state, try_number)}`` of a DAG run."""
    with engine.connect() as connection:
        rows = connection.execute(
            sa.text("SELECT task_id, state, try_number FROM task_instance WHERE dag_id = :d AND run_id = :r"),
            {"d": dag_id, "r": run_id},
        )
        return {task_id: (state, try_number) for task_id, state, try_number in rows}


def run_state(engine: sa.Engine, dag_id: str, run_id: str) -> str | None:
    """A DAG run's state (None before it exists)."""
    with engine.connect() as connection:
        row = connection.execute(
            sa.text("SELECT state FROM dag_run WHERE dag_id = :d AND run_id = :r"), {"d": dag_id, "r": run_id}
        ).first()
        return None if row is None else str(row[0])


def ledger_settled(engine: sa.Engine, *job_ids: str, job_queue_name: str | None = None) -> bool:
    """Whether the quota ledger has recorded the end of ``job_ids`` (default: every job, or every job of
    ``job_queue_name``)."""
    query = "SELECT count(*) FROM quota_job WHERE status NOT IN ('SUCCEEDED', 'FAILED')"
    parameters: dict[str, Any] = {}
    if job_queue_name is not None:
        query += " AND job_queue_name = :queue"
        parameters["queue"] = job_queue_name
    statement = sa.text(query)
    if job_ids:
        statement = sa.text(query + " AND job_id IN :job_ids").bindparams(
            sa.bindparam("job_ids", expanding=True)
        )
        parameters["job_ids"] = list(job_ids)
    with engine.connect() as connection:
        return int(connection.execute(statement, parameters).scalar_one()) == 0
