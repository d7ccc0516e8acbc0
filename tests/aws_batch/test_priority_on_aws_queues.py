"""``airflow quota jobs update-priority`` on a job of a queue AWS Batch schedules: the change reaches AWS
Batch (UpdateServiceJob, on the emulator) and is audited in the ledger; the job the ledger does not hold is
found by its service job id or its job name, and a finished or unknown one is refused saying why.

The commands run in this process through Airflow's CLI parser (``tests/cli/in_process.py``) on a migrated
metadata DB (SQLite and PostgreSQL), with the Airflow connection ``aws_default`` on the emulator.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from airflow_quota.engine.config import parse_quota_config
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.models import AuditRow, ledger_metadata
from tests.aws_batch.conftest import create_design, quota_file, share, submit
from tests.aws_batch.test_emulator import status, wait_for
from tests.cli.in_process import run_quota
from tests.db.conftest import Database
from tests.db.conftest import database as database
from tests.db.conftest import migrated as migrated

pytestmark = pytest.mark.db


def applied_aws_queue(batch: Any, migrated: Database, name: str, research: dict[str, Any]) -> str:
    """A queue ``name`` of one instance AWS Batch schedules with the one quota share ``research``, created in
    the emulator and applied in an emptied ledger (which holds no job)."""
    document = quota_file(name, 1, research)
    create_design(batch, document)
    document["jobQueues"][0]["scheduler"] = "AWS_BATCH"
    with migrated.engine.begin() as connection:
        for table in reversed(ledger_metadata.sorted_tables):
            connection.execute(table.delete())
    with migrated.session() as session, session.begin():
        apply_quota_config(session, parse_quota_config(document, "quotas.yaml"), applied_by="t", source="q")
    return name


@pytest.fixture
def aws_queue(batch: Any, unique: str, migrated: Database) -> str:
    """A queue of one instance AWS Batch schedules, in the emulator and applied in the ledger."""
    return applied_aws_queue(batch, migrated, f"gpu-{unique}", share("research", "RESERVE", 1))


def front_of_share(batch: Any, queue: str) -> str:
    snapshot = batch.get_job_queue_snapshot(jobQueue=queue)
    (front,) = snapshot["frontOfQuotaShares"]["quotaShares"]["research"]
    return str(front["jobArn"]).rsplit("/", 1)[-1]


def test_a_priority_change_reaches_aws_batch_and_is_audited(
    batch: Any, aws_queue: str, migrated: Database
) -> None:
    running = submit(batch, aws_queue, "running", "research", 1, duration_s="120")
    wait_for("the first job to run", lambda: status(batch, running) == "RUNNING")
    early = submit(batch, aws_queue, "early", "research", 1)
    late = submit(batch, aws_queue, "late", "research", 1)
    assert front_of_share(batch, aws_queue) == early

    changed = run_quota(["jobs", "update-priority", late, "50"], migrated.engine)

    assert changed.returncode == 0, changed.stderr
    assert f"Service job {late} (late, job queue {aws_queue}, scheduled by AWS Batch)" in changed.stdout
    assert "schedulingPriority 0 -> 50 (sent to AWS Batch" in changed.stdout
    assert batch.describe_service_job(jobId=late)["schedulingPriority"] == 50
    assert front_of_share(batch, aws_queue) == late  # AWS Batch's order moved
    with migrated.session() as session:
        audit = session.scalars(sa.select(AuditRow).where(AuditRow.job_id == late)).one()
    assert (audit.kind, audit.job_queue_name) == ("PRIORITY_CHANGED", aws_queue)
    assert audit.quota_share_name == "research"
    assert audit.details == {
        "old": 0,
        "new": 50,
        "serviceJobArn": batch.describe_service_job(jobId=late)["jobArn"],
    }

    by_name = run_quota(["jobs", "update-priority", "early", "60"], migrated.engine)
    assert by_name.returncode == 0, by_name.stderr
    assert front_of_share(batch, aws_queue) == early


def test_an_unknown_or_finished_service_job_is_refused_saying_why(
    batch: Any, aws_queue: str, migrated: Database
) -> None:
    done = submit(batch, aws_queue, "done", "research", 1, duration_s="0.2")
    wait_for("the job to succeed", lambda: status(batch, done) == "SUCCEEDED", timeout_s=60)

    finished = run_quota(["jobs", "update-priority", done, "5"], migrated.engine)
    unknown = run_quota(["jobs", "update-priority", "nobody", "5"], migrated.engine)

    assert finished.returncode == 1
    refusal = f"service job {done} has already finished (SUCCEEDED): cannot change its priority"
    assert refusal in finished.stderr
    assert unknown.returncode == 1
    assert (
        f"no job nobody is in the quota ledger, nor in the job queues AWS Batch schedules ({aws_queue})"
        in unknown.stderr
    )
    with migrated.session() as session:
        assert session.scalars(sa.select(AuditRow).where(AuditRow.kind == "PRIORITY_CHANGED")).all() == []
