"""Lost work in the ledger (issue 37): a training's checkpoint report lands in
``quota_job.last_checkpoint_at``, and each preemption's PREEMPTED audit row, and the preempted attempt it
completes, carry the GPU-seconds it lost (units x the time from the victim's last checkpoint in its attempt,
or its start, to the decision). On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from airflow_quota.engine.model import Preemption, PreemptionRule
from airflow_quota.ledger.lifecycle import record_checkpoint_report, record_stop_completed
from airflow_quota.ledger.models import AuditKind, ledger_metadata
from tests.db.conftest import Database
from tests.db.test_store import THREE_SHARES, Ledger, run

pytestmark = pytest.mark.db


@pytest.fixture(scope="module")
def tables(database: Database) -> Database:
    ledger_metadata.create_all(database.engine)
    return database


@pytest.fixture
def ledger(tables: Database) -> Iterator[Ledger]:
    with tables.engine.begin() as connection:
        for table in reversed(ledger_metadata.sorted_tables):
            connection.execute(table.delete())
    yield Ledger(tables)


def checkpoint(ledger: Ledger, job_id: str, at: datetime) -> None:
    ledger.event(lambda session, state, now: record_checkpoint_report(session, state, job_id, at, now))


def preempt_borrower(ledger: Ledger) -> datetime:
    """The lender's job arrives and preempts b1 (4 units, 2 borrowed); when the preemption was decided."""
    ledger.submit("l1", "lender", 2)
    plan = ledger.cycle()
    assert plan.decisions == (Preemption("l1", ("b1",), PreemptionRule.RECLAIM, "gpu"),)
    return ledger.now


def test_a_preemption_records_the_gpu_seconds_lost_since_the_last_checkpoint(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.submit("b1", "borrower", 4)
    ledger.cycle()
    started = ledger.now
    run(ledger, "b1")
    saved = started + timedelta(seconds=3, milliseconds=250)
    checkpoint(ledger, "b1", saved)
    checkpoint(ledger, "b1", saved - timedelta(seconds=1))  # an older report changes nothing
    checkpoint(ledger, "b1", started - timedelta(seconds=30))  # nor one from before this attempt
    assert ledger.job("b1").last_checkpoint_at == saved

    decided = preempt_borrower(ledger)

    [preempted] = ledger.audit(AuditKind.PREEMPTED)
    lost = round(4 * (decided - saved).total_seconds(), 1)
    assert lost > 0
    assert preempted.details is not None
    assert (preempted.details["lostUnitSeconds"], preempted.details["lostSince"]) == (lost, "checkpoint")
    assert preempted.message.endswith(f"it loses {lost:,.0f} GPU-seconds since its last checkpoint")

    ledger.event(lambda session, state, now: record_stop_completed(session, state, "b1", now))
    [attempt] = ledger.job("b1").recent_preempted_attempts
    assert attempt["lostUnitSeconds"] == lost


def test_a_job_that_never_checkpointed_loses_everything_since_its_start(ledger: Ledger) -> None:
    ledger.apply(THREE_SHARES)
    ledger.submit("b1", "borrower", 4)
    ledger.cycle()
    started = ledger.now
    run(ledger, "b1")

    decided = preempt_borrower(ledger)

    [preempted] = ledger.audit(AuditKind.PREEMPTED)
    assert preempted.details is not None
    assert preempted.details["lostUnitSeconds"] == round(4 * (decided - started).total_seconds(), 1)
    assert preempted.details["lostSince"] == "start"
    assert preempted.message.endswith("GPU-seconds since its start")
