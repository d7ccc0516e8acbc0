"""Migrated databases for the tests, made by ``airflow db migrate`` once and copied after that.

``airflow db migrate`` takes 10 to 20 s on these machines and dozens of test modules need a migrated
database of their own. The command runs once for each content of the schema (Airflow's version and the
ledger's models and migrations) into a *template*, and each test database is a copy of it: a file copy
on SQLite, ``CREATE DATABASE ... TEMPLATE`` on PostgreSQL. A copy holds exactly the tables and rows the
command wrote. The templates live under the system's temporary folder (SQLite) and in the PostgreSQL
server (``quota_template_<digest>``), named by that digest, so test workers running at once (pytest-xdist)
and later runs share them, and a changed migration makes a new one. A file lock makes one process build
a template while the others wait. Tests of the migrations themselves still run the command.

The benchmarks migrate their databases with the command (``run_migrate``), as a user would; the tests that
run them set ``QUOTA_TEST_MIGRATE_FROM_TEMPLATE=1`` (``benchmark_env()``), and then ``run_migrate`` makes a
copy of the template instead: each command costs an Airflow start, about 6 CPU-seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = Path(sys.executable).parent / "airflow"
TEMPLATES = Path(tempfile.gettempdir()) / "airflow-quota-test-templates"
POSTGRES_SERVER = os.environ.get("QUOTA_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
#: Set to 1 in a benchmark's environment by the tests that run it: ``run_migrate`` copies the template.
MIGRATE_FROM_TEMPLATE = "QUOTA_TEST_MIGRATE_FROM_TEMPLATE"


def benchmark_env() -> dict[str, str]:
    """The environment of a benchmark the tests run: this one, its databases copies of the template."""
    return {**os.environ, MIGRATE_FROM_TEMPLATE: "1"}


def schema_digest() -> str:
    """What decides the schema ``airflow db migrate`` makes: Airflow's version, the ledger's models (a new
    database is created from them), its DB manager and its migrations."""
    digest = hashlib.sha256(version("apache-airflow-core").encode())
    ledger = ROOT / "airflow_quota" / "ledger"
    schema_files = [ledger / "models.py", ledger / "db.py", ledger / "alembic.ini"]
    for path in schema_files + sorted((ledger / "migrations").rglob("*.py")):
        digest.update(path.relative_to(ledger).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _template_lock(name: str) -> Iterator[None]:
    TEMPLATES.mkdir(exist_ok=True)
    with (TEMPLATES / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_migrate(url: str, home: Path) -> None:
    """Run ``airflow db migrate`` on ``url``, as a user would; fail with its output if it fails. Under
    ``QUOTA_TEST_MIGRATE_FROM_TEMPLATE=1`` the fresh database at ``url`` becomes a copy of the template
    instead (``migrate_fresh``: what the command would have made of it)."""
    if os.environ.get(MIGRATE_FROM_TEMPLATE) == "1":
        migrate_fresh(url)
        return
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    result = subprocess.run(
        [str(AIRFLOW), "db", "migrate"], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if result.returncode != 0:
        output = result.stdout[-3000:] + result.stderr[-3000:]
        raise AssertionError(f"airflow db migrate failed on {url}:\n{output}")


def migrate_fresh(url: str) -> None:
    """Make the fresh, empty database at ``url`` what ``airflow db migrate`` would make of it: a copy of the
    template (SQLite: the file is written; PostgreSQL: the database is dropped and created again from it)."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        assert parsed.database, f"an SQLite URL without a file: {url}"
        path = Path(parsed.database)
        if path.exists() and path.stat().st_size > 0:
            raise AssertionError(f"{path} is not a fresh database; migrate_fresh would overwrite it")
        copy_migrated_sqlite(path)
        return
    server = parsed.set(database="postgres")
    postgres_admin(server, f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
    create_migrated_postgres(server, str(parsed.database))


def copy_migrated_sqlite(target: Path) -> None:
    """Write a migrated SQLite database to ``target`` (a file that does not exist yet)."""
    name = f"sqlite-{schema_digest()}"
    template = TEMPLATES / f"{name}.db"
    with _template_lock(name):
        if not template.exists():
            with tempfile.TemporaryDirectory(dir=TEMPLATES) as building:
                database = Path(building) / "airflow.db"
                run_migrate(f"sqlite:///{database}", Path(building))
                database.replace(template)
    shutil.copyfile(template, target)


def create_migrated_postgres(server: sa.URL, name: str) -> None:
    """Create the PostgreSQL database ``name`` on ``server`` (its ``postgres`` database URL), migrated."""
    template = f"quota_template_{schema_digest()}"
    with _template_lock(template):
        if not _postgres_database_exists(server, template):
            building = f"{template}_building"
            postgres_admin(server, f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
            postgres_admin(server, f'CREATE DATABASE "{building}"')
            with tempfile.TemporaryDirectory() as home:
                url = server.set(database=building).render_as_string(hide_password=False)
                run_migrate(url, Path(home))
            postgres_admin(server, f'ALTER DATABASE "{building}" RENAME TO "{template}"')
        # Under the lock: PostgreSQL refuses to copy a template while another session is connected to it.
        postgres_admin(server, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')


def postgres_server_or_skip() -> sa.URL:
    """The PostgreSQL server's ``postgres`` database URL (``QUOTA_TEST_POSTGRES``, default 127.0.0.1:5432).
    A test skips, saying why, only when it cannot be reached, and fails instead under CI (``CI=true``),
    where it must be there."""
    server = sa.make_url(POSTGRES_SERVER).set(drivername="postgresql+psycopg2", database="postgres")
    try:
        postgres_admin(server, "SELECT 1")
    except Exception as error:  # any failure to connect means: no server to test against
        cause = str(error).strip().splitlines()[0]
        reason = f"PostgreSQL is not reachable at {POSTGRES_SERVER} (set QUOTA_TEST_POSTGRES): {cause}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return server


def postgres_admin(server: sa.URL, statement: str) -> None:
    """Run one statement on the server's ``postgres`` database, outside a transaction."""
    engine = sa.create_engine(
        server, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5}, poolclass=sa.NullPool
    )
    try:
        with engine.connect() as connection:
            connection.execute(sa.text(statement))
    finally:
        engine.dispose()


@contextlib.contextmanager
def scratch_postgres_url(prefix: str) -> Iterator[str]:
    """The URL of a database named ``prefix`` and a random suffix on the tests' PostgreSQL server (skipped,
    saying why, when none is reachable), dropped when the context exits. It does not exist yet:
    ``migrate_fresh`` makes it, a copy of the migrated template."""
    server = postgres_server_or_skip()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        postgres_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _postgres_database_exists(server: sa.URL, name: str) -> bool:
    engine = sa.create_engine(server, connect_args={"connect_timeout": 5}, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            row = connection.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
            return row.first() is not None
    finally:
        engine.dispose()


def airflow_engine(url: str) -> sa.Engine:
    """An engine made as Airflow makes its own (``settings.prepare_engine_args``): on PostgreSQL with
    psycopg2, the UPDATEs of many rows go in batches, as in a scheduler. The benchmarks time the allocator
    on it."""
    from airflow import settings

    configured = settings.SQL_ALCHEMY_CONN
    settings.SQL_ALCHEMY_CONN = url  # the function picks the dialect's defaults by this setting
    try:
        arguments = settings.prepare_engine_args()
    finally:
        settings.SQL_ALCHEMY_CONN = configured
    return sa.create_engine(url, **arguments)
