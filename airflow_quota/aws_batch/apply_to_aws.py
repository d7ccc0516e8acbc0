"""``airflow quota apply --to-aws``'s calls to AWS Batch: read what exists, then send an ``ApplyPlan``.

``aws_connection`` says which Airflow connection the calls go through: the one named (an unknown one is an
error naming it, never a fallback), else ``aws_default``, else (no connection named and no ``aws_default``)
the environment's own AWS credentials, said in a note. ``read_state`` asks DescribeJobQueues for the file's
job queues first, then DescribeServiceEnvironments and ListSchedulingPolicies + DescribeSchedulingPolicies
for the file's service environments and policies and those the existing job queues use, and ListQuotaShares
for each of its job queues that exists. ``send_plan`` makes ``plan_calls``' calls in order: each Create* or
Update*, then a wait until AWS shows the resource VALID (an empty or missing answer means "not yet";
INVALID, or still not VALID after ``SETTLE_TIMEOUT_S``, stops the apply), and TagResource for a job queue's
tags. The first failure stops it: ``ApplyToAwsError`` names the request and AWS's message, what was done
before, and (``undo_commands``) the AWS CLI commands that delete what this apply created. The client is the
amazon provider's Batch hook's (boto3).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from airflow_quota.aws_batch.apply_plan import AwsState, Call, ResourceChange, plan_calls
from airflow_quota.aws_batch.botocore_model import Kind
from airflow_quota.aws_batch.design import ARN_KEY, name_of

#: How long to wait for a resource to read VALID after its Create*/Update*, and how often to ask.
SETTLE_TIMEOUT_S = 600.0
SETTLE_POLL_S = 5.0
_BUSY = frozenset({"CREATING", "UPDATING"})
#: DescribeSchedulingPolicies takes at most this many ARNs a call.
_POLICIES_PER_CALL = 100
#: The connection used when none is named.
DEFAULT_CONN_ID = "aws_default"


@dataclass(frozen=True)
class Created:
    """A resource this apply created (for ``undo_commands``)."""

    kind: Kind
    title: str
    arn: str | None


class ApplyToAwsError(Exception):
    """AWS refused a request (or could not be asked, or made a resource INVALID, or did not settle one in
    time); ``done`` lists what was created or updated before, ``created`` what this apply created."""

    def __init__(
        self, message: str, done: Sequence[str], created: Sequence[Created] = (), updated: bool = False
    ) -> None:
        super().__init__(message)
        self.done = list(done)
        self.created = list(created)
        self.updated = updated


class UnknownConnectionError(Exception):
    """The Airflow connection named is not defined."""


def aws_connection(aws_conn_id: str | None) -> tuple[str | None, str | None]:
    """The Airflow connection to use and a note to show, for ``--aws-conn-id`` (None: not given).

    A connection named must exist (``UnknownConnectionError`` names it otherwise: the amazon provider would
    fall back to the environment's credentials, possibly another account's). Not given: ``aws_default``,
    or, when that does not exist either, None (boto3's default credential chain), with a note saying so.
    """
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook
    from airflow.providers.common.compat.sdk import AirflowNotFoundException

    wanted = aws_conn_id or DEFAULT_CONN_ID
    try:
        BatchClientHook.get_connection(wanted)
    except AirflowNotFoundException:
        if aws_conn_id is not None:
            raise UnknownConnectionError(
                f"the Airflow connection {aws_conn_id} is not defined: create it (airflow connections add "
                f"{aws_conn_id} --conn-type aws ...) or name another with --aws-conn-id"
            ) from None
        return None, (
            f"no --aws-conn-id and no Airflow connection {DEFAULT_CONN_ID}: using this environment's AWS "
            "credentials (boto3's default chain)"
        )
    return wanted, None


def batch_client(aws_conn_id: str | None, region_name: str | None) -> Any:
    """A boto3 Batch client of the Airflow AWS connection ``aws_conn_id`` (the provider's Batch hook); None:
    the environment's credentials. Check the connection with ``aws_connection`` first."""
    from airflow.providers.amazon.aws.hooks.batch_client import BatchClientHook

    return BatchClientHook(aws_conn_id=aws_conn_id, region_name=region_name).conn


def read_state(client: Any, bundle: Mapping[str, list[dict[str, Any]]]) -> AwsState:
    """What AWS has of the resources ``bundle`` names, of the service environments and scheduling policies
    its existing job queues use, and every quota share of its job queues."""
    queues = _paged(
        client, "describe_job_queues", "jobQueues", jobQueues=[b["jobQueueName"] for b in bundle["jobQueues"]]
    )
    queue_names = {b["jobQueueName"] for b in bundle["jobQueues"]}
    found_queues = {q["jobQueueName"]: q for q in queues if q["jobQueueName"] in queue_names}
    environment_names = list(
        dict.fromkeys(
            [
                *(b["serviceEnvironmentName"] for b in bundle["serviceEnvironments"]),
                *(
                    name_of(entry["serviceEnvironment"])
                    for queue in found_queues.values()
                    for entry in queue.get("serviceEnvironmentOrder") or []
                ),
            ]
        )
    )
    environments = _paged(
        client, "describe_service_environments", "serviceEnvironments", serviceEnvironments=environment_names
    )
    policy_names = {b["name"] for b in bundle["schedulingPolicies"]} | {
        name_of(queue["schedulingPolicyArn"])
        for queue in found_queues.values()
        if isinstance(queue.get("schedulingPolicyArn"), str)
    }
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
    """Make ``plan_calls(changes)`` in order; returns what was done (``created job queue q``, ...), each also
    given to ``on_done`` as it happens. The first failure raises ``ApplyToAwsError``."""
    changes = list(changes)
    sent = _Sent(on_done)
    policy_arns: dict[str, str] = {}
    arns: dict[int, str] = {}  # by id of the change: what AWS answered, or what it had
    for change in changes:
        if change.kind == "schedulingPolicies" and change.arn is not None:
            policy_arns[change.name] = change.arn
    for call in plan_calls(changes):
        change = call.change
        arn = arns.get(id(change)) or change.arn
        if call.is_wait:
            _wait(client, call, arn, sent)
            continue
        request = _resolved(call, policy_arns, arn)
        answer = _call(client, call, request, sent)
        if call.operation == "TagResource":
            sent.record(
                f"tagged {change.title} ({', '.join(f'{k}={v}' for k, v in (change.tags or {}).items())})"
            )
            continue
        arn = answer.get(ARN_KEY[change.kind]) or arn
        if arn is not None:
            arns[id(change)] = arn
            if change.kind == "schedulingPolicies":
                policy_arns[change.name] = arn
        if change.action == "create":
            sent.created.append(Created(change.kind, change.title, arn))
        else:
            sent.updated = True
        sent.record(f"{'created' if change.action == 'create' else 'updated'} {change.title}")
    return sent.done


class _Sent:
    """What the apply has done so far (for its error)."""

    def __init__(self, on_done: Callable[[str], None]) -> None:
        self.on_done = on_done
        self.done: list[str] = []
        self.created: list[Created] = []
        self.updated = False

    def record(self, what: str) -> None:
        self.done.append(what)
        self.on_done(what)

    def error(self, message: str) -> ApplyToAwsError:
        return ApplyToAwsError(message, self.done, self.created, self.updated)


def undo_commands(created: Sequence[Created]) -> list[str]:
    """The AWS CLI commands that delete what an apply created, the last created first (a job queue, a
    service environment and a quota share are disabled before they are deleted, as AWS Batch requires)."""
    commands: list[str] = []
    for resource in reversed(created):
        arn = resource.arn or f"<the ARN of {resource.title}>"
        if resource.kind == "quotaShares":
            commands += [
                f"aws batch update-quota-share --quota-share-arn {arn} --state DISABLED",
                f"aws batch delete-quota-share --quota-share-arn {arn}",
            ]
        elif resource.kind == "jobQueues":
            commands += [
                f"aws batch update-job-queue --job-queue {arn} --state DISABLED",
                f"aws batch delete-job-queue --job-queue {arn}",
            ]
        elif resource.kind == "schedulingPolicies":
            commands.append(f"aws batch delete-scheduling-policy --arn {arn}")
        else:
            commands += [
                f"aws batch update-service-environment --service-environment {arn} --state DISABLED",
                f"aws batch delete-service-environment --service-environment {arn}",
            ]
    return commands


def _resolved(call: Call, policy_arns: Mapping[str, str], arn: str | None) -> dict[str, Any]:
    """The request with the job queue's scheduling policy as the ARN AWS gave it (the export's ARN may say
    REGION and ACCOUNT_ID), and a TagResource's ARN the one AWS answered."""
    request = dict(call.request or {})
    if call.operation == "TagResource" and arn is not None:
        request["resourceArn"] = arn
    if call.change.kind == "jobQueues" and "schedulingPolicyArn" in request:
        policy = name_of(request["schedulingPolicyArn"])
        request["schedulingPolicyArn"] = policy_arns.get(policy, request["schedulingPolicyArn"])
    return request


def _call(client: Any, call: Call, request: dict[str, Any], sent: _Sent) -> dict[str, Any]:
    method = getattr(client, _snake(call.operation))
    try:
        answer: dict[str, Any] = method(**request)
    except ClientError as error:
        detail = error.response.get("Error", {})
        raise sent.error(
            f"AWS Batch refused {call.operation} of {call.change.title}: {detail.get('Code', 'error')}: "
            f"{detail.get('Message', str(error))} (fields sent: {', '.join(request)})"
        ) from None
    except BotoCoreError as error:
        raise sent.error(f"{call.operation} of {call.change.title} could not be sent: {error}") from None
    return answer


def _wait(client: Any, call: Call, arn: str | None, sent: _Sent) -> None:
    """Ask until AWS shows the resource VALID (a scheduling policy: listed); missing from the answer is
    "not yet"; INVALID, DELETING or still not VALID after ``SETTLE_TIMEOUT_S`` raise."""
    change = call.change
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        try:
            found = _described(client, change, arn)
        except (ClientError, BotoCoreError) as error:
            raise sent.error(
                f"{call.operation} could not say whether {change.title} is VALID: {error}"
            ) from None
        status = None if found is None else found.get("status", "VALID")
        if status == "VALID":
            return
        if status is not None and status not in _BUSY:
            reason = found.get("statusReason") if found is not None else None
            raise sent.error(f"AWS Batch made {change.title} {status}: {reason or 'no reason given'}")
        if time.monotonic() >= deadline:
            what = f"still {status}" if status else f"still not shown by {call.operation}"
            raise sent.error(
                f"{change.title} is {what} after {SETTLE_TIMEOUT_S:g} s: AWS Batch has not finished it; "
                "run the same apply again once it reads VALID"
            )
        time.sleep(max(0.0, min(SETTLE_POLL_S, deadline - time.monotonic())))


def _described(client: Any, change: ResourceChange, arn: str | None) -> Mapping[str, Any] | None:
    """AWS's answer about the resource now, or None when the answer leaves it out."""
    reference = arn or change.name
    if change.kind == "serviceEnvironments":
        items = client.describe_service_environments(serviceEnvironments=[reference])["serviceEnvironments"]
        key = "serviceEnvironmentName"
    elif change.kind == "jobQueues":
        items = client.describe_job_queues(jobQueues=[reference])["jobQueues"]
        key = "jobQueueName"
    elif change.kind == "schedulingPolicies":
        if arn is None:
            return None
        items = client.describe_scheduling_policies(arns=[arn])["schedulingPolicies"]
        key = "name"
    else:
        items = _paged(client, "list_quota_shares", "quotaShares", jobQueue=change.job_queue_name)
        key = "quotaShareName"
    return next((item for item in items if item.get(key) == change.name), None)


def _paged(client: Any, operation: str, list_key: str, **request: Any) -> list[dict[str, Any]]:
    return [item for page in client.get_paginator(operation).paginate(**request) for item in page[list_key]]


def _snake(operation: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")
