"""The allocator copies a training's checkpoint report to the ledger (issue 37): the ``last_checkpoint`` of
the task's training job record for the job's current lease becomes ``quota_job.last_checkpoint_at``, and a
preemption's PREEMPTED audit row then counts the work lost from it. SQLite and PostgreSQL, with Airflow's
own tables (the task's ``task_state_store``), as the other allocator tests."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from airflow_quota.ledger.models import AuditKind, AuditRow, JobRow
from airflow_quota.protocol import TRAINING_JOB_KEY
from tests.db.airflow_transitions import a_scheduler_job, run_in_worker
from tests.db.allocation import defer
from tests.db.conftest import Database
from tests.db.test_allocator_cycle import db
from tests.db.test_allocator_lifecycle import at, cycle, store_set, teams

pytestmark = pytest.mark.db

__all__ = ["db", "teams"]  # the fixtures this module borrows

VICTIMS = ("victim-1", "victim-2")


def test_a_recorded_checkpoint_reaches_the_ledger_and_the_preemptions_lost_work(teams: Database) -> None:
    db = teams
    victims = [
        defer(db, task_id, gpus=1, quota_share_name="team-a", capacity_unit="local-gpu")
        for task_id in VICTIMS
    ]
    assert sorted(lease.job_id for lease in cycle(db, 1).granted) == sorted(victims)
    scheduler = a_scheduler_job(db.engine)
    checkpoints = {victims[0]: at(1.5).isoformat(), victims[1]: None}  # the second never checkpointed
    for task_id, job_id in zip(VICTIMS, victims, strict=True):
        run_in_worker(db.engine, task_id, scheduler)
        record = {"backend": "local", "name": f"{task_id}-a1", "attempt": 1, "lease_id": f"{job_id}#1"}
        if checkpoints[job_id]:
            record["last_checkpoint"] = checkpoints[job_id]
        store_set(db, task_id, TRAINING_JOB_KEY, record | {"state": "launched", "grace_period": 60.0})
    cycle(db, 2)

    with db.session() as session:
        kept = {row.job_id: row.last_checkpoint_at for row in session.scalars(sa.select(JobRow))}
    assert kept[victims[0]] == at(1.5) and kept[victims[1]] is None

    preemptor = defer(
        db,
        "preemptor",
        gpus=2,
        priority=10,
        quota_share_name="team-a",
        capacity_unit="local-gpu",
        deferred_at=at(3),
    )
    assert sorted(cycle(db, 3).preempted[preemptor]) == sorted(victims)

    with db.session() as session:
        rows = session.scalars(sa.select(AuditRow).where(AuditRow.kind == AuditKind.PREEMPTED.value))
        lost = {row.job_id: (row.details or {}).get("lostUnitSeconds") for row in rows}
    assert lost == {victims[0]: 1.5, victims[1]: 2.0}  # 1 GPU x (3 - 1.5) s; 1 GPU x (3 - 1) s
