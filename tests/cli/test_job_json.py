"""The CLI's job JSON (``airflow quota jobs list|describe -o json``, ``cli.jobs.job_report``) names AWS
Batch's fields as the REST API's ``Job`` does (``ledger.aws_job_fields`` builds them for both)."""

from __future__ import annotations

from airflow_quota.api import schemas
from airflow_quota.cli.jobs import job_report
from airflow_quota.ledger.aws_job_fields import aws_job_fields
from airflow_quota.ledger.views import AttemptTimes, PreemptionNote
from tests.cli.test_cli_widths import BORROWER_ID, STARTED, STOPPED, finished_job_report, job_row


def test_a_finished_job_keeps_when_its_last_attempt_was_scheduled_started_and_stopped() -> None:
    row = job_row(BORROWER_ID, "SUCCEEDED", "Its task succeeded")

    report = finished_job_report(row)

    # startedAt is scheduledAt: the ledger keeps when an attempt was granted, not when it began RUNNING.
    assert (report["scheduledAt"], report["startedAt"], report["stoppedAt"]) == (
        STARTED.isoformat(),
        STARTED.isoformat(),
        STOPPED.isoformat(),
    )
    assert report["capacityUsage"] == []
    assert "preemptedAttemptCount" not in report and "recentPreemptedAttempts" not in report


def test_job_json_names_aws_batch_fields_as_the_rest_api_does() -> None:
    arn = "arn:aws:sagemaker:us-east-1:123456789012:training-job/train-trial-a1"
    row = job_row(BORROWER_ID, "RUNNING", "")
    row.held_capacity_unit, row.held_instance_count = "ml.p4d.24xlarge", 6
    first = row.recent_preempted_attempts[0]
    row.recent_preempted_attempts = [
        first,
        {"serviceResourceId": {"name": "TrainingJobArn", "value": arn}, **first, "attempt": 2},
    ]
    preemption = PreemptionNote(first["preemptedBy"], STOPPED, "RECLAIM", "preempted")

    fields = aws_job_fields(row, AttemptTimes(STARTED, None), preemption, iso_times=True)
    report = job_report(row, {}, fields, detailed=False)

    assert report["capacityUsage"] == [{"capacityUnit": "ml.p4d.24xlarge", "quantity": 6}]
    summary = report["preemptionSummary"]
    # The REST Job's preemptionSummary: the same fields, in the same order, each present.
    assert list(summary) == list(schemas.PreemptionSummary.model_fields)
    assert [list(attempt) for attempt in summary["recentPreemptedAttempts"]] == [
        list(schemas.PreemptedAttempt.model_fields)
    ] * 2
    assert [a["serviceResourceId"] for a in summary["recentPreemptedAttempts"]] == [
        None,  # the task did not report the attempt's training job ARN
        {"name": "TrainingJobArn", "value": arn},
    ]
    assert (summary["preemptedAttemptCount"], summary["lastPreemptedAt"], summary["lastPreemptionRule"]) == (
        1,
        STOPPED.isoformat(),
        "RECLAIM",
    )
    assert schemas.PreemptionSummary.model_validate(summary).recentPreemptedAttempts[1].serviceResourceId
    assert set(schemas.Job.model_fields) >= {"scheduledAt", "startedAt", "stoppedAt", "capacityUsage"}
