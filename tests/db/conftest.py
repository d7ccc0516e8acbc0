"""Real databases for the ledger tests: a fresh SQLite file, or a fresh PostgreSQL database, per module.

Every test that takes ``backend`` runs on both. PostgreSQL is reached at ``QUOTA_TEST_POSTGRES`` (default
``postgresql://postgres@127.0.0.1:5432``); its tests skip, saying why, only when it cannot be reached, and
fail instead under CI (``CI=true``), where it must be there (tests/databases.py). Airflow is imported in
this process too (the models use its column types), so ``AIRFLOW_HOME`` is pointed at a temporary folder
first: the tests never read or write a real Airflow installation.
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.databases import (
    copy_migrated_sqlite,
    create_migrated_postgres,
    migrate_fresh,
    postgres_admin,
    postgres_server_or_skip,
)

# Before any test module of this folder imports airflow.
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="quota-db-tests-airflow-home-")
atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)

AIRFLOW = Path(sys.executable).parent / "airflow"
BACKENDS = ["sqlite", "postgresql"]


@dataclass(frozen=True)
class Database:
    """A fresh, empty database: its URL for Airflow, and an engine for the test's own queries."""

    backend: str
    url: str
    home: Path
    engine: sa.Engine

    def session(self) -> Session:
        return Session(self.engine)

    def airflow_env(self, **extra: str) -> dict[str, str]:
        """The environment an ``airflow`` command needs to work on this database."""
        return {
            **os.environ,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.url,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            **extra,
        }

    def airflow(
        self, *args: str, timeout: float = 180, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the ``airflow`` command against this database, as a user would."""
        env = self.airflow_env(**(env or {}))
        return subprocess.run(
            [str(AIRFLOW), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )


def _no_fsync_on_sqlite(connection: Any, _record: Any) -> None:
    connection.execute("PRAGMA synchronous = OFF")


@pytest.fixture(scope="module")
def migrated(database: Database) -> Database:
    """The module's database after ``airflow db migrate``: Airflow's tables and the ledger's (a copy of a
    database the command migrated, see tests/databases.py). ``database`` made it a copy already when
    every test of the module that takes it takes this too."""
    if database.url not in _MADE_MIGRATED:
        database.engine.dispose()
        migrate_fresh(database.url)
        _MADE_MIGRATED.add(database.url)
    return database


#: The URLs of the databases made (or made again) as copies of the migrated template.
_MADE_MIGRATED: set[str] = set()


def _only_migrated(module: pytest.Module, session: pytest.Session) -> bool:
    """Whether every test of ``module`` that takes ``database`` takes ``migrated`` too: then the module's
    database is made a copy of the migrated template at once, instead of an empty database that
    ``migrated`` drops and makes again (on PostgreSQL: one ``CREATE DATABASE`` and one ``DROP DATABASE``
    less, and each drop waits for a checkpoint of the whole server, seconds on a busy one)."""
    takers = [
        item
        for item in session.items
        if getattr(item, "module", None) is module.obj and "database" in getattr(item, "fixturenames", ())
    ]
    return bool(takers) and all("migrated" in getattr(item, "fixturenames", ()) for item in takers)


class _Dropper:
    """Drops PostgreSQL databases on a thread of its own, one after another: a module's teardown does not
    wait for the checkpoint each ``DROP DATABASE`` forces. The session waits for the last drop."""

    def __init__(self) -> None:
        self.names: queue.Queue[tuple[sa.URL, str] | None] = queue.Queue()
        self.failures: list[str] = []
        self.thread = threading.Thread(target=self._run, name="drop test databases", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (job := self.names.get()) is not None:
            server, name = job
            try:
                postgres_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except Exception as error:  # reported when the session ends
                self.failures.append(f"{name}: {error}")

    def drop(self, server: sa.URL, name: str) -> None:
        self.names.put((server, name))

    def finish(self) -> None:
        self.names.put(None)
        self.thread.join()
        assert not self.failures, f"test databases not dropped: {self.failures}"


_dropper: _Dropper | None = None


def _dropper_of(session: pytest.Session) -> _Dropper:
    """The session's dropper, started on first use; the session's teardown waits for its last drop. (Not
    a fixture: other folders' modules import ``database`` and ``migrated`` without this conftest.)"""
    global _dropper
    if _dropper is None:
        _dropper = _Dropper()
        session.addfinalizer(_finish_dropping)
    return _dropper


def _finish_dropping() -> None:
    global _dropper
    if _dropper is not None:
        dropper, _dropper = _dropper, None
        dropper.finish()


@pytest.fixture(scope="module", params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """A fresh database on each backend, shared by the tests of one module.

    The test's own engine commits without waiting for the disk: ``PRAGMA synchronous = OFF`` on SQLite,
    ``synchronous_commit = off`` on PostgreSQL (a commit's WAL is flushed a moment later). What a commit
    makes visible, and every lock, is as before; only a crash of the machine itself could lose the last
    commits, which no test here makes. The ledger's tests commit after each step: waiting for the disk
    was 5 ms a commit on SQLite here, and more on a loaded PostgreSQL. Engines a test makes itself, and
    the ``airflow`` commands it runs, keep the defaults.

    A module whose tests all take ``migrated`` gets a copy of the migrated template at once (see
    ``_only_migrated``); a PostgreSQL database is dropped after the module on a thread (``_Dropper``)."""
    home = tmp_path_factory.mktemp(f"airflow-home-{request.param}")
    migrated_at_once = _only_migrated(request.node, request.session)
    if request.param == "sqlite":
        path = home / "airflow.db"
        url = f"sqlite:///{path}"
        if migrated_at_once:
            copy_migrated_sqlite(path)
            _MADE_MIGRATED.add(url)
        engine = sa.create_engine(url)
        sa.event.listen(engine, "connect", _no_fsync_on_sqlite)
        yield Database("sqlite", url, home, engine)
        engine.dispose()
        return
    server = postgres_server_or_skip()
    name = f"quota_test_{uuid.uuid4().hex[:12]}"
    url = server.set(drivername="postgresql+psycopg2", database=name).render_as_string(hide_password=False)
    if migrated_at_once:
        create_migrated_postgres(server, name)
        _MADE_MIGRATED.add(url)
    else:
        postgres_admin(server, f'CREATE DATABASE "{name}"')
    engine = sa.create_engine(url, connect_args={"options": "-c synchronous_commit=off"})
    try:
        yield Database("postgresql", url, home, engine)
    finally:
        engine.dispose()
        _MADE_MIGRATED.discard(url)
        _dropper_of(request.session).drop(server, name)
