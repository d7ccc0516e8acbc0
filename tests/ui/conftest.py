"""A real ``airflow api-server`` for the UI and REST API tests, and a ledger seeded through the store.

One server per test session: a temporary ``AIRFLOW_HOME`` with a SQLite metadata DB made by ``airflow db
migrate`` (which also creates the ledger's tables), Airflow's default configuration (SimpleAuthManager, lazy
provider discovery: the plugin must load through its entry point), three users (``admin``, ``op``, ``viewer``)
with known passwords, on a free port of 127.0.0.1. The SQLite server, which most tests use, and the PostgreSQL
one run Airflow's default, one uvicorn worker (each further worker, a spawned process, costs about 12
CPU-seconds to start: the plugin's API keeps no state of its own in a process, so two had only let a test's
requests land on either, by chance). The SQLite server starts with Airflow's ``aws_default`` connection on
this worker's AWS Batch emulator (``tests.aws_batch.conftest.batch_emulator``), and
tests/aws_batch/test_rest_on_aws_queues.py uses it too (``sqlite_api_server``: that file runs on this worker
with tests/ui's, ``ONE_WORKER_FILES``); the plugin asks AWS Batch only about the job queues it schedules
(``scheduler: AWS_BATCH``), which no test here applies. Each test empties the ledger and seeds it with the
store's own functions, as the allocator would write it.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests
import sqlalchemy as sa
from sqlalchemy.orm import Session

# Airflow is imported in this process too (the ledger's models use its column types): never let it read or
# write a real installation. (The api-server gets its own AIRFLOW_HOME below.)
if "airflow" not in sys.modules:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="quota-ui-tests-airflow-home-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)

from airflow_quota.engine.config import QuotaConfig, parse_quota_config
from airflow_quota.engine.model import CyclePlan, JobRequest, JobStatus, QueueState
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.decisions import record_cycle
from airflow_quota.ledger.job_rows import to_engine_time
from airflow_quota.ledger.lifecycle import (
    TaskInstanceRef,
    record_finish,
    record_status_change,
    record_stop_completed,
    record_submission,
)
from airflow_quota.ledger.models import JobRow, ledger_metadata
from airflow_quota.ledger.queue_state import load_queue_state
from tests.databases import migrate_fresh, scratch_postgres_url
from tests.once_a_session import once_a_session

AIRFLOW = Path(sys.executable).parent / "airflow"
PASSWORDS = {"admin": "admin-password", "op": "op-password", "viewer": "viewer-password"}
T = TypeVar("T")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class ApiServer:
    """The running api-server: its URL, its database, and tokens per user."""

    url: str
    home: Path
    engine: sa.Engine
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, user: str) -> str:
        if user not in self.tokens:
            response = requests.post(
                f"{self.url}/auth/token",
                json={"username": user, "password": PASSWORDS[user]},
                timeout=30,
            )
            assert response.status_code == 201, response.text
            self.tokens[user] = response.json()["access_token"]
        return self.tokens[user]

    def get(self, path: str, user: str | None = "viewer", **params: Any) -> requests.Response:
        return requests.get(f"{self.url}{path}", params=params, headers=self._auth(user), timeout=30)

    def send(self, method: str, path: str, body: Any, user: str | None = "admin") -> requests.Response:
        return requests.request(method, f"{self.url}{path}", json=body, headers=self._auth(user), timeout=30)

    def send_raw(self, method: str, path: str, body: bytes, user: str = "admin") -> requests.Response:
        """Send ``body`` as it is, declared JSON (for bodies no JSON encoder would write)."""
        headers = {**self._auth(user), "Content-Type": "application/json"}
        return requests.request(method, f"{self.url}{path}", data=body, headers=headers, timeout=30)

    def _auth(self, user: str | None) -> dict[str, str]:
        return {} if user is None else {"Authorization": f"Bearer {self.token(user)}"}


@pytest.fixture(scope="session")
def api_server(request: pytest.FixtureRequest) -> ApiServer:
    return sqlite_api_server(request)


#: This worker's SQLite api-server (``sqlite_api_server``).
_SQLITE_SERVER = pytest.StashKey[ApiServer]()


def sqlite_api_server(request: pytest.FixtureRequest) -> ApiServer:
    """This worker's SQLite api-server, with ``aws_default`` on this worker's AWS
    Batch emulator (the one ``tests.aws_batch.conftest.batch_emulator`` gives tests/aws_batch), started by the
    first that asks, stopped at the session's end: tests/ui's ``api_server``, and
    tests/aws_batch/test_rest_on_aws_queues.py's ``server``, which cannot ask for a fixture of this conftest
    (a copy of the fixture there would have been a second server)."""

    def start() -> AbstractContextManager[ApiServer]:
        from tests.aws_batch.conftest import batch_emulator
        from tests.sagemaker.moto_process import emulator_connection

        aws = emulator_connection(batch_emulator(request.session))
        home = request.getfixturevalue("tmp_path_factory").mktemp("airflow-home-ui")
        return contextmanager(_serve)(home, f"sqlite:///{home / 'airflow.db'}", extra_env=aws)

    return once_a_session(request.session, _SQLITE_SERVER, start)


@pytest.fixture(scope="session")
def postgres_api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The same api-server on a fresh PostgreSQL database (skipped, saying why, when none is reachable)."""
    with scratch_postgres_url("quota_ui_test") as database:
        yield from _serve(tmp_path_factory.mktemp("airflow-home-ui-postgres"), database)


