"""Who schedules a job queue (``scheduler: AIRFLOW | AWS_BATCH``): validated, and carried through AWS
Batch's documents by the job queue's ``airflow-quota:scheduler`` tag."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_quota.aws_batch.design import SCHEDULER_TAG, import_design
from airflow_quota.aws_batch.export import export_design, export_issues
from airflow_quota.engine.config import QuotaConfigError, parse_quota_config

QUEUE: dict[str, Any] = {
    "jobQueueName": "gpu",
    "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 2}],
    "quotaShares": [
        {
            "quotaShareName": "team",
            "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 2}],
            "resourceSharingConfiguration": {"strategy": "RESERVE"},
            "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
        }
    ],
}


def quota_file(**queue_fields: Any) -> dict[str, Any]:
    return {"jobQueues": [{**copy.deepcopy(QUEUE), **queue_fields}]}


@pytest.mark.parametrize(
    ("fields", "scheduled_by"),
    [({}, "AIRFLOW"), ({"scheduler": "AIRFLOW"}, "AIRFLOW"), ({"scheduler": "AWS_BATCH"}, "AWS_BATCH")],
    ids=["default", "airflow", "aws batch"],
)
def test_a_job_queue_says_who_schedules_it(fields: dict[str, Any], scheduled_by: str) -> None:
    config = parse_quota_config(quota_file(**fields), "quotas.yaml")
    assert config.job_queues[0].scheduled_by == scheduled_by


@pytest.mark.parametrize("value", ["aws-batch", "AWS", "", 1, None])
def test_a_wrong_scheduler_is_refused_with_the_values_allowed(value: object) -> None:
    with pytest.raises(QuotaConfigError) as refused:
        parse_quota_config(quota_file(scheduler=value), "quotas.yaml")
    [issue] = refused.value.issues
    assert issue.path == "jobQueues[0].scheduler"
    assert (
        "it must be AIRFLOW (our allocator schedules this job queue; the default) or AWS_BATCH"
        in issue.message
    )


@pytest.mark.parametrize("scheduler", ["AIRFLOW", "AWS_BATCH"])
def test_export_tags_the_job_queue_and_import_reads_the_tag_back(scheduler: str) -> None:
    config = parse_quota_config(quota_file(scheduler=scheduler), "quotas.yaml")
    bundle = export_design(config)

    assert bundle["jobQueues"][0]["tags"] == {SCHEDULER_TAG: scheduler}
    assert export_issues(bundle) == []
    imported = import_design([("aws.json", bundle)])
    assert imported.config == config
    assert imported.notes == []


def test_a_file_that_does_not_say_exports_no_tag_and_stays_silent() -> None:
    config = parse_quota_config(quota_file(), "quotas.yaml")
    bundle = export_design(config)
    assert "tags" not in bundle["jobQueues"][0]
    imported = import_design([("aws.json", bundle)])
    assert imported.config == config and "scheduler" not in imported.document["jobQueues"][0]


def test_the_job_queues_other_tags_are_still_said_not_kept() -> None:
    bundle = export_design(parse_quota_config(quota_file(scheduler="AWS_BATCH"), "quotas.yaml"))
    bundle["jobQueues"][0]["tags"]["team"] = "platform"
    design = import_design([("aws.json", bundle)])
    assert design.config.job_queues[0].scheduled_by == "AWS_BATCH"
    assert [(note.path, note.message) for note in design.notes] == [
        ("jobQueues[0].tags", "the job queue's tags are not kept")
    ]


def test_a_wrong_tag_value_is_refused_at_the_tag() -> None:
    bundle = export_design(parse_quota_config(quota_file(), "quotas.yaml"))
    bundle["jobQueues"][0]["tags"] = {SCHEDULER_TAG: "kubernetes"}
    with pytest.raises(QuotaConfigError) as refused:
        import_design([("aws.json", bundle)])
    [issue] = refused.value.issues
    assert issue.path == f"jobQueues[0].tags.{SCHEDULER_TAG}"
    assert issue.message.startswith("scheduler is 'kubernetes': it must be AIRFLOW")
