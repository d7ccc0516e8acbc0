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
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.databases import (
    POSTGRES_SERVER,
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


class _Background:
    """A thread of its own for the session's slow PostgreSQL statements, run one after another.

    A module's teardown hands its ``DROP DATABASE`` here instead of waiting for the checkpoint each drop
    forces; and while a module's SQLite half runs, its PostgreSQL half's copy of the migrated template is
    made here (``prepare``), so that half starts without waiting for it (``claim``). The session waits for
    the last statement, drops what was prepared and not claimed, and fails if a drop failed."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test databases")
        self.drops: list[tuple[str, Future[None]]] = []
        self.prepared: dict[str, tuple[sa.URL, str, Future[None]]] = {}

    def drop(self, server: sa.URL, name: str) -> None:
        self.drops.append(
            (name, self.pool.submit(postgres_admin, server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        )

    def prepare(self, key: str) -> None:
        server = sa.make_url(POSTGRES_SERVER).set(drivername="postgresql+psycopg2", database="postgres")
        name = _new_postgres_name()
        self.prepared[key] = (server, name, self.pool.submit(create_migrated_postgres, server, name))

    def claim(self, key: str, server: sa.URL) -> str | None:
        """The name of the copy prepared for ``key`` on ``server``, once made; None if none was (the
        server unreachable, say: the caller then goes the usual way, and skips or fails there)."""
        entry = self.prepared.pop(key, None)
        if entry is None:
            return None
        prepared_on, name, made = entry
        if made.exception() is not None:  # nothing was created (CREATE DATABASE is all or nothing)
            return None
        if prepared_on != server:
            self.drop(prepared_on, name)
            return None
        return name

    def finish(self) -> None:
        for server, name, made in self.prepared.values():
            if made.exception() is None:
                self.drop(server, name)
        self.prepared.clear()
        self.pool.shutdown(wait=True)
        failures = [
            f"{name}: {done.exception()}" for name, done in self.drops if done.exception() is not None
        ]
        assert not failures, f"test databases not dropped: {failures}"


_background: _Background | None = None


def _background_of(session: pytest.Session) -> _Background:
    """The session's background thread, started on first use; the session's teardown waits for it. (Not
    a fixture: other folders' modules import ``database`` and ``migrated`` without this conftest.)"""
    global _background
    if _background is None:
        _background = _Background()
        session.addfinalizer(_finish_background)
    return _background


def _finish_background() -> None:
    global _background
    if _background is not None:
        background, _background = _background, None
        background.finish()


def _new_postgres_name() -> str:
    return f"quota_test_{uuid.uuid4().hex[:12]}"


def _has_postgresql_half(module: pytest.Module, session: pytest.Session) -> bool:
    return any(
        getattr(item, "module", None) is module.obj
        and getattr(getattr(item, "callspec", None), "params", {}).get("database") == "postgresql"
        for item in session.items
    )


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
    ``_only_migrated``), its PostgreSQL copy made on a thread while its SQLite half runs; a PostgreSQL
    database is dropped on that thread after the module (``_Background``)."""
    home = tmp_path_factory.mktemp(f"airflow-home-{request.param}")
    migrated_at_once = _only_migrated(request.node, request.session)
    if request.param == "sqlite":
        if migrated_at_once and _has_postgresql_half(request.node, request.session):
            _background_of(request.session).prepare(request.node.nodeid)
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
    background = _background_of(request.session)
    prepared = background.claim(request.node.nodeid, server) if migrated_at_once else None
    name = prepared or _new_postgres_name()
    url = server.set(drivername="postgresql+psycopg2", database=name).render_as_string(hide_password=False)
    if migrated_at_once:
        if prepared is None:
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
        background.drop(server, name)
