"""What ``airflow quota apply --to-aws`` would change in AWS Batch: the export's request bodies against what
AWS has, per resource (pure: no AWS call here).

Each resource of the export is new (a Create* request), changed (an Update* request with the changed fields
only, each shown old -> new) or unchanged: an existing resource is updated in place, never replaced. Which
fields an Update* takes is read from the installed botocore model; a change to a field no Update* takes (a
service environment's type, a job queue's type) is a refusal named by field, found before anything is sent.
A job queue's tags are set with TagResource (tags are only ever added or overwritten). Quota shares AWS has
in a job queue of the file that the file leaves out are listed apart: apply never deletes.

What the file leaves out is left as AWS has it (``export.defaulted_fields``): an existing job queue keeps
its priority and state, and the service environment and scheduling policy it uses (the export's bodies are
renamed to theirs); a service environment keeps its state. An update that lowers something (a capacity, a
borrow limit, a sharing strategy, a priority, ENABLED -> DISABLED) or re-points a job queue (another
scheduling policy or service environment) is ``guarded``: apply refuses it unless its flag names it.
``plan_calls`` lists every AWS call the changes take, in order, the waits included.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from airflow_quota.aws_batch.botocore_model import KINDS, Kind, batch_model
from airflow_quota.aws_batch.design import ARN_KEY, NAME_KEY, name_of

#: How each kind is named in messages.
KIND_NOUN: dict[Kind, str] = {
    "serviceEnvironments": "service environment",
    "schedulingPolicies": "scheduling policy",
    "jobQueues": "job queue",
    "quotaShares": "quota share",
}
CREATE_OPERATION: dict[Kind, str] = {
    "serviceEnvironments": "CreateServiceEnvironment",
    "schedulingPolicies": "CreateSchedulingPolicy",
    "jobQueues": "CreateJobQueue",
    "quotaShares": "CreateQuotaShare",
}
UPDATE_OPERATION: dict[Kind, str] = {
    "serviceEnvironments": "UpdateServiceEnvironment",
    "schedulingPolicies": "UpdateSchedulingPolicy",
    "jobQueues": "UpdateJobQueue",
    "quotaShares": "UpdateQuotaShare",
}
#: The Update* request's key that says which resource (its value: the ARN, ``ARN_KEY`` of AWS's answer).
UPDATE_IDENTITY: dict[Kind, str] = {
    "serviceEnvironments": "serviceEnvironment",
    "schedulingPolicies": "arn",
    "jobQueues": "jobQueue",
    "quotaShares": "quotaShareArn",
}

#: What answers whether a resource has settled after its Create*/Update* (``plan_calls``' waits).
WAIT_OPERATION: dict[Kind, str] = {
    "serviceEnvironments": "DescribeServiceEnvironments",
    "schedulingPolicies": "DescribeSchedulingPolicies",
    "jobQueues": "DescribeJobQueues",
    "quotaShares": "ListQuotaShares",
}

Action = Literal["create", "update", "unchanged"]
#: Why an update needs a flag: it lowers something, or re-points a job queue.
Guard = Literal["lower", "repoint"]
GUARD_FLAG: dict[Guard, str] = {"lower": "--allow-lower", "repoint": "--allow-repoint"}
#: Sharing strategies from the least to the most sharing: a move down is a lowering.
_STRATEGY_RANK = {"RESERVE": 0, "LEND": 1, "LEND_AND_BORROW": 2}


@dataclass(frozen=True)
class FieldChange:
    """One field (a dotted path; capacity limits by unit: ``capacityLimits.ml.g5.xlarge``) old -> new;
    ``old`` is None for a field AWS does not have yet, ``new`` for a capacity unit the file drops."""

    path: str
    old: Any
    new: Any


@dataclass(frozen=True)
class ResourceChange:
    kind: Kind
    name: str
    #: The job queue of a quota share (None for the other kinds).
    job_queue_name: str | None
    action: Action
    #: Every field of the file's body (create) or each changed one (update); none when unchanged.
    fields: tuple[FieldChange, ...]
    #: The request body to send (Create* or Update*); None when unchanged.
    request: dict[str, Any] | None
    #: Tags to add or overwrite with TagResource (a job queue's), None when they already match.
    tags: dict[str, str] | None = None
    #: The resource's ARN in AWS (None until it is created).
    arn: str | None = None

    @property
    def operation(self) -> str | None:
        if self.action == "unchanged":
            return None
        return (CREATE_OPERATION if self.action == "create" else UPDATE_OPERATION)[self.kind]

    @property
    def title(self) -> str:
        where = "" if self.job_queue_name is None else f" (job queue {self.job_queue_name})"
        return f"{KIND_NOUN[self.kind]} {self.name}{where}"


@dataclass(frozen=True)
class LeftOut:
    """A resource AWS has that the file does not name: reported, kept."""

    kind: Kind
    name: str
    job_queue_name: str | None

    @property
    def title(self) -> str:
        where = "" if self.job_queue_name is None else f" (job queue {self.job_queue_name})"
        return f"{KIND_NOUN[self.kind]} {self.name}{where}"


@dataclass(frozen=True)
class GuardedChange:
    """An update that lowers something or re-points a job queue: sent only when its flag is given."""

    guard: Guard
    message: str


@dataclass
class ApplyPlan:
    #: In dependency order: service environments, scheduling policies, job queues, quota shares.
    changes: list[ResourceChange] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    #: Changes AWS has no Update* for (or that apply never makes), each naming its field and the fix.
    refusals: list[str] = field(default_factory=list)
    guarded: list[GuardedChange] = field(default_factory=list)

    def pending(self) -> list[ResourceChange]:
        return [change for change in self.changes if change.action != "unchanged" or change.tags]

    def blocked(self, allowed: Collection[Guard] = ()) -> list[str]:
        """The guarded changes whose flag is not among ``allowed``."""
        return [change.message for change in self.guarded if change.guard not in allowed]


@dataclass(frozen=True)
class Call:
    """One AWS call of the apply: a Create*/Update*/TagResource ``request``, or (``request`` None) the
    Describe/List call repeated until the resource has settled."""

    operation: str
    change: ResourceChange
    request: dict[str, Any] | None = None

    @property
    def is_wait(self) -> bool:
        return self.request is None

    def text(self, arns: Mapping[tuple[Kind, str], str] | None = None) -> str:
        """The call as ``--dry-run`` prints it; ``arns``: the ARNs known before the apply, by kind and name
        (a job queue's scheduling policy is sent as its ARN, known once it exists)."""
        if self.request is None:
            settled = "listed" if self.change.kind == "schedulingPolicies" else "VALID"
            return f"{self.operation} until {self.change.title} is {settled}"
        request = dict(self.request)
        if self.change.kind == "jobQueues" and "schedulingPolicyArn" in request:
            policy = name_of(request["schedulingPolicyArn"])
            known = (arns or {}).get(("schedulingPolicies", policy))
            request["schedulingPolicyArn"] = known or f"<the ARN CreateSchedulingPolicy answers for {policy}>"
        return f"{self.operation} {json.dumps(request)}"


def plan_calls(changes: Sequence[ResourceChange]) -> list[Call]:
    """Every AWS call that makes the changes, in order: each Create*/Update*, then the wait until AWS shows
    the resource VALID (a scheduling policy, which has no status: listed; none after its update), then a
    TagResource of tags to add."""
    calls: list[Call] = []
    for change in changes:
        if change.request is not None and change.operation is not None:
            calls.append(Call(change.operation, change, change.request))
            if not (change.kind == "schedulingPolicies" and change.action == "update"):
                calls.append(Call(WAIT_OPERATION[change.kind], change))
        if change.tags:
            arn = change.arn or f"<the ARN of {change.title}>"
            calls.append(Call("TagResource", change, {"resourceArn": arn, "tags": change.tags}))
    return calls


@dataclass(frozen=True)
class AwsState:
    """What AWS has for the file's resources: AWS's answers (Describe*/ListQuotaShares items) by name; quota
    shares by job queue name, then share name."""

    service_environments: Mapping[str, dict[str, Any]]
    scheduling_policies: Mapping[str, dict[str, Any]]
    job_queues: Mapping[str, dict[str, Any]]
    quota_shares: Mapping[str, Mapping[str, dict[str, Any]]]

    def found(self, kind: Kind, name: str, job_queue_name: str | None = None) -> dict[str, Any] | None:
        if kind == "quotaShares":
            return self.quota_shares.get(job_queue_name or "", {}).get(name)
        by_name = {
            "serviceEnvironments": self.service_environments,
            "schedulingPolicies": self.scheduling_policies,
            "jobQueues": self.job_queues,
        }[kind]
        return by_name.get(name)


def plan_apply(
    bundle: Mapping[str, list[dict[str, Any]]],
    state: AwsState,
    defaulted: Mapping[str, Collection[str]] | None = None,
) -> ApplyPlan:
    """The changes that make AWS hold ``bundle`` (``export_design``'s request bodies), in dependency order.

    ``defaulted`` (``export.defaulted_fields``): per job queue, the fields of its body that the file left
    out; an existing job queue keeps AWS's values of those (None: every field is the file's)."""
    plan = ApplyPlan()
    defaulted = defaulted or {}
    bundle = _adopted(bundle, state, defaulted, plan.refusals)
    for kind in KINDS:
        for body in bundle[kind]:
            name = body[NAME_KEY[kind]]
            queue_name = body.get("jobQueue") if kind == "quotaShares" else None
            found = state.found(kind, name, queue_name)
            kept = _kept_as_in_aws(kind, name, defaulted)
            plan.changes.append(_change(kind, name, queue_name, body, found, kept, plan))
    for queue_name, shares in state.quota_shares.items():
        wanted = {b["quotaShareName"] for b in bundle["quotaShares"] if b["jobQueue"] == queue_name}
        plan.left_out += [LeftOut("quotaShares", name, queue_name) for name in shares if name not in wanted]
    return plan


def _kept_as_in_aws(kind: Kind, name: str, defaulted: Mapping[str, Collection[str]]) -> frozenset[str]:
    """The fields of an existing resource that apply leaves as AWS has them: those the file left out."""
    if kind == "serviceEnvironments":
        return frozenset({"state"})  # our file has no state for a service environment
    if kind == "jobQueues":
        return frozenset(defaulted.get(name, ())) & {"priority", "state"}
    return frozenset()


def _adopted(
    bundle: Mapping[str, list[dict[str, Any]]],
    state: AwsState,
    defaulted: Mapping[str, Collection[str]],
    refusals: list[str],
) -> dict[str, list[dict[str, Any]]]:
    """``bundle`` with each existing job queue's service environment and scheduling policy AWS's own where
    the file names none (export named them after the job queue): apply never re-points what the file does
    not ask to re-point."""
    adopted = copy.deepcopy(dict(bundle))
    for queue in adopted["jobQueues"]:
        name = queue["jobQueueName"]
        found = state.job_queues.get(name)
        unset = defaulted.get(name, ())
        if found is None:
            continue
        if "serviceEnvironmentOrder" in unset:
            _adopt_environment(adopted, queue, found, refusals)
        if "schedulingPolicyArn" in unset and isinstance(found.get("schedulingPolicyArn"), str):
            _adopt_policy(adopted, queue, found["schedulingPolicyArn"])
    names = [body["serviceEnvironmentName"] for body in adopted["serviceEnvironments"]]
    for shared in sorted({n for n in names if names.count(n) > 1}):
        users = [
            q["jobQueueName"]
            for q in adopted["jobQueues"]
            if name_of(q["serviceEnvironmentOrder"][0]["serviceEnvironment"]) == shared
        ]
        refusals.append(
            f"service environment {shared} is used by job queues {', '.join(users)} in AWS Batch: our quota "
            "file gives each job queue its own capacity; name each one's service environment with "
            "serviceEnvironmentOrder [{order: 1, serviceEnvironment: NAME}] in the file"
        )
    return adopted


def _adopt_environment(
    bundle: dict[str, list[dict[str, Any]]],
    queue: dict[str, Any],
    found: Mapping[str, Any],
    refusals: list[str],
) -> None:
    theirs = found.get("serviceEnvironmentOrder") or []
    if len(theirs) > 1:
        names = ", ".join(name_of(entry["serviceEnvironment"]) for entry in theirs)
        refusals.append(
            f"job queue {queue['jobQueueName']} uses {len(theirs)} service environments in AWS Batch "
            f"({names}): our quota file gives a job queue one capacity; name the one the file's capacity is "
            "with serviceEnvironmentOrder [{order: 1, serviceEnvironment: NAME}]"
        )
    if len(theirs) != 1:
        return
    ours = name_of(queue["serviceEnvironmentOrder"][0]["serviceEnvironment"])
    their_name = name_of(theirs[0]["serviceEnvironment"])
    for environment in bundle["serviceEnvironments"]:
        if environment["serviceEnvironmentName"] == ours:
            environment["serviceEnvironmentName"] = their_name
    queue["serviceEnvironmentOrder"] = [
        {"order": theirs[0].get("order", 1), "serviceEnvironment": their_name}
    ]


def _adopt_policy(bundle: dict[str, list[dict[str, Any]]], queue: dict[str, Any], their_arn: str) -> None:
    ours, theirs = name_of(queue["schedulingPolicyArn"]), name_of(their_arn)
    queue["schedulingPolicyArn"] = their_arn
    if ours == theirs:
        return
    still_used = any(name_of(q["schedulingPolicyArn"]) == ours for q in bundle["jobQueues"])
    policies = bundle["schedulingPolicies"]
    body = next((policy for policy in policies if policy["name"] == ours), None)
    if body is None:
        return
    if not any(policy["name"] == theirs for policy in policies):
        policies.insert(policies.index(body), {**copy.deepcopy(body), "name": theirs})
    if not still_used:
        policies.remove(body)


def _change(
    kind: Kind,
    name: str,
    queue_name: str | None,
    body: dict[str, Any],
    found: dict[str, Any] | None,
    kept: Collection[str],
    plan: ApplyPlan,
) -> ResourceChange:
    wanted = _compared(kind, body)
    if found is None:
        fields = tuple(FieldChange(path, None, value) for path, value in flatten(wanted).items())
        return ResourceChange(kind, name, queue_name, "create", fields, body)
    wanted = {key: value for key, value in wanted.items() if key not in kept}
    have = _compared(kind, {key: found[key] for key in wanted if key in found})
    old, new = flatten(have), flatten(wanted)
    # A field AWS adds (a default the file leaves out) is no change; a capacity unit the file drops is.
    dropped = [path for path in old if path not in new and path.startswith("capacityLimits.")]
    fields = tuple(
        FieldChange(path, old.get(path), new.get(path))
        for path in [*new, *dropped]
        if old.get(path) != new.get(path)
    )
    changed_keys = [key for key in dict.fromkeys(f.path.split(".", 1)[0] for f in fields) if key != "tags"]
    updatable = set(_update_members(kind))
    tags = _tags_to_set(wanted.get("tags"), found.get("tags"))
    unchanged = ResourceChange(
        kind, name, queue_name, "unchanged", fields, None, tags, found.get(ARN_KEY[kind])
    )
    for key in changed_keys:
        if key not in updatable:
            plan.refusals.append(
                f"{unchanged.title}: {key} is {_shown(have.get(key))} in AWS and {_shown(wanted[key])} in "
                f"the file, and {UPDATE_OPERATION[kind]} cannot change {key}: change the file back, or "
                f"delete the {KIND_NOUN[kind]} in AWS yourself (apply never deletes) and apply again"
            )
    to_update = [key for key in changed_keys if key in updatable]
    if not to_update:
        return unchanged
    for change in fields:
        guard = _guard(kind, change)
        if guard is not None and change.path.split(".", 1)[0] in to_update:
            verb = "lowers it" if guard == "lower" else "re-points it"
            plan.guarded.append(
                GuardedChange(
                    guard,
                    f"{unchanged.title}: {change.path} {_plain(change.old)} -> {_plain(change.new)} {verb}: "
                    f"pass {GUARD_FLAG[guard]} to apply it, or change the file",
                )
            )
    request = {UPDATE_IDENTITY[kind]: found[ARN_KEY[kind]], **{key: body[key] for key in to_update}}
    return replace(unchanged, action="update", request=request)


def _guard(kind: Kind, change: FieldChange) -> Guard | None:
    """Whether an updated field lowers something or re-points a job queue (None: neither)."""
    path, old, new = change.path, change.old, change.new
    if kind == "jobQueues" and path in ("schedulingPolicyArn", "serviceEnvironmentOrder"):
        return "repoint"
    lowers = False
    if path.startswith("capacityLimits."):
        lowers = new is None or (isinstance(old, int) and isinstance(new, int) and new < old)
    elif path == "resourceSharingConfiguration.borrowLimit":
        lowers = _borrowable(new) < _borrowable(old)
    elif path == "resourceSharingConfiguration.strategy":
        lowers = _STRATEGY_RANK.get(str(new), 0) < _STRATEGY_RANK.get(str(old), 0)
    elif path == "state":
        lowers = old == "ENABLED" and new == "DISABLED"
    elif path == "priority":
        lowers = isinstance(old, int) and isinstance(new, int) and new < old
    return "lower" if lowers else None


def _borrowable(borrow_limit: Any) -> float:
    """A borrowLimit as an amount: -1 (AWS's default, also when not set) is no limit."""
    return float("inf") if borrow_limit in (None, -1) else float(borrow_limit)


def _plain(value: Any) -> str:
    return "-" if value is None else str(value)


def _compared(kind: Kind, document: dict[str, Any]) -> dict[str, Any]:
    """The fields of a body or answer that apply compares: without the name (and a share's ``jobQueue``),
    references by name (AWS answers with ARNs)."""
    compared = {k: v for k, v in document.items() if k not in (NAME_KEY[kind], "jobQueue")}
    if kind == "jobQueues":
        if "schedulingPolicyArn" in compared:
            compared["schedulingPolicyArn"] = name_of(compared["schedulingPolicyArn"])
        if "serviceEnvironmentOrder" in compared:
            compared["serviceEnvironmentOrder"] = sorted(
                (
                    {"order": e["order"], "serviceEnvironment": name_of(e["serviceEnvironment"])}
                    for e in compared["serviceEnvironmentOrder"]
                ),
                key=lambda e: e["order"],
            )
    if "capacityLimits" in compared:
        compared["capacityLimits"] = sorted(compared["capacityLimits"], key=lambda c: c["capacityUnit"])
    return compared


def _shown(value: Any) -> str:
    return "not set" if value is None else repr(value)


def _tags_to_set(wanted: dict[str, str] | None, have: dict[str, str] | None) -> dict[str, str] | None:
    missing = {key: value for key, value in (wanted or {}).items() if (have or {}).get(key) != value}
    return missing or None


def _update_members(kind: Kind) -> list[str]:
    shape = batch_model().operation_model(UPDATE_OPERATION[kind]).input_shape
    assert shape is not None
    return list(shape.members)


def flatten(document: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """Dotted field paths to values; capacity limits keyed by their unit (``capacityLimits.ml.g5.xlarge``),
    tags by key (``tags.airflow-quota:scheduler``), a service environment order as ``order:name`` items."""
    fields: dict[str, Any] = {}
    for key, value in (document or {}).items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            fields |= flatten(value, f"{path}.")
        elif key == "capacityLimits" and isinstance(value, list):
            fields |= {f"{path}.{limit['capacityUnit']}": limit.get("maxCapacity") for limit in value}
        elif key == "serviceEnvironmentOrder" and isinstance(value, list):
            fields[path] = ", ".join(f"{e['order']}:{e['serviceEnvironment']}" for e in value)
        else:
            fields[path] = value
    return fields
