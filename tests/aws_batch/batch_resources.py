"""The emulator's AWS Batch resources: service environments, quota-share scheduling policies,
SAGEMAKER_TRAINING job queues and quota shares, as AWS Batch's API creates, updates and describes them
(an unknown name is left out of a Describe* answer, as AWS does).

Each Create* takes the request body as botocore sends it and each answer is a dict in the operation's
output shape (checked in the tests by ``output_shapes``). A job queue's capacity is the sum of its
service environments' ``capacityLimits``; ``engine_queue`` turns a job queue and its quota shares into
the engine's ``JobQueue``. No HTTP here (``moto_batch`` serves it) and no SageMaker (``service_jobs``).

What AWS refuses and botocore's validator lets through is refused here too: more than 5 capacity limits
in a quota share, more than 20 quota shares in a job queue, a capacity unit that is not a SageMaker
instance type (``ml.*``), a job queue priority outside 0..1000; a job queue naming a service environment
that is not VALID, a quota share on a job queue that is not VALID, an Update* of a resource still
CREATING or UPDATING.

By default every resource is visible and VALID as soon as it is created. ``behave(prefix, Behaviour(...))``
(the test's ``emulator_behaviour``, through ``moto_batch``'s EmulatorSettings route) makes the resources
whose name (a quota share: its job queue's name) starts with ``prefix`` fight back as AWS may: left out
of every Describe/List answer for ``invisible_s`` after their Create, CREATING for ``creating_s`` (then
VALID, or INVALID with ``invalid_reason``), UPDATING for ``updating_s`` after an Update* (these four for
the ``kinds`` named, or every kind), and an operation named in ``refuse`` answered with a
``ClientException`` of that message.
"""

from __future__ import annotations

import copy
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from airflow_quota.engine.config import AWS_MAX_CAPACITY_LIMITS_PER_SHARE
from airflow_quota.engine.model import UNLIMITED_BORROW, JobQueue, QuotaShare, ShareState, SharingStrategy

#: AWS Batch's limits that its service model does not state (research/quota-semantics.md 1.2, 1.3).
MAX_SHARES_PER_QUEUE = 20
MIN_QUEUE_PRIORITY, MAX_QUEUE_PRIORITY = 0, 1000


class BatchClientError(Exception):
    """AWS Batch's ``ClientException`` (HTTP 400): the request is wrong, and the message says how."""


@dataclass(frozen=True)
class Behaviour:
    """How the resources of one name prefix behave (``BatchResources.behave``); the default: as at once."""

    invisible_s: float = 0.0
    creating_s: float = 0.0
    updating_s: float = 0.0
    invalid_reason: str | None = None
    #: Operation name (``CreateQuotaShare``) -> the ClientException's message.
    refuse: dict[str, str] = field(default_factory=dict)
    #: The kinds (``jobQueues``, ``quotaShares``, ...) whose timeline this changes; empty: every kind.
    kinds: tuple[str, ...] = ()

    @classmethod
    def from_request(cls, body: dict[str, Any]) -> Behaviour:
        return cls(
            invisible_s=float(body.get("invisibleSeconds", 0)),
            creating_s=float(body.get("creatingSeconds", 0)),
            updating_s=float(body.get("updatingSeconds", 0)),
            invalid_reason=body.get("invalidReason"),
            refuse=dict(body.get("refuse") or {}),
            kinds=tuple(body.get("kinds") or ()),
        )


@dataclass
class Lifecycle:
    """When a resource shows up in answers and what status it has (times on ``time.time()``'s clock)."""

    visible_at: float = 0.0
    #: CREATING or UPDATING (``busy``) until then.
    settled_at: float = 0.0
    busy: str = "CREATING"
    invalid_reason: str | None = None

    def visible(self, now: float) -> bool:
        return now >= self.visible_at

    def status(self, now: float) -> str:
        if now < self.settled_at:
            return self.busy
        return "INVALID" if self.invalid_reason is not None else "VALID"


@dataclass
class ServiceEnvironment:
    name: str
    arn: str
    body: dict[str, Any]
    life: Lifecycle = field(default_factory=Lifecycle)


@dataclass
class SchedulingPolicy:
    name: str
    arn: str
    body: dict[str, Any]
    life: Lifecycle = field(default_factory=Lifecycle)


@dataclass
class QueueRecord:
    name: str
    arn: str
    body: dict[str, Any]
    #: The quota shares of this queue by name, in creation order.
    shares: dict[str, QuotaShareRecord] = field(default_factory=dict)
    life: Lifecycle = field(default_factory=Lifecycle)


