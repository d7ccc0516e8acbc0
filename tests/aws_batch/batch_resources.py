"""The emulator's AWS Batch resources: service environments, quota-share scheduling policies,
SAGEMAKER_TRAINING job queues and quota shares, as AWS Batch's API creates, updates and describes them
(an unknown name is left out of a Describe* answer, as AWS does).

Each Create* takes the request body as botocore sends it and each answer is a dict in the operation's
output shape (checked in the tests by ``output_shapes``). A job queue's capacity is the sum of its
service environments' ``capacityLimits``; ``engine_queue`` turns a job queue and its quota shares into
the engine's ``JobQueue``. No HTTP here (``moto_batch`` serves it) and no SageMaker (``service_jobs``).
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from airflow_quota.engine.config import AWS_MAX_CAPACITY_LIMITS_PER_SHARE
from airflow_quota.engine.model import UNLIMITED_BORROW, JobQueue, QuotaShare, ShareState, SharingStrategy


class BatchClientError(Exception):
    """AWS Batch's ``ClientException`` (HTTP 400): the request is wrong, and the message says how."""


@dataclass
class ServiceEnvironment:
    name: str
    arn: str
    body: dict[str, Any]


@dataclass
class SchedulingPolicy:
    name: str
    arn: str
    body: dict[str, Any]


@dataclass
class QueueRecord:
    name: str
    arn: str
    body: dict[str, Any]
    #: The quota shares of this queue by name, in creation order.
    shares: dict[str, QuotaShareRecord] = field(default_factory=dict)


@dataclass
class QuotaShareRecord:
    name: str
    arn: str
    queue_arn: str
    body: dict[str, Any]


