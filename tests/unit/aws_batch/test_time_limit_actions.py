"""A job queue's ``jobStateTimeLimitActions`` (issue 35): in the quota file in AWS's names, checked with
clear errors, and kept through export and import."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_quota.aws_batch.design import import_design
from airflow_quota.aws_batch.export import export_design, export_issues
from airflow_quota.engine.config import QuotaConfigError, parse_quota_config
from tests.unit.aws_batch.test_scheduler_field import quota_file

ACTION: dict[str, Any] = {
    "reason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
    "state": "RUNNABLE",
    "maxTimeSeconds": 14_400,
    "action": "TERMINATE",
}


def test_export_writes_the_actions_and_import_keeps_them() -> None:
    config = parse_quota_config(quota_file(jobStateTimeLimitActions=[ACTION]), "quotas.yaml")
    bundle = export_design(config)

    assert bundle["jobQueues"][0]["jobStateTimeLimitActions"] == [ACTION]
    assert export_issues(bundle) == []  # botocore's CreateJobQueue validator takes it
    imported = import_design([("aws.json", bundle)])
    assert imported.config == config
    assert imported.document["jobQueues"][0]["jobStateTimeLimitActions"] == [ACTION]
    assert imported.notes == []


def test_a_file_without_actions_exports_none() -> None:
    bundle = export_design(parse_quota_config(quota_file(), "quotas.yaml"))
    assert "jobStateTimeLimitActions" not in bundle["jobQueues"][0]


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("maxTimeSeconds", 599, "from 600 to 86400"),
        ("maxTimeSeconds", 86_401, "from 600 to 86400"),
        ("action", "CANCEL", "it must be TERMINATE (the only action AWS Batch takes on a SAGEMAKER_TRAINING"),
        ("state", "RUNNING", "it must be RUNNABLE"),
        ("reason", "waiting", "one of CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"),
    ],
)
def test_a_wrong_action_is_refused_at_its_field(field: str, value: object, says: str) -> None:
    with pytest.raises(QuotaConfigError) as raised:
        parse_quota_config(quota_file(jobStateTimeLimitActions=[{**ACTION, field: value}]), "quotas.yaml")
    message = str(raised.value)
    assert f"jobQueues[0].jobStateTimeLimitActions[0].{field}:" in message
    assert says in message