@dataclass
class QuotaShareRecord:
    name: str
    arn: str
    queue_arn: str
    body: dict[str, Any]
    life: Lifecycle = field(default_factory=Lifecycle)


class BatchResources:
    """The resources of one account and region."""

    def __init__(self, account_id: str, region: str) -> None:
        self.arn_prefix = f"arn:aws:batch:{region}:{account_id}"
        self.environments: dict[str, ServiceEnvironment] = {}
        self.policies: dict[str, SchedulingPolicy] = {}
        self.queues: dict[str, QueueRecord] = {}
        #: Name prefix -> how its resources behave (``behave``).
        self.behaviours: dict[str, Behaviour] = {}

    # -- how resources behave ------------------------------------------------------------------------

    def behave(self, prefix: str, behaviour: Behaviour) -> None:
        """The resources whose name starts with ``prefix`` (a quota share: its job queue's) behave so from
        their next Create or Update on; a default ``Behaviour`` forgets the prefix."""
        if behaviour == Behaviour():
            self.behaviours.pop(prefix, None)
        else:
            self.behaviours[prefix] = behaviour

    def _behaviour(self, name: str) -> Behaviour:
        matching = [prefix for prefix in self.behaviours if name.startswith(prefix)]
        return self.behaviours[max(matching, key=len)] if matching else Behaviour()

    def _check_refused(self, operation: str, name: str) -> None:
        message = self._behaviour(name).refuse.get(operation)
        if message is not None:
            raise BatchClientError(message)

    def _timeline(self, name: str, kind: str) -> Behaviour:
        behaviour = self._behaviour(name)
        return behaviour if not behaviour.kinds or kind in behaviour.kinds else Behaviour()

    def _created(self, name: str, kind: str) -> Lifecycle:
        behaviour, now = self._timeline(name, kind), time.time()
        return Lifecycle(
            visible_at=now + behaviour.invisible_s,
            settled_at=now + behaviour.creating_s,
            invalid_reason=behaviour.invalid_reason,
        )

    def _updated(self, name: str, kind: str, life: Lifecycle, what: str) -> Lifecycle:
        """A resource's lifecycle after an Update*: refused while it is still CREATING or UPDATING."""
        now = time.time()
        status = life.status(now) if life.visible(now) else "CREATING"
        if status in ("CREATING", "UPDATING"):
            raise BatchClientError(f"{what} is {status}: update it once it is VALID")
        behaviour = self._timeline(name, kind)
        return Lifecycle(
            visible_at=life.visible_at,
            settled_at=now + behaviour.updating_s,
            busy="UPDATING",
            invalid_reason=life.invalid_reason,
        )

    # -- lookups: AWS takes a name or an ARN wherever it takes a reference ---------------------------

    def environment(self, reference: str) -> ServiceEnvironment:
        found = self.environments.get(_name_of(reference, "service-environment"))
        if found is None or not found.life.visible(time.time()):
            raise BatchClientError(f"Service environment {reference} does not exist")
        return found

    def queue(self, reference: str) -> QueueRecord:
        found = self.queues.get(_name_of(reference, "job-queue"))
        if found is None or not found.life.visible(time.time()):
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
        if found is None or not found.life.visible(time.time()):
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
        self._check_refused("CreateServiceEnvironment", name)
        if name in self.environments:
            raise BatchClientError(f"Service environment {name} already exists")
        _check_units(body["capacityLimits"])
        arn = f"{self.arn_prefix}:service-environment/{name}"
        self.environments[name] = ServiceEnvironment(
            name, arn, copy.deepcopy(body), self._created(name, "serviceEnvironments")
        )
        return {"serviceEnvironmentName": name, "serviceEnvironmentArn": arn}

    def describe_environments(self, references: list[str]) -> dict[str, Any]:
        """The named service environments that exist (like every Describe*, an unknown name is left out),
        or all of them."""
        now = time.time()
        chosen = (
            [
                self.environments[_name_of(r, "service-environment")]
                for r in references
                if self.has_environment(r)
            ]
            if references
            else list(self.environments.values())
        )
        return {"serviceEnvironments": [_environment_detail(e, now) for e in chosen if e.life.visible(now)]}

    def has_environment(self, reference: str) -> bool:
        return _name_of(reference, "service-environment") in self.environments

    def update_environment(self, body: dict[str, Any]) -> dict[str, Any]:
        """UpdateServiceEnvironment: its ``state`` and ``capacityLimits``, when given."""
        environment = self.environment(body["serviceEnvironment"])
        self._check_refused("UpdateServiceEnvironment", environment.name)
        _check_units(body.get("capacityLimits") or [])
        environment.life = self._updated(
            environment.name,
            "serviceEnvironments",
            environment.life,
            f"Service environment {environment.name}",
        )
        environment.body |= _without(body, "serviceEnvironment")
        return {"serviceEnvironmentName": environment.name, "serviceEnvironmentArn": environment.arn}

    # -- scheduling policies -------------------------------------------------------------------------

    def create_policy(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["name"]
        self._check_refused("CreateSchedulingPolicy", name)
        if name in self.policies:
            raise BatchClientError(f"Scheduling policy {name} already exists")
        arn = f"{self.arn_prefix}:scheduling-policy/{name}"
        self.policies[name] = SchedulingPolicy(
            name, arn, copy.deepcopy(body), self._created(name, "schedulingPolicies")
        )
        return {"name": name, "arn": arn}

    def describe_policies(self, arns: list[str]) -> list[dict[str, Any]]:
        now = time.time()
        found = [
            self.policies[_name_of(arn, "scheduling-policy")]
            for arn in arns
            if self.is_ours(arn, "scheduling-policy")
        ]
        return [
            {"name": p.name, "arn": p.arn, **_without(p.body, "name")} for p in found if p.life.visible(now)
        ]

    def policy_arns(self) -> list[str]:
        now = time.time()
        return [policy.arn for policy in self.policies.values() if policy.life.visible(now)]

    def visible_policy(self, reference: str) -> SchedulingPolicy | None:
        policy = self.policies.get(_name_of(reference, "scheduling-policy"))
        return policy if policy is not None and policy.life.visible(time.time()) else None

    def update_policy(self, body: dict[str, Any]) -> dict[str, Any]:
        """UpdateSchedulingPolicy of a quota-share policy: its ``quotaSharePolicy`` (AWS answers nothing)."""
        policy = self.visible_policy(body["arn"])
        if policy is None:
            raise BatchClientError(f"Scheduling policy {body['arn']} does not exist")
        self._check_refused("UpdateSchedulingPolicy", policy.name)
        if "fairsharePolicy" in body:
            raise BatchClientError(
                "fairsharePolicy: this scheduling policy has a quotaSharePolicy; a policy keeps its kind"
            )
        policy.body |= _without(body, "arn")
        return {}

    # -- job queues ----------------------------------------------------------------------------------

    def create_queue(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["jobQueueName"]
        self._check_refused("CreateJobQueue", name)
        if name in self.queues:
            raise BatchClientError(f"Job queue {name} already exists")
        _check_priority(body)
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
            entry["serviceEnvironment"] = self.valid_environment(entry["serviceEnvironment"]).arn
        policy_arn = body.get("schedulingPolicyArn")
        if policy_arn is not None and self.visible_policy(policy_arn) is None:
            raise BatchClientError(f"Scheduling policy {policy_arn} does not exist")
        arn = f"{self.arn_prefix}:job-queue/{name}"
        self.queues[name] = QueueRecord(name, arn, stored, life=self._created(name, "jobQueues"))
        return {"jobQueueName": name, "jobQueueArn": arn}

    def update_queue(self, body: dict[str, Any]) -> dict[str, Any]:
        """UpdateJobQueue of a SAGEMAKER_TRAINING queue: state, priority, schedulingPolicyArn and
        serviceEnvironmentOrder, when given."""
        queue = self.queue(body["jobQueue"])
        self._check_refused("UpdateJobQueue", queue.name)
        if body.get("computeEnvironmentOrder"):
            raise BatchClientError("computeEnvironmentOrder: a SAGEMAKER_TRAINING job queue has none")
        _check_priority(body)
        changes = _without(body, "jobQueue")
        for entry in changes.get("serviceEnvironmentOrder") or []:
            entry["serviceEnvironment"] = self.valid_environment(entry["serviceEnvironment"]).arn
        policy_arn = changes.get("schedulingPolicyArn")
        if policy_arn is not None and self.visible_policy(policy_arn) is None:
            raise BatchClientError(f"schedulingPolicyArn: scheduling policy {policy_arn} does not exist")
        queue.life = self._updated(queue.name, "jobQueues", queue.life, f"Job queue {queue.name}")
        queue.body |= changes
        return {"jobQueueName": queue.name, "jobQueueArn": queue.arn}

    def describe_queues(self, references: list[str]) -> list[dict[str, Any]]:
        now = time.time()
        chosen = (
            [self.queues[_name_of(r, "job-queue")] for r in references if self.is_ours(r, "job-queue")]
            if references
            else list(self.queues.values())
        )
        return [_queue_detail(q, now) for q in chosen if q.life.visible(now)]

    def valid_environment(self, reference: str) -> ServiceEnvironment:
        """A service environment a job queue may name: it must be VALID, as AWS requires."""
        environment = self.environment(reference)
        status = environment.life.status(time.time())
        if status != "VALID":
            raise BatchClientError(
                f"Service environment {environment.name} is {status}: a job queue can use it once it is VALID"
            )
        return environment

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
        self._check_refused("CreateQuotaShare", queue.name)
        queue_status = queue.life.status(time.time())
        if queue_status != "VALID":
            raise BatchClientError(
                f"Job queue {queue.name} is {queue_status}: create its quota shares once it is VALID"
            )
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
        if len(queue.shares) >= MAX_SHARES_PER_QUEUE:
            raise BatchClientError(
                f"Job queue {queue.name} has {len(queue.shares)} quota shares: a job queue has at most "
                f"{MAX_SHARES_PER_QUEUE}"
            )
        _check_share_limits(body)
        arn = f"{queue.arn}/quota-share/{name}"
        queue.shares[name] = QuotaShareRecord(
            name, arn, queue.arn, _without(body, "jobQueue"), self._created(queue.name, "quotaShares")
        )
        return {"quotaShareName": name, "quotaShareArn": arn}

    def update_share(self, body: dict[str, Any]) -> dict[str, Any]:
        share = self.share(body["quotaShareArn"])
        queue_name = _name_of(share.queue_arn, "job-queue")
        self._check_refused("UpdateQuotaShare", queue_name)
        updated = {**share.body, **_without(body, "quotaShareArn")}
        _check_share_limits(updated)
        share.life = self._updated(queue_name, "quotaShares", share.life, f"Quota share {share.name}")
        share.body = updated
        return {"quotaShareName": share.name, "quotaShareArn": share.arn}

    def describe_share(self, arn: str) -> dict[str, Any]:
        return _share_detail(self.share(arn), time.time())

    def list_shares(self, queue_reference: str) -> dict[str, Any]:
        queue, now = self.queue(queue_reference), time.time()
        return {
            "quotaShares": [
                _without(_share_detail(s, now), "tags") for s in queue.shares.values() if s.life.visible(now)
            ]
        }

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
    _check_units(body["capacityLimits"])
    _check_borrow_limit(body)


def _check_units(limits: list[dict[str, Any]]) -> None:
    """A quota-management capacity unit is a SageMaker instance type (the user guide: ``ml.m5.large``)."""
    for limit in limits:
        unit = limit.get("capacityUnit", "")
        if not unit.startswith("ml."):
            raise BatchClientError(
                f"capacityUnit {unit} is not a SageMaker instance type: give one such as ml.g5.xlarge"
            )


def _check_priority(body: dict[str, Any]) -> None:
    priority = body.get("priority")
    if priority is not None and not MIN_QUEUE_PRIORITY <= priority <= MAX_QUEUE_PRIORITY:
        raise BatchClientError(
            f"priority {priority}: a job queue's priority is {MIN_QUEUE_PRIORITY} to {MAX_QUEUE_PRIORITY}"
        )


def _check_borrow_limit(body: dict[str, Any]) -> None:
    sharing = body["resourceSharingConfiguration"]
    if "borrowLimit" in sharing and sharing["strategy"] != "LEND_AND_BORROW":
        raise BatchClientError("borrowLimit is only allowed with the LEND_AND_BORROW strategy")


def _environment_detail(environment: ServiceEnvironment, now: float) -> dict[str, Any]:
    return {
        "serviceEnvironmentName": environment.name,
        "serviceEnvironmentArn": environment.arn,
        "state": "ENABLED",
        "status": environment.life.status(now),
        **_without(environment.body, "serviceEnvironmentName"),
    }


def _queue_detail(queue: QueueRecord, now: float) -> dict[str, Any]:
    status = queue.life.status(now)
    reason = {"VALID": "JobQueue Healthy", "INVALID": queue.life.invalid_reason}.get(status, status.title())
    return {
        "jobQueueName": queue.name,
        "jobQueueArn": queue.arn,
        "state": "ENABLED",
        "status": status,
        "statusReason": reason,
        "computeEnvironmentOrder": [],
        **_without(queue.body, "jobQueueName"),
    }


def _share_detail(share: QuotaShareRecord, now: float) -> dict[str, Any]:
    return {
        "quotaShareName": share.name,
        "quotaShareArn": share.arn,
        "jobQueueArn": share.queue_arn,
        "state": "ENABLED",
        "status": share.life.status(now),
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
