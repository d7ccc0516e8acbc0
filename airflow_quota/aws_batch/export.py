"""Our quota file's design as AWS Batch request bodies: per job queue a CreateServiceEnvironment, a
CreateSchedulingPolicy and a CreateJobQueue body, and a CreateQuotaShare body per quota share, each of which
passes botocore's validation for its operation.

A job queue's own AWS fields are the file's when it gives them (``priority``, ``state``,
``schedulingPolicyArn``, ``serviceEnvironmentOrder``: what ``import`` keeps); left out, export writes
priority 1, ENABLED, and a service environment and scheduling policy named after the job queue.
``defaulted_fields`` says which of them the file left out: ``apply --to-aws`` leaves those as AWS has them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_quota.aws_batch.botocore_model import KINDS, request_shape, shape_issues
from airflow_quota.aws_batch.design import DEFAULT_QUEUE_PRIORITY, SAGEMAKER_TRAINING, SCHEDULER_TAG, name_of
from airflow_quota.engine.config import ConfigIssue, JobQueueWithShares, QuotaConfig

#: What export writes for a job queue's priority when the file gives none: it orders job queues sharing
#: one service environment, which our file never has (each job queue has its own capacity).
EXPORTED_QUEUE_PRIORITY = DEFAULT_QUEUE_PRIORITY
#: The job queue's fields the quota file may leave out (``defaulted_fields``).
OPTIONAL_QUEUE_FIELDS = ("priority", "state", "schedulingPolicyArn", "serviceEnvironmentOrder")


def export_design(
    config: QuotaConfig, *, region: str = "REGION", account_id: str = "ACCOUNT_ID", partition: str = "aws"
) -> dict[str, list[dict[str, Any]]]:
    """The design as AWS Batch request bodies: per job queue its service environment, its scheduling
    policy (once, when job queues share one) and the job queue, and its quota shares."""
    bundle: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for queue in config.job_queues:
        name = queue.job_queue_name
        environment, order = _environment_of(queue)
        policy_name, policy_arn = _policy_of(queue, f"arn:{partition}:batch:{region}:{account_id}")
        bundle["serviceEnvironments"].append(
            {
                "serviceEnvironmentName": name_of(environment),
                "serviceEnvironmentType": SAGEMAKER_TRAINING,
                "state": "ENABLED",
                "capacityLimits": [_limit(limit) for limit in queue.capacity_limits],
            }
        )
        if all(policy["name"] != policy_name for policy in bundle["schedulingPolicies"]):
            bundle["schedulingPolicies"].append(
                {"name": policy_name, "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}
            )
        bundle["jobQueues"].append(
            {
                "jobQueueName": name,
                "jobQueueType": SAGEMAKER_TRAINING,
                "state": queue.state or "ENABLED",
                "priority": EXPORTED_QUEUE_PRIORITY if queue.priority is None else queue.priority,
                "schedulingPolicyArn": policy_arn,
                "serviceEnvironmentOrder": [{"order": order, "serviceEnvironment": environment}],
                **(
                    {}
                    if queue.job_state_time_limit_actions is None
                    else {
                        "jobStateTimeLimitActions": [
                            action.model_dump(mode="json", by_alias=True)
                            for action in queue.job_state_time_limit_actions
                        ]
                    }
                ),
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


def extensions_not_kept(config: QuotaConfig) -> list[ConfigIssue]:
    """One note per quota share whose ``extensions`` (ours, not AWS Batch's: docs/extensions.md) the
    export leaves out."""
    return [
        ConfigIssue(
            f"jobQueues[{queue_index}].quotaShares[{share_index}].extensions",
            f"quota share {share.quota_share_name}'s extensions are ours, not AWS Batch's: left out of "
            "its CreateQuotaShare body (AWS Batch schedules without them)",
        )
        for queue_index, queue in enumerate(config.job_queues)
        for share_index, share in enumerate(queue.quota_shares)
        if share.extensions is not None
    ]


def defaulted_fields(config: QuotaConfig) -> dict[str, frozenset[str]]:
    """Per job queue name, the fields of its CreateJobQueue body that export filled in because the file
    leaves them out (``OPTIONAL_QUEUE_FIELDS``)."""
    return {
        queue.job_queue_name: frozenset(
            key for key in OPTIONAL_QUEUE_FIELDS if key not in _given_aliases(queue)
        )
        for queue in config.job_queues
    }


def export_issues(bundle: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[ConfigIssue]:
    """botocore's validation of every request body of an export (none, for what ``export_design`` writes)."""
    return [
        issue
        for kind in KINDS
        for index, body in enumerate(bundle.get(kind, []))
        for issue in shape_issues(body, request_shape(kind), f"{kind}[{index}]", answer=False)
    ]


def _environment_of(queue: JobQueueWithShares) -> tuple[str, int]:
    """The job queue's service environment (a name or ARN, as the file gives it) and its order."""
    if queue.service_environment_order:
        entry = queue.service_environment_order[0]
        return entry.service_environment, entry.order
    return queue.job_queue_name, 1


def _policy_of(queue: JobQueueWithShares, arn_prefix: str) -> tuple[str, str]:
    """The job queue's scheduling policy: its name and ARN (the file's ARN as given; a name as an ARN)."""
    reference = queue.scheduling_policy_arn or queue.job_queue_name
    name = name_of(reference)
    return name, reference if reference.startswith("arn:") else f"{arn_prefix}:scheduling-policy/{name}"


def _given_aliases(queue: JobQueueWithShares) -> set[str]:
    fields = type(queue).model_fields
    return {fields[name].alias or name for name in queue.model_fields_set if getattr(queue, name) is not None}


def _limit(limit: Any) -> dict[str, Any]:
    return {"capacityUnit": limit.capacity_unit, "maxCapacity": limit.max_capacity}
