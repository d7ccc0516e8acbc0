"""The answer checker finds what a client would trip over, by path, from botocore's own output shapes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.aws_batch.output_shapes import answer_problems

_JOB = {"jobId": "1", "jobName": "train", "jobQueue": "arn", "serviceJobType": "SAGEMAKER_TRAINING"}
_GOOD = {
    **_JOB,
    "status": "RUNNING",
    "startedAt": 1,
    "capacityUsage": [{"capacityUnit": "ml.g5.xlarge", "quantity": 2.0}],
}


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (
            {**_GOOD, "status": "PREEMPTED"},
            "DescribeServiceJob.status: 'PREEMPTED' is not one of ServiceJobStatus's values",
        ),
        (
            {k: v for k, v in _GOOD.items() if k != "startedAt"},
            "DescribeServiceJob.startedAt: required by DescribeServiceJobResponse but missing",
        ),
        ({**_GOOD, "startedAt": "1"}, "DescribeServiceJob.startedAt: '1' is not a long"),
        ({**_GOOD, "isTerminated": 1}, "DescribeServiceJob.isTerminated: 1 is not a boolean"),
        (
            {**_GOOD, "schedulingPriority": True},
            "DescribeServiceJob.schedulingPriority: True is not a integer",
        ),
        (
            {**_GOOD, "capacityUsage": {"capacityUnit": "x"}},
            "DescribeServiceJob.capacityUsage: {'capacityUnit': 'x'} is not a list",
        ),
        (
            {**_GOOD, "preempted": 1},
            "DescribeServiceJob.preempted: not a member of DescribeServiceJobResponse",
        ),
        (
            {**_GOOD, "latestAttempt": {"serviceResourceId": {"name": "TrainingJobName", "value": "x"}}},
            "DescribeServiceJob.latestAttempt.serviceResourceId.name: 'TrainingJobName' is not one of",
        ),
    ],
    ids=["enum", "required", "long", "boolean", "integer not bool", "list", "unknown member", "nested enum"],
)
def test_a_wrong_answer_is_reported_at_its_path(answer: dict[str, Any], problem: str) -> None:
    problems = answer_problems("DescribeServiceJob", answer)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_a_right_answer_has_no_problem() -> None:
    assert answer_problems("DescribeServiceJob", _GOOD) == []
    assert answer_problems("TerminateServiceJob", {}) == []
    quota_shares = {"quotaShares": {"team": [{"jobArn": "arn", "earliestTimeAtPosition": 1}]}}
    assert answer_problems("GetJobQueueSnapshot", {"frontOfQuotaShares": quota_shares}) == []
    assert answer_problems(
        "GetJobQueueSnapshot", {"frontOfQuotaShares": {"quotaShares": {"team": {"jobArn": "arn"}}}}
    )
