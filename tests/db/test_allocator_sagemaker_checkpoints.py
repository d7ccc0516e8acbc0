"""SageMaker checkpoint reports (issue 37): the allocator's host lists a running SageMaker training job's
checkpoint prefix after a cycle commits, at most once per ``checkpoint_listing_interval``, and the next
cycle copies the newest object's LastModified to ``quota_job.last_checkpoint_at``; a preemption's lost work
counts from it. An S3 error leaves the job running and the last value kept.

Real parts: the migrated Airflow metadata DB (SQLite and PostgreSQL) as the other allocator tests, and
moto's server on 127.0.0.1 (tests/sagemaker's session fixture) for SageMaker's training job and S3's
objects, reached through the ``aws_default`` connection the task's record names. S3 stamps
``LastModified`` with the real clock, to the second, so the cycles here run at real times: the grant a
few seconds before the first object, the later cycles after it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_quota.allocator.checkpoints import SageMakerCheckpoints, list_checkpoints
from airflow_quota.allocator.cycle import CycleReport, request_stops, run_allocation_cycle
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.backends.sagemaker import SageMakerTrainingJobs, build_request
from airflow_quota.ledger.models import AuditKind, AuditRow, JobRow
from airflow_quota.operators.sagemaker_backend import job_state
from airflow_quota.protocol import TRAINING_JOB_KEY
from tests.db.allocation import defer
from tests.db.conftest import Database
from tests.db.test_allocator_cycle import db
from tests.db.test_allocator_lifecycle import defer_on_monitor, store_set, teams
from tests.sagemaker.conftest import _cheaper_aws_clients, training_request, unique
from tests.sagemaker.moto_fixture import MotoServer
from tests.sagemaker.moto_process import REGION

pytestmark = pytest.mark.db

__all__ = ["_cheaper_aws_clients", "db", "teams", "unique"]  # the fixtures borrowed

INTERVAL = timedelta(seconds=30)


@pytest.fixture
def settings() -> CycleSettings:
    """A host's settings: its memory of checkpoints kept across its cycles, listed every 30 s at most."""
    return CycleSettings(sagemaker_checkpoints=SageMakerCheckpoints(), checkpoint_listing_interval=INTERVAL)


@pytest.fixture
def bucket(moto_server: MotoServer, unique: str) -> Iterator[str]:
    name = f"checkpoints-{unique}"
    moto_server.client("s3").create_bucket(Bucket=name)
    yield name


def hosted_cycle(db: Database, now: datetime, settings: CycleSettings) -> CycleReport:
    """One cycle as ``allocator.host.run_cycle`` runs it: committed, then the stops asked and the
    checkpoint prefixes listed."""
    with db.session() as session, session.begin():
        report = run_allocation_cycle(session, now, settings)
    request_stops(report, settings)
    list_checkpoints(report, settings)
    return report


def whole_second(at: datetime) -> datetime:
    return at.replace(microsecond=0)


def launch_training_job(db: Database, job_id: str, bucket: str, unique: str) -> dict[str, Any]:
    """The granted task ``train`` created its SageMaker training job on moto's server (checkpoint prefix
    in ``bucket``), recorded it as the operator does, and deferred on its monitoring trigger."""
    jobs = SageMakerTrainingJobs("aws_default", REGION)
    name = f"ckpt-{unique}-a1"
    request = build_request(
        training_request(duration_s=3600), name=name, checkpoint_uri=f"s3://{bucket}/run/", tags={}
    )
    description, created = jobs.launch(request)
    assert created
    state = job_state(name, description)
    assert state.checkpoint_uri == f"s3://{bucket}/run/"  # what the operator records, from the description
    record = {
        "backend": "sagemaker",
        "name": name,
        "attempt": 1,
        "lease_id": f"{job_id}#1",
        "state": "launched",
        "aws_conn_id": "aws_default",
        "region_name": REGION,
        "arn": state.arn,
        "checkpoint_uri": state.checkpoint_uri,
    }
    store_set(db, "train", TRAINING_JOB_KEY, record)
    defer_on_monitor(db, "train")
    return record


def save_checkpoint(moto_server: MotoServer, bucket: str, key: str) -> datetime:
    """The training saved ``key`` under its prefix (SageMaker copied it to S3): its LastModified."""
    s3 = moto_server.client("s3")
    s3.put_object(Bucket=bucket, Key=key, Body=b"weights")
    modified: datetime = s3.head_object(Bucket=bucket, Key=key)["LastModified"]
    return modified.astimezone(UTC)


def last_checkpoint_at(db: Database, job_id: str) -> datetime | None:
    with db.session() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        return row.last_checkpoint_at


def training_status(moto_server: MotoServer, name: str) -> str:
    return str(moto_server.client().describe_training_job(TrainingJobName=name)["TrainingJobStatus"])


