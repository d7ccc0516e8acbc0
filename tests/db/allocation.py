"""What an allocation-cycle test on one job queue writes and runs: a task instance DEFERRED on the admission
trigger, as Airflow leaves one, and one cycle in its own transaction (``test_allocator_cycle``,
``test_allocator_aws_batch``). Imports Airflow: import it once ``AIRFLOW_HOME`` is set."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow_quota.allocator.cycle import CycleReport, run_allocation_cycle
from airflow_quota.triggers.admission import QuotaAdmissionTrigger
from tests.db.conftest import Database
from tests.db.metadata_rows import insert_deferred_task

QUEUE = "gpu-training"
DAG_ID = "train"
RUN_ID = "run-1"
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def defer(
    db: Database,
    task_id: str,
    *,
    priority: int = 0,
    gpus: int = 1,
    pid: int | None = None,
    deferred_at: datetime = START,
    plain_json: bool = False,
    trigger_id: int | None = None,
    **request: Any,
) -> str:
    """Write a task instance of team ``team-a`` DEFERRED on the admission trigger for ``gpus`` x ``gpu`` of
    ``QUEUE`` (``request`` overrides the trigger's kwargs); return its job id."""
    kwargs = (
        QuotaAdmissionTrigger(
            job_queue=QUEUE,
            job_name=task_id,
            quota_share_name="team-a",
            capacity_unit="gpu",
            instance_count=gpus,
            scheduling_priority=priority,
            submitted_at=deferred_at.isoformat(),
        ).serialize()[1]
        | request
    )
    with db.session() as session, session.begin():
        return insert_deferred_task(
            session,
            kwargs,
            dag_id=DAG_ID,
            run_id=RUN_ID,
            task_id=task_id,
            deferred_at=deferred_at,
            pid=pid,
            next_kwargs={"round": 1},
            plain_json=plain_json,
            trigger_id=trigger_id,
        )


def cycle(db: Database, now: datetime) -> CycleReport:
    """One allocation cycle at ``now``, committed."""
    with db.session() as session, session.begin():
        return run_allocation_cycle(session, now)
