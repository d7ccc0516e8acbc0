"""A quota design in AWS Batch's documents and in our quota file: import one into the other, export back.

AWS spreads a job queue's design over four resources: a service environment holds the capacity
(``capacityLimits``), a ``SAGEMAKER_TRAINING`` job queue names it in ``serviceEnvironmentOrder`` and a
scheduling policy with a ``quotaSharePolicy`` in ``schedulingPolicyArn``, and quota shares name the job
queue. Our quota file nests the same fields: a job queue's ``capacityLimits`` are its service environment's,
its ``quotaShares`` are CreateQuotaShare's bodies without ``jobQueue`` and ``tags``.

``import_design`` (here) reads any mix of Create* request bodies (as ``--cli-input-json`` takes them) and the
answers of DescribeServiceEnvironments, DescribeSchedulingPolicies, DescribeJobQueues, ListQuotaShares and
DescribeQuotaShare. Each document is first checked by botocore's own validator; ARNs are resolved to
names; ``status`` and ``statusReason`` are ignored; a job queue's ``airflow-quota:scheduler`` tag is its
``scheduler``, and its ``priority``, ``state``, scheduling policy and service environment are kept as the
job queue's optional fields where they differ from what export writes by default (``priority: 1``,
``ENABLED``, both named after the job queue); what our file cannot express (other tags, a DISABLED service
environment) is returned as a note at its field's path. Every refusal
names the field's path in the AWS document and the fix. ``aws_batch.export`` writes the four request
bodies back; ``aws_batch.portability`` says what AWS Batch treats differently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_quota.aws_batch.botocore_model import (
    KINDS,
    Kind,
    answer_shape,
    request_shape,
    shape_issues,
    unknown_answer_keys,
)
from airflow_quota.aws_batch.portability import aws_refusals, portability_warnings
from airflow_quota.engine.config import (
    ConfigIssue,
    QuotaConfig,
    QuotaConfigError,
    parse_quota_config,
)
from airflow_quota.engine.messages import join_path

SAGEMAKER_TRAINING = "SAGEMAKER_TRAINING"
#: What export writes for a job queue's priority when the file gives none (and import leaves out).
DEFAULT_QUEUE_PRIORITY = 1
#: The job queue's tag that carries our ``scheduler`` (AWS Batch has no field for who schedules a queue).
SCHEDULER_TAG = "airflow-quota:scheduler"

#: Keys of an answer that are about the call, not the design.
_CALL_KEYS = frozenset({"nextToken", "ResponseMetadata"})
#: The key that names a resource in its request body, per kind.
NAME_KEY: dict[Kind, str] = {
    "serviceEnvironments": "serviceEnvironmentName",
    "schedulingPolicies": "name",
    "jobQueues": "jobQueueName",
    "quotaShares": "quotaShareName",
}
#: The key of AWS's answer that holds a resource's ARN (a key only an answer carries), per kind.
ARN_KEY: dict[Kind, str] = {
    "serviceEnvironments": "serviceEnvironmentArn",
    "schedulingPolicies": "arn",
    "jobQueues": "jobQueueArn",
    "quotaShares": "quotaShareArn",
}
#: Top-level keys that only AWS documents have: lists of resources, and what names one resource.
_AWS_TOP_KEYS = frozenset({*KINDS, *NAME_KEY.values(), *ARN_KEY.values(), *_CALL_KEYS} - {"jobQueues"})
#: The order a lone body's kind is recognised in: a quota share's answer also holds jobQueueArn.
_SINGLE_BODY_ORDER: tuple[Kind, ...] = (
    "quotaShares",
    "serviceEnvironments",
    "jobQueues",
    "schedulingPolicies",
)
#: Keys of a CreateJobQueue body or DescribeJobQueues item that our quota file's job queue never has.
_AWS_QUEUE_KEYS = frozenset(
    {"jobQueueArn", "priority", "jobQueueType", "serviceEnvironmentOrder", "computeEnvironmentOrder",
     "schedulingPolicyArn", "status", "statusReason", "jobStateTimeLimitActions", "tags", "state"}
)  # fmt: skip
#: The fields of a quota share our file keeps, in its order.
_SHARE_FIELDS = (
    "quotaShareName",
    "capacityLimits",
    "resourceSharingConfiguration",
    "preemptionConfiguration",
    "state",
)


@dataclass(frozen=True)
class Resource:
    """One AWS resource from one document: its kind, its body, and where it is (for messages)."""

    kind: Kind
    body: Mapping[str, Any]
    where: str
    answer: bool

    @property
    def name(self) -> str | None:
        name = self.body.get(NAME_KEY[self.kind])
        if isinstance(name, str):
            return name
        arn = self.body.get(ARN_KEY[self.kind])
        return name_of(arn) if isinstance(arn, str) else None


@dataclass
class QuotaDesign:
    """A validated design: the quota file's model and document, and for AWS documents what was not kept.

    ``origins`` maps a path of ``document`` (``jobQueues[0].quotaShares[1]``) to the AWS document's path it
    came from, so warnings about the design point into the files the user gave.
    """

    config: QuotaConfig
    document: dict[str, Any]
    notes: list[ConfigIssue] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)

    def aws_path(self, path: str) -> str:
        """``path`` of our document as the path in the AWS document it came from (itself for a quota file)."""
        return _translate(path, self.origins)

    def warnings(self) -> list[ConfigIssue]:
        """What AWS Batch treats differently (``portability_warnings``), then what the import did not keep."""
        moved = [
            ConfigIssue(self.aws_path(issue.path), issue.message)
            for issue in portability_warnings(self.config)
        ]
        return [*moved, *self.notes]

    def aws_refusals(self) -> list[ConfigIssue]:
        """What AWS Batch would refuse (``portability.aws_refusals``), at the paths of the files given."""
        return [ConfigIssue(self.aws_path(issue.path), issue.message) for issue in aws_refusals(self.config)]


# --- recognising documents ----------------------------------------------------------------------------


def is_aws_document(document: Mapping[str, Any]) -> bool:
    """Whether a file's top-level mapping is an AWS document rather than our quota file.

    Our quota file holds only ``jobQueues``, each with ``quotaShares``; a DescribeJobQueues answer or an
    export holds job queues with AWS's own keys (``jobQueueArn``, ``serviceEnvironmentOrder``, ...). Any
    other mapping is read as a quota file, so its mistakes get the quota file's messages.
    """
    keys = set(document)
    if keys & _AWS_TOP_KEYS:
        return True
    queues = document.get("jobQueues")
    return isinstance(queues, list) and any(
        isinstance(queue, Mapping) and "quotaShares" not in queue and bool(_AWS_QUEUE_KEYS & set(queue))
        for queue in queues
    )


def resources_in(document: Mapping[str, Any], prefix: str) -> tuple[list[Resource], list[ConfigIssue]]:
    """The resources one AWS document holds: a list of them per kind (an answer or an export), or one
    request body (or DescribeQuotaShare's answer) on its own."""
    listed = [key for key in KINDS if key in document]
    if listed:
        resources: list[Resource] = []
        issues: list[ConfigIssue] = []
        for key in document:
            if key not in KINDS and key not in _CALL_KEYS:
                issues.append(
                    ConfigIssue(
                        join_path(prefix, key),
                        f"{key} is not one of {', '.join(KINDS)}: remove it, or give it as a file of its own",
                    )
                )
        for kind in listed:
            items = document[kind]
            if not isinstance(items, list):
                issues.append(ConfigIssue(join_path(prefix, kind), f"{kind} must be a list of {kind}"))
                continue
            for index, item in enumerate(items):
                where = join_path(prefix, f"{kind}[{index}]")
                if not isinstance(item, Mapping):
                    issues.append(ConfigIssue(where, f"each of {kind} must be a mapping (key: value pairs)"))
                    continue
                resources.append(Resource(kind, item, where, _is_answer(kind, item)))
        return resources, issues
    body = {key: value for key, value in document.items() if key not in _CALL_KEYS}
    for kind in _SINGLE_BODY_ORDER:
        if NAME_KEY[kind] in body or ARN_KEY[kind] in body:
            return [Resource(kind, body, prefix, _is_answer(kind, body))], []
    return [], [
        ConfigIssue(
            prefix,
            "this is not an AWS Batch document we read: give a quota file (jobQueues with quotaShares), a "
            "Create{ServiceEnvironment,SchedulingPolicy,JobQueue,QuotaShare} request body, or the answer "
            "of DescribeServiceEnvironments, DescribeSchedulingPolicies, DescribeJobQueues, "
            "ListQuotaShares or DescribeQuotaShare",
        )
    ]


def _is_answer(kind: Kind, body: Mapping[str, Any]) -> bool:
    """Whether a resource's body is AWS's answer: it holds a key only the answer has (an ARN, status)."""
    answer_only = set(answer_shape(kind).members) - set(request_shape(kind).members)
    return bool(answer_only & set(body))


def name_of(name_or_arn: str) -> str:
    """A resource's name from its name or ARN (``arn:aws:batch:...:job-queue/gpu`` -> ``gpu``)."""
    if not name_or_arn.startswith("arn:"):
        return name_or_arn
    if "/quota-share/" in name_or_arn:
        return name_or_arn.rsplit("/quota-share/", 1)[1]
    return name_or_arn.rsplit("/", 1)[-1]


def _queue_of_share(body: Mapping[str, Any]) -> str | None:
    for key in ("jobQueue", "jobQueueArn"):
        value = body.get(key)
        if isinstance(value, str):
            return name_of(value)
    arn = body.get("quotaShareArn")
    if isinstance(arn, str) and "/quota-share/" in arn:
        return name_of(arn.rsplit("/quota-share/", 1)[0])
    return None


# --- import ---------------------------------------------------------------------------------------------


def import_design(documents: Sequence[tuple[str, Mapping[str, Any]]]) -> QuotaDesign:
    """Our quota design from AWS documents, given as (file name, top-level mapping); ``QuotaConfigError``
    lists every refusal, each at its path in the AWS document (``file:path`` when several files are given).
    """
    source = ", ".join(name for name, _ in documents)
    several = len(documents) > 1
    resources: list[Resource] = []
    issues: list[ConfigIssue] = []
    notes: list[ConfigIssue] = []
    for name, document in documents:
        found, problems = resources_in(document, f"{name}:" if several else "")
        resources += found
        issues += problems
    for resource in resources:
        shape = answer_shape(resource.kind) if resource.answer else request_shape(resource.kind)
        issues += shape_issues(resource.body, shape, resource.where, answer=resource.answer)
        if resource.answer:
            notes += [
                ConfigIssue(path, "not in the installed botocore's model of this answer: ignored")
                for path in unknown_answer_keys(resource.body, shape, resource.where)
            ]
    if issues:
        raise QuotaConfigError(source, [_without_colon_prefix(issue) for issue in issues])

    by_kind, issues = _one_per_name(resources)
    document, origins, join_issues, join_notes = _join(by_kind)
    issues += join_issues
    notes += join_notes
    if issues:
        raise QuotaConfigError(source, [_without_colon_prefix(issue) for issue in issues])
    try:
        config = parse_quota_config(document, source)
    except QuotaConfigError as error:
        moved = [
            _without_colon_prefix(ConfigIssue(_translate(i.path, origins), i.message)) for i in error.issues
        ]
        raise QuotaConfigError(source, moved) from error
    return QuotaDesign(
        config=config,
        document=document,
        notes=[_without_colon_prefix(note) for note in notes],
        origins=origins,
    )


def _one_per_name(resources: Iterable[Resource]) -> tuple[dict[Kind, list[Resource]], list[ConfigIssue]]:
    """Resources per kind, each name once: a copy that says the same is dropped, one that differs refused."""
    by_kind: dict[Kind, list[Resource]] = {kind: [] for kind in KINDS}
    seen: dict[tuple[Kind, str | None, str | None], Resource] = {}
    issues: list[ConfigIssue] = []
    for resource in resources:
        queue = _queue_of_share(resource.body) if resource.kind == "quotaShares" else None
        key = (resource.kind, queue, resource.name)
        first = seen.get(key)
        if first is None or resource.name is None:
            seen[key] = resource
            by_kind[resource.kind].append(resource)
        elif _design_fields(first) != _design_fields(resource):
            issues.append(
                ConfigIssue(
                    resource.where or "(top level)",
                    f"{NAME_KEY[resource.kind]} {resource.name} is also at "
                    f"{_without_colon_prefix_path(first.where) or 'the top level'} "
                    "with other values: keep one of them",
                )
            )
    return by_kind, issues


def _design_fields(resource: Resource) -> str:
    """What a resource says about the design: not its own ARN, status or tags, nor empty lists an answer
    adds (a SageMaker job queue's ``computeEnvironmentOrder: []``); another resource's ARN as its name."""
    ignored = {"status", "statusReason", "tags", *ARN_KEY.values(), "jobQueue", "jobQueueArn"}
    fields = {k: v for k, v in resource.body.items() if k not in ignored and v not in (None, [], {})}
    return json.dumps(_arns_as_names(fields), sort_keys=True, default=str)


def _arns_as_names(value: Any) -> Any:
    if isinstance(value, str):
        return name_of(value)
    if isinstance(value, Mapping):
        return {key: _arns_as_names(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_arns_as_names(item) for item in value]
    return value


def _join(
    by_kind: Mapping[Kind, list[Resource]],
) -> tuple[dict[str, Any], dict[str, str], list[ConfigIssue], list[ConfigIssue]]:
    """Our quota file from the resources: one job queue per AWS job queue, its capacity from its service
    environment, its shares those that name it. Returns (document, origins, issues, notes)."""
    environments = {r.name: r for r in by_kind["serviceEnvironments"] if r.name is not None}
    policies = {r.name: r for r in by_kind["schedulingPolicies"] if r.name is not None}
    queue_names = {r.name for r in by_kind["jobQueues"]}
    issues: list[ConfigIssue] = []
    notes: list[ConfigIssue] = []
    shares_of: dict[str, list[Resource]] = {}
    for share in by_kind["quotaShares"]:
        queue_name = _queue_of_share(share.body)
        if queue_name is None or queue_name not in queue_names:
            field_name = "jobQueueArn" if share.answer else "jobQueue"
            what = (
                f"job queue {queue_name} is not among the documents"
                if queue_name
                else "it names no job queue"
            )
            issues.append(
                ConfigIssue(
                    join_path(share.where, field_name),
                    f"quota share {share.name}: {what}: add its CreateJobQueue body or DescribeJobQueues "
                    "answer (and its service environment's)",
                )
            )
            continue
        shares_of.setdefault(queue_name, []).append(share)

    queues: list[dict[str, Any]] = []
    origins: dict[str, str] = {}
    environment_user: dict[str, str] = {}
    used_policies: set[str] = set()
    for queue in by_kind["jobQueues"]:
        body = queue.body
        where = queue.where
        name = queue.name
        path = f"jobQueues[{len(queues)}]"
        notes += _not_expressed(queue, "job queue")
        if body.get("computeEnvironmentOrder"):
            issues.append(
                ConfigIssue(
                    join_path(where, "computeEnvironmentOrder"),
                    f"job queue {name} runs container jobs on compute environments: quota shares exist only "
                    f"on {SAGEMAKER_TRAINING} job queues with a serviceEnvironmentOrder; remove "
                    "computeEnvironmentOrder",
                )
            )
            continue
        if body.get("jobQueueType", SAGEMAKER_TRAINING) != SAGEMAKER_TRAINING:
            issues.append(
                ConfigIssue(
                    join_path(where, "jobQueueType"),
                    f"job queue {name} is of type {body.get('jobQueueType')}: quota shares exist only on "
                    f"{SAGEMAKER_TRAINING} job queues; set jobQueueType: {SAGEMAKER_TRAINING}, or leave "
                    "this document out",
                )
            )
            continue
        policy_issue = _policy_issue(queue, policies, used_policies)
        if policy_issue is not None:
            (notes if policy_issue.message.startswith("assumed") else issues).append(policy_issue)
        environment, environment_issue = _environment_of(queue, environments, environment_user)
        if environment_issue is not None:
            issues.append(environment_issue)
        shares = shares_of.get(name or "", [])
        if not shares:
            issues.append(
                ConfigIssue(
                    where or "(top level)",
                    f"job queue {name} has no quota shares among the documents: add its quota shares "
                    f"(aws batch list-quota-shares --job-queue {name}) or CreateQuotaShare bodies",
                )
            )
        if environment is None or not shares:
            continue
        notes += _not_expressed(environment, "service environment")
        origins[path] = where
        origins[f"{path}.capacityLimits"] = join_path(environment.where, "capacityLimits")
        origins[f"{path}.quotaShares"] = join_path(environment.where, "capacityLimits")
        our_shares = []
        for index, share in enumerate(shares):
            origins[f"{path}.quotaShares[{index}]"] = share.where
            notes += _not_expressed(share, "quota share")
            our_shares.append(
                {key: _unit_first(share.body[key]) for key in _SHARE_FIELDS if key in share.body}
            )
        our_queue: dict[str, Any] = {
            "jobQueueName": name,
            "capacityLimits": _unit_first(environment.body.get("capacityLimits")),
            "quotaShares": our_shares,
        }
        scheduler = (body.get("tags") or {}).get(SCHEDULER_TAG)
        if scheduler is not None:
            our_queue["scheduler"] = scheduler
            origins[f"{path}.scheduler"] = join_path(where, f"tags.{SCHEDULER_TAG}")
        for key, value in _kept_queue_fields(queue, environment).items():
            our_queue[key] = value
            origins[f"{path}.{key}"] = join_path(where, key)
        queues.append(our_queue)
    for environment in by_kind["serviceEnvironments"]:
        if environment.name not in environment_user:
            notes.append(
                _unused(environment, "service environment", "no job queue among the documents names it")
            )
    for policy in by_kind["schedulingPolicies"]:
        if policy.name not in used_policies:
            notes.append(_unused(policy, "scheduling policy", "no job queue among the documents names it"))
        else:
            notes += _not_expressed(policy, "scheduling policy")
    if not queues and not issues:
        issues.append(
            ConfigIssue(
                "",
                "the documents hold no job queue: add a CreateJobQueue body or DescribeJobQueues answer for "
                "each job queue, with its service environment and quota shares",
            )
        )
    return {"jobQueues": queues}, origins, issues, notes


def _kept_queue_fields(queue: Resource, environment: Resource) -> dict[str, Any]:
    """The job queue's own AWS fields our file keeps, where they differ from export's defaults: its
    ``priority``, a DISABLED ``state``, its scheduling policy's and service environment's names."""
    body, name = queue.body, queue.name
    kept: dict[str, Any] = {}
    priority = body.get("priority")
    if isinstance(priority, int) and priority != DEFAULT_QUEUE_PRIORITY:
        kept["priority"] = priority
    if body.get("state") == "DISABLED":
        kept["state"] = "DISABLED"
    policy = body.get("schedulingPolicyArn")
    if isinstance(policy, str) and name_of(policy) != name:
        kept["schedulingPolicyArn"] = name_of(policy)
    actions = body.get("jobStateTimeLimitActions")
    if actions:  # the allocator applies them too, on a queue it schedules
        kept["jobStateTimeLimitActions"] = actions
    order = body["serviceEnvironmentOrder"][0].get("order", 1)
    if environment.name != name or order != 1:
        kept["serviceEnvironmentOrder"] = [{"order": order, "serviceEnvironment": environment.name}]
    return kept


def _unit_first(limits: Any) -> Any:
    """Capacity limits with ``capacityUnit`` before ``maxCapacity``, as our quota file writes them (any
    other value as it is)."""
    if not isinstance(limits, list):
        return limits
    order = {"capacityUnit": 0, "maxCapacity": 1}
    return [
        dict(sorted(limit.items(), key=lambda item: order.get(item[0], 2)))
        if isinstance(limit, Mapping)
        else limit
        for limit in limits
    ]


def _environment_of(
    queue: Resource, environments: Mapping[str, Resource], environment_user: dict[str, str]
) -> tuple[Resource | None, ConfigIssue | None]:
    """The one service environment a job queue uses, or why it has none we can use."""
    order = queue.body.get("serviceEnvironmentOrder") or []
    where = join_path(queue.where, "serviceEnvironmentOrder")
    if not order:
        return None, ConfigIssue(
            where,
            f"job queue {queue.name} names no service environment: add serviceEnvironmentOrder "
            "[{order: 1, serviceEnvironment: NAME}] and that service environment's document",
        )
    if len(order) > 1:
        return None, ConfigIssue(
            where,
            f"job queue {queue.name} uses {len(order)} service environments: our quota file gives a job "
            "queue one capacity, so keep one service environment per job queue",
        )
    environment_name = name_of(order[0]["serviceEnvironment"])
    entry_where = join_path(where, "[0].serviceEnvironment")
    environment = environments.get(environment_name)
    if environment is None:
        return None, ConfigIssue(
            entry_where,
            f"service environment {environment_name} is not among the documents: add its "
            "CreateServiceEnvironment body or the DescribeServiceEnvironments answer",
        )
    other = environment_user.get(environment_name)
    if other is not None:
        return None, ConfigIssue(
            entry_where,
            f"service environment {environment_name} is also used by job queue {other}: our quota file "
            "gives each job queue its own capacity, so give each job queue its own service environment",
        )
    environment_user[environment_name] = queue.name or ""
    kind = environment.body.get("serviceEnvironmentType")
    if kind != SAGEMAKER_TRAINING:
        return None, ConfigIssue(
            join_path(environment.where, "serviceEnvironmentType"),
            f"serviceEnvironmentType is {kind}: set it to {SAGEMAKER_TRAINING}",
        )
    return environment, None


def _policy_issue(
    queue: Resource, policies: Mapping[str, Resource], used_policies: set[str]
) -> ConfigIssue | None:
    """Why the job queue's scheduling policy cannot carry quota shares (or a note that it was not given)."""
    arn = queue.body.get("schedulingPolicyArn")
    where = join_path(queue.where, "schedulingPolicyArn")
    if not isinstance(arn, str):
        return ConfigIssue(
            where,
            f"job queue {queue.name} has no scheduling policy: AWS Batch attaches quota shares only to a job "
            "queue whose scheduling policy has a quotaSharePolicy; set schedulingPolicyArn to one",
        )
    name = name_of(arn)
    used_policies.add(name)
    policy = policies.get(name)
    if policy is None:
        return ConfigIssue(
            where,
            f"assumed to be a quotaSharePolicy scheduling policy: {name} is not among the documents",
        )
    if "quotaSharePolicy" not in policy.body or "fairsharePolicy" in policy.body:
        return ConfigIssue(
            join_path(policy.where, "quotaSharePolicy"),
            f"scheduling policy {name} must hold a quotaSharePolicy and no fairsharePolicy to carry quota "
            "shares: give it quotaSharePolicy {idleResourceAssignmentStrategy: FIFO} only",
        )
    return None


def _not_expressed(resource: Resource, what: str) -> list[ConfigIssue]:
    notes = []
    tags = resource.body.get("tags") or {}
    if resource.kind == "jobQueues" and isinstance(tags, Mapping):
        tags = {key: value for key, value in tags.items() if key != SCHEDULER_TAG}  # kept: the scheduler
    if tags:
        notes.append(ConfigIssue(join_path(resource.where, "tags"), f"the {what}'s tags are not kept"))
    if resource.kind == "serviceEnvironments" and resource.body.get("state") == "DISABLED":
        notes.append(
            ConfigIssue(
                join_path(resource.where, "state"),
                f"the {what} is DISABLED: our quota file has no state for it (export writes ENABLED; "
                "apply --to-aws leaves the state AWS Batch has)",
            )
        )
    return notes


def _unused(resource: Resource, what: str, why: str) -> ConfigIssue:
    return ConfigIssue(resource.where or "(top level)", f"{what} {resource.name} is ignored: {why}")


def _translate(path: str, origins: Mapping[str, str]) -> str:
    """Replace the longest prefix of ``path`` that ``origins`` knows (at a field or index boundary)."""
    for prefix in sorted(origins, key=len, reverse=True):
        if path == prefix or path.startswith((f"{prefix}.", f"{prefix}[")):
            return _without_colon_prefix_path(origins[prefix] + path[len(prefix) :])
    return path


def _without_colon_prefix(issue: ConfigIssue) -> ConfigIssue:
    return ConfigIssue(_without_colon_prefix_path(issue.path), issue.message)


def _without_colon_prefix_path(path: str) -> str:
    """``file:.x`` (a field of a single-body file) reads ``file:x``, and ``file:`` (all of it) ``file``."""
    return path.replace(":.", ":").removesuffix(":")