def _serve(
    home: Path, database: str, workers: int = 1, extra_env: dict[str, str] | None = None
) -> Iterator[ApiServer]:
    port = _free_port()
    passwords = home / "simple_auth_manager_passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    env = {
        **os.environ,
        **(extra_env or {}),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,op:op,viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": "quota-ui-tests-secret",
        "AIRFLOW__API__EXPOSE_CONFIG": "False",
    }
    migrate_fresh(database)
    log = (home / "api-server.log").open("w")
    server = subprocess.Popen(
        [str(AIRFLOW), "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    engine = sa.create_engine(database)
    try:
        _wait_until_serving(url, server, home / "api-server.log")
        yield ApiServer(url, home, engine)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        engine.dispose()


def _wait_until_serving(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"airflow api-server exited with {server.returncode}:\n{log.read_text()[-5000:]}")
        try:
            if requests.get(f"{url}/api/v2/monitor/health", timeout=2).status_code == 200:
                return
        except (requests.ConnectionError, requests.Timeout):  # not serving yet, or busy starting
            pass
        time.sleep(0.5)
    pytest.fail(f"airflow api-server did not answer within 180 s:\n{log.read_text()[-5000:]}")


# --- the ledger, seeded through the store ---------------------------------------------------------------

QUEUE = "gpu-training"
UNIT = "ml.p4d.24xlarge"
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def share(name: str, gpus: int, strategy: str, **extra: Any) -> dict[str, Any]:
    return {
        "quotaShareName": name,
        "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": gpus}],
        "resourceSharingConfiguration": {"strategy": strategy, **extra.pop("sharing", {})},
        **extra,
    }


#: 8 GPUs: research lends 4, vision borrows (up to 100% of its 2), urgent keeps 2 and preempts in its share.
QUOTA_FILE = {
    "jobQueues": [
        {
            "jobQueueName": QUEUE,
            "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": 8}],
            "quotaShares": [
                share("research", 4, "LEND"),
                share("vision", 2, "LEND_AND_BORROW", sharing={"borrowLimit": 100}),
                share("urgent", 2, "RESERVE", preemptionConfiguration={"inSharePreemption": "ENABLED"}),
            ],
        }
    ]
}


