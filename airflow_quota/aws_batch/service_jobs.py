"""AWS Batch service jobs as their answers describe them: which statuses are final, the tag that holds our
``clientToken``, and what a DescribeServiceJob answer says of its attempts.

Plain values and functions, apart from the hook (``hooks/batch_service_job.py``, an ``AwsBaseHook``): the
operator's modules, which every DAG file imports, read them without importing boto3 or the amazon
provider's hooks. The hook, the operator's AWS Batch strategy (``operators/batch_backend.py``) and the
monitoring trigger (``triggers/batch_service_job.py``) all read them from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: Service-job statuses after which nothing changes.
FINAL_STATUSES: Final = frozenset({"SUCCEEDED", "FAILED"})
#: The service job's tag holding its ``clientToken`` (DescribeServiceJob shows tags, not the token): how a
#: retry finds the job a rejected repeat of its request submitted.
CLIENT_TOKEN_TAG: Final = "airflow-quota:client-token"


def preemptions_of(description: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each preempted attempt a DescribeServiceJob answer lists: its training job ARN, when it started and
    stopped (epoch milliseconds) and why."""
    summary = description.get("preemptionSummary") or {}
    return [
        {
            "training_job_arn": (attempt.get("serviceResourceId") or {}).get("value"),
            "started_at": attempt.get("startedAt"),
            "stopped_at": attempt.get("stoppedAt"),
            "status_reason": attempt.get("statusReason"),
        }
        for attempt in summary.get("recentPreemptedAttempts", [])
    ]


def latest_training_job_arn(description: Mapping[str, Any]) -> str | None:
    """The latest attempt's training job ARN (whatever AWS Batch named that training job)."""
    latest = (description.get("latestAttempt") or {}).get("serviceResourceId") or {}
    value = latest.get("value")
    return str(value) if value else None