def running_with_a_checkpoint(
    db: Database, settings: CycleSettings, moto_server: MotoServer, bucket: str, unique: str
) -> tuple[str, dict[str, Any], datetime, datetime]:
    """Grant ``train`` 2 GPUs of team-a, launch its training job, list its empty prefix, save a checkpoint,
    and run cycles until the ledger has it: (job id, record, the checkpoint's time, the last cycle's time)."""
    granted_at = whole_second(datetime.now(UTC)) - timedelta(seconds=5)
    job_id = defer(db, "train", gpus=2, quota_share_name="team-a")
    assert [lease.job_id for lease in hosted_cycle(db, granted_at, settings).granted] == [job_id]
    record = launch_training_job(db, job_id, bucket, unique)

    first = hosted_cycle(db, granted_at + timedelta(seconds=1), settings)  # RUNNING; its empty prefix listed
    assert [listing.job_id for listing in first.checkpoint_listings] == [job_id]
    assert last_checkpoint_at(db, job_id) is None

    saved = save_checkpoint(moto_server, bucket, "run/step-100/model.pt")
    assert saved > granted_at
    not_due = max(granted_at + timedelta(seconds=2), saved + timedelta(seconds=1))
    assert not_due - (granted_at + timedelta(seconds=1)) < INTERVAL
    hosted_cycle(db, not_due, settings)  # listed 1 s ago: not listed again yet
    hosted_cycle(db, not_due + timedelta(seconds=1), settings)
    assert last_checkpoint_at(db, job_id) is None

    due = max(granted_at + timedelta(seconds=1) + INTERVAL, not_due + timedelta(seconds=2))
    hosted_cycle(db, due, settings)  # listed now: found for the next cycle
    hosted_cycle(db, due + timedelta(seconds=1), settings)
    assert last_checkpoint_at(db, job_id) == saved
    return job_id, record, saved, due + timedelta(seconds=1)


def test_the_ledger_follows_the_newest_checkpoint_and_a_preemption_counts_its_loss_from_it(
    teams: Database, settings: CycleSettings, moto_server: MotoServer, bucket: str, unique: str
) -> None:
    db = teams
    job_id, record, first, now = running_with_a_checkpoint(db, settings, moto_server, bucket, unique)

    newer = save_checkpoint(moto_server, bucket, "run/step-200/model.pt")
    save_checkpoint(moto_server, bucket, "run/step-300/model.pt.tmp")  # being written: does not count
    assert newer >= first
    now = max(now + INTERVAL, newer + timedelta(seconds=1))
    hosted_cycle(db, now, settings)
    now += timedelta(seconds=1)
    hosted_cycle(db, now, settings)
    assert last_checkpoint_at(db, job_id) == newer

    preemptor = defer(db, "preemptor", gpus=2, priority=10, quota_share_name="team-a", deferred_at=now)
    decided_at = now + timedelta(seconds=10)
    report = hosted_cycle(db, decided_at, settings)

    assert report.preempted == {preemptor: [job_id]}
    with db.session() as session:
        row = session.scalars(
            sa.select(AuditRow).where(AuditRow.kind == AuditKind.PREEMPTED.value, AuditRow.job_id == job_id)
        ).one()
    expected = 2 * (decided_at - newer).total_seconds()
    assert row.details is not None
    assert (row.details["lostUnitSeconds"], row.details["lostSince"]) == (expected, "checkpoint")
    assert "since its last checkpoint" in row.message
    # The host asked SageMaker to stop the victim's training job after the commit; being stopped, its
    # prefix is listed no more (its loss is counted already).
    assert training_status(moto_server, record["name"]) in ("Stopping", "Stopped")
    assert hosted_cycle(db, decided_at + timedelta(seconds=1), settings).checkpoint_listings == []


def test_an_s3_error_leaves_the_job_running_and_its_last_checkpoint_kept(
    teams: Database,
    settings: CycleSettings,
    moto_server: MotoServer,
    bucket: str,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = teams
    job_id, record, saved, now = running_with_a_checkpoint(db, settings, moto_server, bucket, unique)
    s3 = moto_server.client("s3")
    s3.delete_object(Bucket=bucket, Key="run/step-100/model.pt")
    s3.delete_bucket(Bucket=bucket)

    caplog.set_level(logging.INFO, logger="airflow_quota.allocator.checkpoints")
    for _ in range(2):  # listed twice, failing twice: logged once
        now += INTERVAL
        report = hosted_cycle(db, now, settings)
        assert report.failed_queues == {}
        assert [listing.job_id for listing in report.checkpoint_listings] == [job_id]

    warnings = [each for each in caplog.records if each.levelno == logging.WARNING]
    assert len(warnings) == 1, caplog.text
    assert "NoSuchBucket" in warnings[0].getMessage() and record["name"] in warnings[0].getMessage()
    with db.session() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        assert (row.status, row.last_checkpoint_at, row.held_instance_count) == ("RUNNING", saved, 2)
    assert training_status(moto_server, record["name"]) == "InProgress"

    s3.create_bucket(Bucket=bucket)  # the bucket is back: listed again at the next interval
    newer = save_checkpoint(moto_server, bucket, "run/step-400/model.pt")
    now = max(now + INTERVAL, newer + timedelta(seconds=1))
    hosted_cycle(db, now, settings)
    hosted_cycle(db, now + timedelta(seconds=1), settings)
    assert last_checkpoint_at(db, job_id) == newer
    assert "can be listed again" in caplog.text