class BatchResources:
    """The resources of one account and region."""

    def __init__(self, account_id: str, region: str) -> None:
        self.arn_prefix = f"arn:aws:batch:{region}:{account_id}"
        self.environments: dict[str, ServiceEnvironment] = {}
        self.policies: dict[str, SchedulingPolicy] = {}
        self.queues: dict[str, QueueRecord] = {}

    # -- lookups: AWS takes a name or an ARN wherever it takes a reference ---------------------------

    def environment(self, reference: str) -> ServiceEnvironment:
        found = self.environments.get(_name_of(reference, "service-environment"))
        if found is None:
            raise BatchClientError(f"Service environment {reference} does not exist")
        return found

    def queue(self, reference: str) -> QueueRecord:
        found = self.queues.get(_name_of(reference, "job-queue"))
        if found is None:
            raise BatchClientError(f"Job queue {reference} does not exist")
        return found

    def is_ours(self, reference: str, kind: str) -> bool:
        """Whether ``reference`` names one of our resources of ``kind`` (the rest are moto's own)."""
        name = _name_of(reference, kind)
        return name in (self.queues if kind == "job-queue" else self.policies)

    def share(self, arn: str) -> QuotaShareRecord:
        queue_arn, _, name = arn.rpartition("/quota-share/")
        queue = self.queue(queue_arn) if queue_arn else None
        found = queue.shares.get(name) if queue is not None else None
        if found is None:
            raise BatchClientError(
                f"Quota share {arn} does not exist: give the quotaShareArn ListQuotaShares answers"
            )
        return found

    def tagged(self, arn: str) -> dict[str, Any] | None:
        """The request body (where the tags are kept) of our resource ``arn``, or None if it is not ours."""
        for records in (self.environments, self.policies, self.queues):
            for record in records.values():
                if record.arn == arn:
                    return record.body
        for queue in self.queues.values():
            for share in queue.shares.values():
                if share.arn == arn:
                    return share.body
        return None

    # -- service environments ------------------------------------------------------------------------

    def create_environment(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["serviceEnvironmentName"]
        if name in self.environments:
            raise BatchClientError(f"Service environment {name} already exists")
        arn = f"{self.arn_prefix}:service-environment/{name}"
        self.environments[name] = ServiceEnvironment(name, arn, copy.deepcopy(body))
        return {"serviceEnvironmentName": name, "serviceEnvironmentArn": arn}

    def describe_environments(self, references: list[str]) -> dict[str, Any]:
        """The named service environments that exist (like every Describe*, an unknown name is left out),
        or all of them."""
        chosen = (
            [
                self.environments[_name_of(r, "service-environment")]
                for r in references
                if self.has_environment(r)
            ]
            if references
            else list(self.environments.values())
        )
        return {"serviceEnvironments": [_environment_detail(e) for e in chosen]}

    def has_environment(self, reference: str) -> bool:
        return _name_of(reference, "service-environment") in self.environments

    def update_environment(self, body: dict[str, Any]) -> dict[str, Any]:
        """UpdateServiceEnvironment: its ``state`` and ``capacityLimits``, when given."""
        environment = self.environment(body["serviceEnvironment"])
        environment.body |= _without(body, "serviceEnvironment")
        return {"serviceEnvironmentName": environment.name, "serviceEnvironmentArn": environment.arn}

    # -- scheduling policies -------------------------------------------------------------------------

    def create_policy(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["name"]
        if name in self.policies:
            raise BatchClientError(f"Scheduling policy {name} already exists")
        arn = f"{self.arn_prefix}:scheduling-policy/{name}"
        self.policies[name] = SchedulingPolicy(name, arn, copy.deepcopy(body))
        return {"name": name, "arn": arn}

    def describe_policies(self, arns: list[str]) -> list[dict[str, Any]]:
        found = [
            self.policies[_name_of(arn, "scheduling-policy")]
            for arn in arns
            if self.is_ours(arn, "scheduling-policy")
        ]
        return [{"name": p.name, "arn": p.arn, **_without(p.body, "name")} for p in found]

    def policy_arns(self) -> list[str]:
        return [policy.arn for policy in self.policies.values()]

    def update_policy(self, body: dict[str, Any]) -> dict[str, Any]:
        """UpdateSchedulingPolicy of a quota-share policy: its ``quotaSharePolicy`` (AWS answers nothing)."""
        policy = self.policies.get(_name_of(body["arn"], "scheduling-policy"))
        if policy is None:
            raise BatchClientError(f"Scheduling policy {body['arn']} does not exist")
        if "fairsharePolicy" in body:
            raise BatchClientError(
                "fairsharePolicy: this scheduling policy has a quotaSharePolicy; a policy keeps its kind"
            )
        policy.body |= _without(body, "arn")
        return {}

    # -- job queues ----------------------------------------------------------------------------------

    def create_queue(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["jobQueueName"]
        if name in self.queues:
            raise BatchClientError(f"Job queue {name} already exists")
        if body.get("jobQueueType") != "SAGEMAKER_TRAINING" or body.get("computeEnvironmentOrder"):
            raise BatchClientError(
                "This emulator's job queues are jobQueueType SAGEMAKER_TRAINING with a "
                "serviceEnvironmentOrder"
            )
        order = body.get("serviceEnvironmentOrder") or []
        if not order:
            raise BatchClientError("A SAGEMAKER_TRAINING job queue needs a serviceEnvironmentOrder")
        stored = copy.deepcopy(body)
        for entry in stored["serviceEnvironmentOrder"]:
            entry["serviceEnvironment"] = self.environment(entry["serviceEnvironment"]).arn
        policy_arn = body.get("schedulingPolicyArn")
        if policy_arn is not None and not self.is_ours(policy_arn, "scheduling-policy"):
            raise BatchClientError(f"Scheduling policy {policy_arn} does not exist")
        arn = f"{self.arn_prefix}:job-queue/{name}"
        self.queues[name] = QueueRecord(name, arn, stored)
        return {"jobQueueName": name, "jobQueueArn": arn}

    def update_queue(self, body: dict[str, Any]) -> dict[str, Any]:
        """UpdateJobQueue of a SAGEMAKER_TRAINING queue: state, priority, schedulingPolicyArn and
        serviceEnvironmentOrder, when given."""
        queue = self.queue(body["jobQueue"])
        if body.get("computeEnvironmentOrder"):
            raise BatchClientError("computeEnvironmentOrder: a SAGEMAKER_TRAINING job queue has none")
        changes = _without(body, "jobQueue")
        for entry in changes.get("serviceEnvironmentOrder") or []:
            entry["serviceEnvironment"] = self.environment(entry["serviceEnvironment"]).arn
        policy_arn = changes.get("schedulingPolicyArn")
        if policy_arn is not None and not self.is_ours(policy_arn, "scheduling-policy"):
            raise BatchClientError(f"schedulingPolicyArn: scheduling policy {policy_arn} does not exist")
        queue.body |= changes
        return {"jobQueueName": queue.name, "jobQueueArn": queue.arn}

    def describe_queues(self, references: list[str]) -> list[dict[str, Any]]:
        chosen = (
            [self.queue(r) for r in references if self.is_ours(r, "job-queue")]
            if references
            else list(self.queues.values())
        )
        return [_queue_detail(q) for q in chosen]

    def queue_capacity(self, queue: QueueRecord) -> dict[str, int]:
        capacity: dict[str, int] = defaultdict(int)
        for entry in queue.body["serviceEnvironmentOrder"]:
            environment = self.environment(entry["serviceEnvironment"])
            if environment.body.get("state", "ENABLED") == "DISABLED":
                continue
            for limit in environment.body["capacityLimits"]:
                capacity[limit["capacityUnit"]] += limit.get("maxCapacity", 0)
        return dict(capacity)

    # -- quota shares --------------------------------------------------------------------------------

    def create_share(self, body: dict[str, Any]) -> dict[str, Any]:
        queue = self.queue(body["jobQueue"])
        policy_arn = queue.body.get("schedulingPolicyArn")
        policy = self.policies.get(_name_of(policy_arn, "scheduling-policy")) if policy_arn else None
        if policy is None or "quotaSharePolicy" not in policy.body:
            raise BatchClientError(
                f"Job queue {queue.name} has no scheduling policy with a quotaSharePolicy: create one "
                "(CreateSchedulingPolicy quotaSharePolicy) and give its ARN as the queue's "
                "schedulingPolicyArn"
            )
        name = body["quotaShareName"]
        if name in queue.shares:
            raise BatchClientError(f"Quota share {name} already exists in job queue {queue.name}")
        _check_share_limits(body)
        arn = f"{queue.arn}/quota-share/{name}"
        queue.shares[name] = QuotaShareRecord(name, arn, queue.arn, _without(body, "jobQueue"))
        return {"quotaShareName": name, "quotaShareArn": arn}

    def update_share(self, body: dict[str, Any]) -> dict[str, Any]:
        share = self.share(body["quotaShareArn"])
        updated = {**share.body, **_without(body, "quotaShareArn")}
        _check_share_limits(updated)
        share.body = updated
        return {"quotaShareName": share.name, "quotaShareArn": share.arn}

    def describe_share(self, arn: str) -> dict[str, Any]:
        return _share_detail(self.share(arn))

    def list_shares(self, queue_reference: str) -> dict[str, Any]:
        queue = self.queue(queue_reference)
        return {"quotaShares": [_without(_share_detail(s), "tags") for s in queue.shares.values()]}

    def engine_queue(self, queue: QueueRecord) -> JobQueue:
        return JobQueue(
            name=queue.name,
            capacity=self.queue_capacity(queue),
            shares=tuple(_engine_share(share.body) for share in queue.shares.values()),
        )


def _name_of(reference: str, kind: str) -> str:
    """The name in ``arn:...:<kind>/<name>`` (or ``reference`` itself when it is a name)."""
    marker = f":{kind}/"
    return reference.split(marker, 1)[1] if marker in reference else reference


def _without(body: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: copy.deepcopy(value) for key, value in body.items() if key not in keys}


def _check_share_limits(body: dict[str, Any]) -> None:
    """What AWS Batch refuses in a quota share's body that botocore's validator lets through."""
    if len(body["capacityLimits"]) > AWS_MAX_CAPACITY_LIMITS_PER_SHARE:
        raise BatchClientError(
            f"capacityLimits has {len(body['capacityLimits'])} entries: a quota share has at most "
            f"{AWS_MAX_CAPACITY_LIMITS_PER_SHARE} capacity limits"
        )
    _check_borrow_limit(body)


def _check_borrow_limit(body: dict[str, Any]) -> None:
    sharing = body["resourceSharingConfiguration"]
    if "borrowLimit" in sharing and sharing["strategy"] != "LEND_AND_BORROW":
        raise BatchClientError("borrowLimit is only allowed with the LEND_AND_BORROW strategy")


def _environment_detail(environment: ServiceEnvironment) -> dict[str, Any]:
    return {
        "serviceEnvironmentName": environment.name,
        "serviceEnvironmentArn": environment.arn,
        "state": "ENABLED",
        "status": "VALID",
        **_without(environment.body, "serviceEnvironmentName"),
    }


def _queue_detail(queue: QueueRecord) -> dict[str, Any]:
    return {
        "jobQueueName": queue.name,
        "jobQueueArn": queue.arn,
        "state": "ENABLED",
        "status": "VALID",
        "computeEnvironmentOrder": [],
        **_without(queue.body, "jobQueueName"),
    }


def _share_detail(share: QuotaShareRecord) -> dict[str, Any]:
    return {
        "quotaShareName": share.name,
        "quotaShareArn": share.arn,
        "jobQueueArn": share.queue_arn,
        "state": "ENABLED",
        "status": "VALID",
        **_without(share.body, "quotaShareName"),
    }


def _engine_share(body: dict[str, Any]) -> QuotaShare:
    sharing = body["resourceSharingConfiguration"]
    return QuotaShare(
        name=body["quotaShareName"],
        capacity_limits={limit["capacityUnit"]: limit["maxCapacity"] for limit in body["capacityLimits"]},
        strategy=SharingStrategy(sharing["strategy"]),
        borrow_limit=sharing.get("borrowLimit", UNLIMITED_BORROW),
        in_share_preemption=body["preemptionConfiguration"]["inSharePreemption"] == "ENABLED",
        state=ShareState(body.get("state", "ENABLED")),
    )
