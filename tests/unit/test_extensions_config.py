"""The quota file's ``extensions:`` block of a share (issue 37): validated with clear errors, refused on a
job queue AWS Batch schedules, and left out of ``export`` with a note."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_quota.aws_batch.export import export_design
from airflow_quota.cli.aws_design import run_export
from airflow_quota.engine.config import QuotaConfigError, parse_quota_config
from airflow_quota.engine.model import PreemptAtCheckpoint


def document(extensions: object = None, scheduler: str | None = None) -> dict[str, Any]:
    share: dict[str, Any] = {
        "quotaShareName": "a",
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 4}],
        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW"},
    }
    if extensions is not None:
        share["extensions"] = extensions
    queue: dict[str, Any] = {
        "jobQueueName": "q",
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 4}],
        "quotaShares": [share],
    }
    if scheduler is not None:
        queue["scheduler"] = scheduler
    return {"jobQueues": [queue]}


def test_extensions_become_plain_fields_of_the_share() -> None:
    extensions = {
        "checkpointAwareVictims": "ENABLED",
        "minimumRunSeconds": 600,
        "starvationLimitSeconds": 3600,
    }
    (queue,) = parse_quota_config(document(extensions), "f").to_job_queues()

    share = queue.shares[0]
    assert (share.checkpoint_aware_victims, share.minimum_run_seconds, share.starvation_limit_seconds) == (
        True,
        600.0,
        3600.0,
    )


def test_without_the_block_every_option_is_off() -> None:
    share = parse_quota_config(document(), "f").to_job_queues()[0].shares[0]

    assert (share.checkpoint_aware_victims, share.minimum_run_seconds, share.starvation_limit_seconds) == (
        False,
        0.0,
        None,
    )


@pytest.mark.parametrize(
    ("extensions", "message"),
    [
        pytest.param(
            {"minimumRunSeconds": -5}, "minimumRunSeconds is -5: it must be a whole number", id="negative"
        ),
        pytest.param({"checkpointAwareVictims": True}, "it must be ENABLED or DISABLED", id="boolean"),
        pytest.param({"starvation": 60}, "did you mean starvationLimitSeconds?", id="unknown key"),
        pytest.param("on", "it must be a mapping with the keys checkpointAwareVictims", id="not a mapping"),
    ],
)
def test_a_wrong_extension_says_what_it_must_be(extensions: object, message: str) -> None:
    with pytest.raises(QuotaConfigError) as raised:
        parse_quota_config(document(extensions), "f")

    assert message in str(raised.value)
    assert "jobQueues[0].quotaShares[0].extensions" in str(raised.value)


def test_a_queue_aws_batch_schedules_refuses_extensions() -> None:
    with pytest.raises(QuotaConfigError) as raised:
        parse_quota_config(document({"minimumRunSeconds": 60}, scheduler="AWS_BATCH"), "f")

    assert "scheduled by AWS Batch (scheduler: AWS_BATCH), which has none of our extensions" in str(
        raised.value
    )


def test_export_leaves_extensions_out_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "quotas.yaml"
    path.write_text(yaml.safe_dump(document({"starvationLimitSeconds": 3600})))

    assert run_export([str(path)], region="us-east-1", account_id="123456789012") == 0

    printed = capsys.readouterr()
    assert "extensions" not in json.loads(printed.out)["quotaShares"][0]
    assert "not kept:" in printed.err and "extensions are ours, not AWS Batch's" in printed.err
    assert "extensions" not in json.dumps(
        export_design(parse_quota_config(document({"minimumRunSeconds": 1}), "f"))
    )


AT_CHECKPOINT = {"checkpointIntervalSeconds": 900, "maximumWaitSeconds": 600}


def test_preempt_at_checkpoint_becomes_the_shares_setting_with_a_30_second_margin() -> None:
    extensions = {"preemptAtCheckpoint": AT_CHECKPOINT}
    share = parse_quota_config(document(extensions), "f").to_job_queues()[0].shares[0]

    assert share.preempt_at_checkpoint == PreemptAtCheckpoint(900.0, 600.0, 30.0)
    assert parse_quota_config(document(), "f").to_job_queues()[0].shares[0].preempt_at_checkpoint is None


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        pytest.param(
            {"maximumWaitSeconds": 600},
            "checkpointIntervalSeconds is missing: add checkpointIntervalSeconds, a whole number of seconds "
            "from 1",
            id="no interval",
        ),
        pytest.param(
            {**AT_CHECKPOINT, "checkpointIntervalSeconds": 0},
            "checkpointIntervalSeconds is 0: it must be a whole number of seconds from 1",
            id="zero interval",
        ),
        pytest.param(
            {**AT_CHECKPOINT, "marginSeconds": 900},
            "marginSeconds (900) must be less than checkpointIntervalSeconds (900)",
            id="margin not below the interval",
        ),
        pytest.param(
            {**AT_CHECKPOINT, "maximumWait": 60}, "did you mean maximumWaitSeconds?", id="unknown key"
        ),
        pytest.param(
            "ENABLED",
            "it must be a mapping with the keys checkpointIntervalSeconds, maximumWaitSeconds, marginSeconds",
            id="not a mapping",
        ),
    ],
)
def test_a_wrong_preempt_at_checkpoint_says_what_it_must_be(setting: object, message: str) -> None:
    with pytest.raises(QuotaConfigError) as raised:
        parse_quota_config(document({"preemptAtCheckpoint": setting}), "f")

    assert message in str(raised.value)
    assert "jobQueues[0].quotaShares[0].extensions.preemptAtCheckpoint" in str(raised.value)


def test_a_queue_aws_batch_schedules_refuses_preempt_at_checkpoint() -> None:
    with pytest.raises(QuotaConfigError) as raised:
        parse_quota_config(document({"preemptAtCheckpoint": AT_CHECKPOINT}, scheduler="AWS_BATCH"), "f")

    assert "which has none of our extensions" in str(raised.value)


def test_export_leaves_preempt_at_checkpoint_out_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "quotas.yaml"
    path.write_text(yaml.safe_dump(document({"preemptAtCheckpoint": AT_CHECKPOINT})))

    assert run_export([str(path)], region="us-east-1", account_id="123456789012") == 0

    printed = capsys.readouterr()
    assert "preemptAtCheckpoint" not in printed.out and "extensions" not in printed.out
    assert "extensions are ours, not AWS Batch's" in printed.err
