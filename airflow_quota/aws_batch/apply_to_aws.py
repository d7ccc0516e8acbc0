"""``airflow quota apply --to-aws``'s calls to AWS Batch: read what exists, then send an ``ApplyPlan``.

``read_state`` asks DescribeServiceEnvironments and DescribeJobQueues for the file's names, ListScheduling
Policies then DescribeSchedulingPolicies for its policies, and ListQuotaShares for each of its job queues
that exists. ``send_plan`` sends each Create* or Update* (and TagResource for a job queue's tags) in
dependency order, waiting after each service environment, scheduling policy and job queue until AWS says it
is no longer CREATING or UPDATING. The first refusal stops it: ``ApplyToAwsError`` names the request, AWS's
message and what was done before it. The client is the amazon provider's Batch hook's (boto3).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from airflow_quota.aws_batch.apply_plan import AwsState, ResourceChange
from airflow_quota.aws_batch.botocore_model import Kind
from airflow_quota.aws_batch.design import ARN_KEY, name_of

#: How long to wait for a resource to leave CREATING/UPDATING, and how often to ask.
SETTLE_TIMEOUT_S = 600.0
SETTLE_POLL_S = 5.0
_BUSY = frozenset({"CREATING", "UPDATING"})
#: DescribeSchedulingPolicies takes at most this many ARNs a call.
_POLICIES_PER_CALL = 100


class ApplyToAwsError(Exception):
    """AWS refused a request (or could not be asked); ``done`` lists what was created or updated before."""

    def __init__(self, message: str, done: Sequence[str]) -> None:
        super().__init__(message)
        self.done = list(done)


def batch_client(aws_conn_id: str, region_name: str | None) -> Any:
    """A boto3 Batch client of the Airflow AWS connection ``aws_conn_id`` (the provider's Batch hook)."""
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

    return BatchClientHook(aws_conn_id=aws_conn_id, region_name=region_name).conn


def read_state(client: Any, bundle: Mapping[str, list[dict[str, Any]]]) -> AwsState:
    """What AWS has of the resources ``bundle`` names (and every quota share of its job queues)."""
    environments = _paged(
        client,
        "describe_service_environments",
        "serviceEnvironments",
        serviceEnvironments=[b["serviceEnvironmentName"] for b in bundle["serviceEnvironments"]],
    )
    queues = _paged(
        client, "describe_job_queues", "jobQueues", jobQueues=[b["jobQueueName"] for b in bundle["jobQueues"]]
    )
    policy_names = {b["name"] for b in bundle["schedulingPolicies"]}
    arns = [
        p["arn"]
        for p in _paged(client, "list_scheduling_policies", "schedulingPolicies")
        if name_of(p["arn"]) in policy_names
    ]
    policies = [
        policy
        for start in range(0, len(arns), _POLICIES_PER_CALL)
        for policy in client.describe_scheduling_policies(arns=arns[start : start + _POLICIES_PER_CALL])[
            "schedulingPolicies"
        ]
    ]
    queue_names = {b["jobQueueName"] for b in bundle["jobQueues"]}
    found_queues = {q["jobQueueName"]: q for q in queues if q["jobQueueName"] in queue_names}
    shares = {
        name: {
            share["quotaShareName"]: share
            for share in _paged(client, "list_quota_shares", "quotaShares", jobQueue=name)
        }
        for name in found_queues
    }
    return AwsState(
        service_environments={e["serviceEnvironmentName"]: e for e in environments},
        scheduling_policies={p["name"]: p for p in policies if p["name"] in policy_names},
        job_queues=found_queues,
        quota_shares=shares,
    )


def send_plan(
    client: Any, changes: Iterable[ResourceChange], on_done: Callable[[str], None] = lambda _: None
) -> list[str]:
    """Send each change in order; returns what was done (``created job queue q``, ...), each also given to
    ``on_done`` as it happens. The first refusal raises ``ApplyToAwsError``."""
    done: list[str] = []
    policy_arns: dict[str, str] = {}

    def record(what: str) -> None:
        done.append(what)
        on_done(what)

    for change in changes:
        if change.kind == "schedulingPolicies" and change.arn is not None:
            policy_arns[change.name] = change.arn
        arn = change.arn
        if change.request is not None:
            request = _resolved(change, policy_arns)
            answer = _call(client, change, change.operation or "", request, done)
            arn = answer.get(ARN_KEY[change.kind]) or arn
            if change.kind == "schedulingPolicies" and arn is not None:
                policy_arns[change.name] = arn
            record(f"{'created' if change.action == 'create' else 'updated'} {change.title}")
        if change.tags:
            _call(client, change, "TagResource", {"resourceArn": arn, "tags": change.tags}, done)
            record(f"tagged {change.title} ({', '.join(f'{k}={v}' for k, v in change.tags.items())})")
        if change.kind != "quotaShares" and change.request is not None:
            _settle(client, change, arn or change.name, done)
    return done


def _resolved(change: ResourceChange, policy_arns: Mapping[str, str]) -> dict[str, Any]:
    """The request with the job queue's scheduling policy as the ARN AWS gave it (the export's ARN may say
    REGION and ACCOUNT_ID)."""
    request = dict(change.request or {})
    if change.kind == "jobQueues" and "schedulingPolicyArn" in request:
        policy = name_of(request["schedulingPolicyArn"])
        request["schedulingPolicyArn"] = policy_arns.get(policy, request["schedulingPolicyArn"])
    return request


def _call(
    client: Any, change: ResourceChange, operation: str, request: dict[str, Any], done: Sequence[str]
) -> dict[str, Any]:
    method = getattr(client, _snake(operation))
    try:
        answer: dict[str, Any] = method(**request)
    except ClientError as error:
        detail = error.response.get("Error", {})
        raise ApplyToAwsError(
            f"AWS Batch refused {operation} of {change.title}: {detail.get('Code', 'error')}: "
            f"{detail.get('Message', str(error))} (fields sent: {', '.join(request)})",
            done,
        ) from None
    except BotoCoreError as error:
        raise ApplyToAwsError(f"{operation} of {change.title} could not be sent: {error}", done) from None
    return answer


def _settle(client: Any, change: ResourceChange, reference: str, done: Sequence[str]) -> None:
    """Wait until AWS says the resource is no longer CREATING or UPDATING; INVALID is a refusal."""
    kind: Kind = change.kind
    if kind == "schedulingPolicies":
        return  # a scheduling policy has no status
    operation, key = {
        "serviceEnvironments": ("describe_service_environments", "serviceEnvironments"),
        "jobQueues": ("describe_job_queues", "jobQueues"),
    }[kind]
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        found = getattr(client, operation)(**{key: [reference]})[key]
        status = found[0].get("status") if found else None
        if status == "INVALID":
            raise ApplyToAwsError(
                f"AWS Batch made {change.title} INVALID: {found[0].get('statusReason', 'no reason given')}",
                done,
            )
        if status not in _BUSY:
            return
        if time.monotonic() > deadline:
            raise ApplyToAwsError(
                f"{change.title} is still {status} after {SETTLE_TIMEOUT_S:g} s: run apply again later",
                done,
            )
        time.sleep(SETTLE_POLL_S)


def _paged(client: Any, operation: str, list_key: str, **request: Any) -> list[dict[str, Any]]:
    return [item for page in client.get_paginator(operation).paginate(**request) for item in page[list_key]]


def _snake(operation: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")
