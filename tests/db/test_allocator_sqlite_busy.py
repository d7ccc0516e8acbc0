"""SQLite's "database is locked" (another process, the api-server or the triggerer, holds its write lock)
is no failure of the allocator: a job queue's part that meets it is rolled back and tried again after a
short pause (``cycle.SQLITE_BUSY_PAUSES``), in a new transaction, and grants as if nothing happened;
only a lock that persists through every pause is logged, once, as a warning (no traceback, no error
line), and the part is left to the next cycle with the ledger as it was. The host's whole cycle does the
same (``host.run_cycle``). Any other error is still logged with its traceback.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from airflow_quota.allocator import cycle as cycle_module
from airflow_quota.allocator import host
from airflow_quota.allocator.cycle import run_allocation_cycle
from airflow_quota.allocator.report import CycleReport
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.engine.model import JobStatus
from tests.db.allocation import QUEUE, defer
from tests.db.conftest import Database
from tests.db.test_allocator_cycle import db, job
from tests.db.test_allocator_lifecycle import at

pytestmark = [pytest.mark.db, pytest.mark.parametrize("database", ["sqlite"], indirect=True)]
__all__ = ["db"]  # the fixture this module borrows

LOCKED = OperationalError("UPDATE quota_job ...", {}, sqlite3.OperationalError("database is locked"))


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda seconds: None)


def locked_for(monkeypatch: pytest.MonkeyPatch, times: int, error: Exception = LOCKED) -> list[int]:
    """``_allocate_queue`` meets ``error`` its first ``times`` calls; the calls, counted."""
    real = cycle_module._allocate_queue
    calls: list[int] = []

    def allocate(*args: Any) -> None:
        calls.append(len(calls))
        if len(calls) <= times:
            raise error
        real(*args)

    monkeypatch.setattr(cycle_module, "_allocate_queue", allocate)
    return calls


def hosted(db: Database, seconds: float) -> CycleReport:
    """A host's cycle: each job queue's part committed as it ends."""
    with Session(bind=db.engine, expire_on_commit=False) as session:
        return run_allocation_cycle(session, at(seconds), CycleSettings(), commit_each_queue=True)


def problems(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The allocator's warnings and errors (not Airflow's own, such as its Fernet key's)."""
    return [
        record
        for record in caplog.records
        if record.levelno >= logging.WARNING and record.name.startswith("airflow_quota")
    ]


@pytest.mark.parametrize("commit_each_queue", [True, False], ids=["host", "caller's transaction"])
def test_a_part_that_meets_a_locked_database_is_tried_again_and_grants_quietly(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, commit_each_queue: bool
) -> None:
    waiting = defer(db, "job0")
    calls = locked_for(monkeypatch, len(cycle_module.SQLITE_BUSY_PAUSES))

    with caplog.at_level(logging.INFO):
        if commit_each_queue:
            report = hosted(db, 1)
        else:
            with db.session() as session, session.begin():
                report = run_allocation_cycle(session, at(1), CycleSettings())

    assert len(calls) == len(cycle_module.SQLITE_BUSY_PAUSES) + 1
    assert report.failed_queues == {}
    assert [lease.job_id for lease in report.granted] == [waiting]
    assert job(db, waiting).status == JobStatus.SCHEDULED.value
    assert problems(caplog) == []


def test_a_lock_that_persists_is_one_warning_and_the_next_cycle_grants(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    waiting = defer(db, "job0")
    calls = locked_for(monkeypatch, 100)

    with caplog.at_level(logging.INFO):
        report = hosted(db, 1)

    assert len(calls) == len(cycle_module.SQLITE_BUSY_PAUSES) + 1
    assert list(report.failed_queues) == [QUEUE] and report.granted == []
    [warning] = problems(caplog)
    assert warning.levelno == logging.WARNING and warning.exc_info is None
    assert "stayed locked by another process" in warning.getMessage()
    assert "database is locked" in warning.getMessage()
    # Rolled back: the request is not even recorded; the next cycle, the lock gone, grants it.
    monkeypatch.undo()
    assert [lease.job_id for lease in hosted(db, 2).granted] == [waiting]


def test_any_other_error_is_still_logged_with_its_traceback_and_not_tried_again(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    defer(db, "job0")
    calls = locked_for(monkeypatch, 1, RuntimeError("a bug"))

    with caplog.at_level(logging.INFO):
        report = hosted(db, 1)

    assert len(calls) == 1 and list(report.failed_queues) == [QUEUE]
    [error] = problems(caplog)
    assert error.levelno == logging.ERROR and error.exc_info is not None


@pytest.fixture
def host_on(db: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """``host.run_cycle`` on ``db``, its cycle meeting a locked database at its commit the first times it
    runs (as many as the list it yields says, set by the test)."""
    monkeypatch.setattr(host, "_engine", lambda: db.engine)
    monkeypatch.setattr(host, "request_stops", lambda report, settings: None)
    monkeypatch.setattr(host, "emit_metrics", lambda report, seconds: None)
    locked_times = [0]
    real = run_allocation_cycle
    runs: list[int] = []

    def run(session: Session, now: datetime, settings: CycleSettings, **kwargs: Any) -> CycleReport:
        runs.append(len(runs))
        if len(runs) <= locked_times[0]:
            raise LOCKED
        return real(session, datetime.now(UTC), settings, **kwargs)

    monkeypatch.setattr(host, "run_allocation_cycle", run)
    yield locked_times
    assert runs


def test_the_hosts_cycle_is_tried_again_while_the_database_is_locked(
    db: Database, host_on: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    waiting = defer(db, "job0")
    host_on[0] = 2

    with caplog.at_level(logging.INFO):
        report = host.run_cycle(CycleSettings())

    assert report is not None and [lease.job_id for lease in report.granted] == [waiting]
    assert problems(caplog) == []

    host_on[0] = 100
    with caplog.at_level(logging.INFO):
        assert host.run_cycle(CycleSettings()) is None
    [warning] = problems(caplog)
    assert warning.levelno == logging.WARNING and "stayed locked" in warning.getMessage()