class Ledger:
    """Writes the ledger the way the allocator does: each step in its own transaction, with a clock."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.now = START

    def tick(self) -> datetime:
        self.now += timedelta(seconds=5)
        return self.now

    def step(self, action: Callable[[Session], T]) -> T:
        with Session(self.engine) as session, session.begin():
            return action(session)

    def load(self) -> QueueState:
        with Session(self.engine) as session:
            return load_queue_state(session, QUEUE)

    def empty(self) -> None:
        with self.engine.begin() as connection:
            for table in reversed(ledger_metadata.sorted_tables):
                connection.execute(table.delete())
            connection.execute(sa.text("DELETE FROM task_state_store"))

    def apply(self, document: dict[str, Any] = QUOTA_FILE) -> None:
        config: QuotaConfig = parse_quota_config(document, "quotas.yaml")
        now = self.tick()
        self.step(
            lambda session: apply_quota_config(session, config, applied_by="alice", source="q.yaml", now=now)
        )

    def submit(
        self,
        task_id: str,
        share_name: str,
        gpus: int,
        priority: int = 0,
        map_index: int = -1,
        run_id: str = "run-1",
    ) -> str:
        job_id = f"train/{run_id}/{task_id}/{map_index}/1"
        request = JobRequest(task_id, share_name, UNIT, gpus, priority)
        task = TaskInstanceRef("train", run_id, task_id, map_index=map_index, try_number=1)
        state, now = self.load(), self.tick()
        self.step(lambda session: record_submission(session, state, job_id, request, task, now))
        return job_id

    def cycle(self) -> CyclePlan:
        before, now = self.load(), self.tick()
        plan = plan_cycle(before, to_engine_time(now))
        self.step(lambda session: record_cycle(session, before, plan, now))
        return plan

    def running(self, job_id: str) -> None:
        state, now = self.load(), self.tick()
        self.step(lambda session: record_status_change(session, state, job_id, JobStatus.RUNNING, now))

    def stopped(self, job_id: str) -> None:
        state, now = self.load(), self.tick()
        self.step(lambda session: record_stop_completed(session, state, job_id, now))

    def succeeded(self, job_id: str) -> None:
        state, now = self.load(), self.tick()
        self.step(lambda session: record_finish(session, state, job_id, now, succeeded=True))

    def training_job(
        self,
        job_id: str,
        name: str,
        *,
        in_ledger: bool = True,
        region: str | None = "us-west-2",
        lease: str = "",
        arn: str | None = None,
    ) -> None:
        """What the task reports it launched: its record under protocol.TRAINING_JOB_KEY in its
        task_state_store (with ``region``; none when it is None) and, copied by the allocator, the job row's
        ``training_job`` (``in_ledger``; with its TrainingJobArn ``arn``, when given). The record belongs to
        dag run 1, made here when missing (PostgreSQL checks the foreign key; this engine, unlike Airflow's,
        leaves SQLite's off).
        """
        dag_id, run_id, task_id, map_index, _ = job_id.split("/")
        record = {"backend": "sagemaker", "name": name, "attempt": 1, "lease_id": lease or f"{job_id}#1"}
        record |= {"state": "launched", "region_name": region}
        with self.engine.begin() as connection:
            if in_ledger:
                ledger_record = {"backend": "sagemaker", "name": name, "state": "launched"}
                if arn is not None:
                    ledger_record["arn"] = arn
                connection.execute(
                    sa.update(JobRow).where(JobRow.job_id == job_id).values(training_job=ledger_record)
                )
            if region is None:
                return
            if connection.execute(sa.text("SELECT count(*) FROM dag_run WHERE id = 1")).scalar() == 0:
                connection.execute(
                    sa.text(
                        "INSERT INTO dag_run (id, dag_id, run_id, run_type, run_after) "
                        "VALUES (1, 'train', 'run-1', 'manual', :now)"
                    ),
                    {"now": self.now},
                )
            connection.execute(
                sa.text(
                    "INSERT INTO task_state_store (dag_run_id, task_id, map_index, key, dag_id, run_id, "
                    "value, updated_at) VALUES (1, :task_id, :map_index, 'quota.training_job', :dag_id, "
                    ":run_id, :value, :now)"
                ),
                {
                    "task_id": task_id,
                    "map_index": int(map_index),
                    "dag_id": dag_id,
                    "run_id": run_id,
                    "value": json.dumps(json.dumps(record)),
                    "now": self.now.replace(tzinfo=None),
                },
            )

    def devices(self, job_id: str, devices: list[int]) -> None:
        """The local GPUs the allocator granted (``held_devices``)."""
        with self.engine.begin() as connection:
            connection.execute(sa.update(JobRow).where(JobRow.job_id == job_id).values(held_devices=devices))
