"""Our quota file's design as AWS Batch request bodies: per job queue a CreateServiceEnvironment, a
CreateSchedulingPolicy and a CreateJobQueue body (all three named after the queue), and a CreateQuotaShare
body per quota share, each of which passes botocore's validation for its operation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_quota.aws_batch.botocore_model import KINDS, request_shape, shape_issues
from airflow_quota.aws_batch.design import SAGEMAKER_TRAINING, SCHEDULER_TAG
from airflow_quota.engine.config import ConfigIssue, QuotaConfig

#: What export writes for a job queue's priority: it orders job queues sharing one service environment,
#: which our file never has (each job queue has its own capacity), so it means nothing here.
EXPORTED_QUEUE_PRIORITY = 1


def export_design(
    config: QuotaConfig, *, region: str = "REGION", account_id: str = "ACCOUNT_ID", partition: str = "aws"
) -> dict[str, list[dict[str, Any]]]:
    """The design as AWS Batch request bodies: per job queue a service environment, a scheduling policy
    and the job queue (all three named after it), and its quota shares."""
    bundle: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for queue in config.job_queues:
        name = queue.job_queue_name
        bundle["serviceEnvironments"].append(
            {
                "serviceEnvironmentName": name,
                "serviceEnvironmentType": SAGEMAKER_TRAINING,
                "state": "ENABLED",
                "capacityLimits": [_limit(limit) for limit in queue.capacity_limits],
            }
        )
        bundle["schedulingPolicies"].append(
            {"name": name, "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}
        )
        bundle["jobQueues"].append(
            {
                "jobQueueName": name,
                "jobQueueType": SAGEMAKER_TRAINING,
                "state": "ENABLED",
                "priority": EXPORTED_QUEUE_PRIORITY,
                "schedulingPolicyArn": (
                    f"arn:{partition}:batch:{region}:{account_id}:scheduling-policy/{name}"
                ),
                "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": name}],
                # Who schedules the queue, when the file says: AWS Batch has no field for it.
                **({} if queue.scheduler is None else {"tags": {SCHEDULER_TAG: queue.scheduler}}),
            }
        )
        for share in queue.quota_shares:
            sharing = share.resource_sharing_configuration
            bundle["quotaShares"].append(
                {
                    "quotaShareName": share.quota_share_name,
                    "jobQueue": name,
                    "capacityLimits": [_limit(limit) for limit in share.capacity_limits],
                    "resourceSharingConfiguration": {
                        "strategy": sharing.strategy.value,
                        **({} if sharing.borrow_limit is None else {"borrowLimit": sharing.borrow_limit}),
                    },
                    "preemptionConfiguration": {
                        "inSharePreemption": share.preemption_configuration.in_share_preemption
                    },
                    "state": share.state.value,
                }
            )
    return bundle


def export_issues(bundle: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[ConfigIssue]:
    """botocore's validation of every request body of an export (none, for what ``export_design`` writes)."""
    return [
        issue
        for kind in KINDS
        for index, body in enumerate(bundle.get(kind, []))
        for issue in shape_issues(body, request_shape(kind), f"{kind}[{index}]", answer=False)
    ]


def _limit(limit: Any) -> dict[str, Any]:
    return {"capacityUnit": limit.capacity_unit, "maxCapacity": limit.max_capacity}
