"""What ``airflow quota apply --to-aws`` would change in AWS Batch: the export's request bodies against what
AWS has, per resource (pure: no AWS call here).

Each resource of the export is new (a Create* request), changed (an Update* request with the changed fields
only, each shown old -> new) or unchanged. Which fields an Update* takes is read from the installed botocore
model; a change to a field no Update* takes (a service environment's type, a job queue's type) is a refusal
named by field, found before anything is sent. A job queue's tags are set with TagResource (tags are only
ever added or overwritten). Quota shares AWS has in a job queue of the file that the file leaves out are
listed apart: apply never deletes.
"""

from __future__ import annotations

from collections.abc import Mapping
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

Action = Literal["create", "update", "unchanged"]


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


@dataclass
class ApplyPlan:
    #: In dependency order: service environments, scheduling policies, job queues, quota shares.
    changes: list[ResourceChange] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    #: Changes AWS has no Update* for, each naming its field and the fix.
    refusals: list[str] = field(default_factory=list)

    def pending(self) -> list[ResourceChange]:
        return [change for change in self.changes if change.action != "unchanged" or change.tags]


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


def plan_apply(bundle: Mapping[str, list[dict[str, Any]]], state: AwsState) -> ApplyPlan:
    """The changes that make AWS hold ``bundle`` (``export_design``'s request bodies), in dependency order."""
    plan = ApplyPlan()
    for kind in KINDS:
        for body in bundle[kind]:
            name = body[NAME_KEY[kind]]
            queue_name = body.get("jobQueue") if kind == "quotaShares" else None
            found = state.found(kind, name, queue_name)
            plan.changes.append(_change(kind, name, queue_name, body, found, plan.refusals))
    for queue_name, shares in state.quota_shares.items():
        wanted = {b["quotaShareName"] for b in bundle["quotaShares"] if b["jobQueue"] == queue_name}
        plan.left_out += [LeftOut("quotaShares", name, queue_name) for name in shares if name not in wanted]
    return plan


def _change(
    kind: Kind,
    name: str,
    queue_name: str | None,
    body: dict[str, Any],
    found: dict[str, Any] | None,
    refusals: list[str],
) -> ResourceChange:
    wanted = _compared(kind, body)
    if found is None:
        fields = tuple(FieldChange(path, None, value) for path, value in flatten(wanted).items())
        return ResourceChange(kind, name, queue_name, "create", fields, body)
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
            refusals.append(
                f"{unchanged.title}: {key} is {_shown(have.get(key))} in AWS and {_shown(wanted[key])} in "
                f"the file, and {UPDATE_OPERATION[kind]} cannot change {key}: change the file back, or "
                f"delete the {KIND_NOUN[kind]} in AWS yourself (apply never deletes) and apply again"
            )
    to_update = [key for key in changed_keys if key in updatable]
    if not to_update:
        return unchanged
    request = {UPDATE_IDENTITY[kind]: found[ARN_KEY[kind]], **{key: body[key] for key in to_update}}
    return replace(unchanged, action="update", request=request)


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
